import { describe, expect, it } from 'vitest';
import { parse } from 'smol-toml';
import { scanToml, setTomlValue, addTomlImport, verifyTomlEdit, findKv, getPath, TomlEditError } from '../../../agent/tune/toml-edit.js';

const V2 = `# my containerd config
version = 2
root = "/var/lib/containerd"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    # the pause image
    sandbox_image = "registry.k8s.io/pause:3.9" # pinned
    image_pull_progress_timeout = "1m0s"   # too short?
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "/etc/containerd/certs.d"
      mirrors = [
        "[not a header]",
        "x",
      ]
`;
const T = ['plugins', 'io.containerd.grpc.v1.cri'];

describe('toml scan', () => {
  it('locates keys, dotted tables and ignores brackets in arrays', () => {
    const s = scanToml(V2);
    expect(findKv(s, [...T, 'image_pull_progress_timeout'])?.line).toBe(9);
    expect(s.headers.map((h) => h.path.join('/'))).toEqual(['plugins', 'plugins/io.containerd.grpc.v1.cri', 'plugins/io.containerd.grpc.v1.cri/registry']);
  });
});

describe('setTomlValue', () => {
  it('replaces only the value, keeping comments and spacing', () => {
    const out = setTomlValue(V2, T, 'image_pull_progress_timeout', '"6m0s"');
    expect(out).toBe(V2.replace('"1m0s"', '"6m0s"'));
    verifyTomlEdit(V2, out, [{ path: [...T, 'image_pull_progress_timeout'], value: '6m0s' }]);
  });
  it('inserts into an existing table after its last key, with its indentation', () => {
    const src = V2.replace('    image_pull_progress_timeout = "1m0s"   # too short?\n', '');
    const out = setTomlValue(src, T, 'image_pull_progress_timeout', '"6m0s"');
    expect(out).toContain('    sandbox_image = "registry.k8s.io/pause:3.9" # pinned\n    image_pull_progress_timeout = "6m0s"\n    [plugins."io.containerd.grpc.v1.cri".registry]');
    verifyTomlEdit(src, out, [{ path: [...T, 'image_pull_progress_timeout'], value: '6m0s' }]);
  });
  it('appends a table when absent', () => {
    const src = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\nsnapshotter = "overlayfs"\n';
    const out = setTomlValue(src, T, 'image_pull_progress_timeout', '"6m0s"');
    expect(out.startsWith(src)).toBe(true);
    expect(getPath(parse(out), [...T, 'image_pull_progress_timeout'])).toBe('6m0s');
    verifyTomlEdit(src, out, [{ path: [...T, 'image_pull_progress_timeout'], value: '6m0s' }]);
  });
  it('refuses edits that change more than the key (inline table defines the plugin)', () => {
    const src = 'version = 2\n[plugins]\n"io.containerd.grpc.v1.cri" = { sandbox_image = "x" }\n';
    const out = setTomlValue(src, T, 'image_pull_progress_timeout', '"6m0s"');
    expect(() => verifyTomlEdit(src, out, [{ path: [...T, 'image_pull_progress_timeout'], value: '6m0s' }])).toThrow(TomlEditError);
  });
  it('refuses duplicate keys (they do not parse)', () => {
    const src = '[a]\nx = 1\nx = 2\n';
    expect(() => verifyTomlEdit(src, src, [])).toThrow(/original does not parse/);
  });
});

describe('addTomlImport', () => {
  it('adds to single-line, multi-line and missing imports', () => {
    expect(addTomlImport('version = 2\nimports = ["/a.toml"]\n', '/b.toml')).toBe('version = 2\nimports = ["/a.toml", "/b.toml"]\n');
    expect(addTomlImport('imports = []\n', '/b.toml')).toBe('imports = ["/b.toml"]\n');
    expect(addTomlImport('imports = [\n  "/a.toml",\n]\n', '/b.toml')).toBe('imports = [\n  "/a.toml",\n  "/b.toml",\n]\n');
    expect(addTomlImport('root = "/x"\nversion = 3\n\n[grpc]\naddress = "/s"\n', '/b.toml')).toBe('root = "/x"\nversion = 3\nimports = ["/b.toml"]\n\n[grpc]\naddress = "/s"\n');
    expect(addTomlImport('# only tables\n[grpc]\naddress = "/s"\n', '/b.toml')).toBe('# only tables\nimports = ["/b.toml"]\n\n[grpc]\naddress = "/s"\n');
  });
});
