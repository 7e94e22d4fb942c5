import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { parse } from 'smol-toml';
import { setTomlValue, verifyTomlEdit, getPath, findKv, scanToml } from '../../../agent/tune/toml-edit.js';

/** Random containerd-like configs: comments, indentation, quoting styles, arrays spanning lines, sub-tables. */
const key = fc.constantFrom('sandbox_image', 'snapshotter', 'max_concurrent_downloads', 'enable_cdi', 'config_path', 'image_pull_progress_timeout');
const value = fc.oneof(
  fc.constantFrom('"registry.k8s.io/pause:3.9"', "'overlayfs'", '3', 'true', '"1m0s"', '[\n  "a",\n  "[b]",\n]', '["x", "y"]', '"""\nmulti\n"""', '{ a = 1 }'),
);
const comment = fc.constantFrom('', ' # note', '  # [not a table]');
const indent = fc.constantFrom('', '  ', '    ');
const body = fc.uniqueArray(fc.tuple(key, value, comment, indent), { selector: (t) => t[0], maxLength: 4 });
const tableName = fc.constantFrom('[plugins."io.containerd.grpc.v1.cri"]', "[plugins.'io.containerd.grpc.v1.cri'.registry]", '[plugins."io.containerd.grpc.v1.cri".containerd]', '[grpc]', '[debug]');
const doc = fc.tuple(
  fc.constantFrom('', '# top comment\n', 'version = 2\n', '# c\nversion = 2\nroot = "/var/lib/containerd"\n'),
  fc.uniqueArray(fc.tuple(tableName, body, fc.constantFrom('', '# section comment\n')), { selector: (t) => t[0], maxLength: 4 }),
).map(([head, tables]) => head + tables.map(([t, kvs, c]) => `\n${c}${t}\n${kvs.map(([k, v, cm, ind]) => `${ind}${k} = ${v}${cm}`).join('\n')}\n`).join(''));

describe('setTomlValue (property)', () => {
  it('on any parseable config: sets exactly the key, keeps every original line that held no old value', () => {
    fc.assert(fc.property(doc, fc.constantFrom('6m0s', '30s', '1h0m0s'), (text, v) => {
      let parsed: unknown;
      try { parsed = parse(text); } catch { return true; } // generator can produce redefinitions; skip those
      const table = ['plugins', 'io.containerd.grpc.v1.cri'];
      const out = setTomlValue(text, table, 'image_pull_progress_timeout', JSON.stringify(v));
      verifyTomlEdit(text, out, [{ path: [...table, 'image_pull_progress_timeout'], value: v }]);
      expect(getPath(parse(out), [...table, 'image_pull_progress_timeout'])).toBe(v);
      void parsed;
      // every line outside the old value's text survives verbatim
      const old = findKv(scanToml(text), [...table, 'image_pull_progress_timeout']);
      const kept = old ? text.slice(0, old.valueStart) + text.slice(old.valueEnd) : text;
      for (const line of kept.split('\n')) {
        if (old && line.includes('image_pull_progress_timeout')) continue;
        expect(out).toContain(line);
      }
      // idempotent: setting the same value again changes nothing
      expect(setTomlValue(out, table, 'image_pull_progress_timeout', JSON.stringify(v))).toBe(out);
      return true;
    }), { numRuns: 400 });
  });
});
