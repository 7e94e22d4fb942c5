/** containerd/ items against a real containerd (test harness), its socket and root. */
import { execFile } from 'node:child_process';
import { createWriteStream, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeBundle, type Manifest } from '../../../agent/bundle/bundle.js';
import { silentLogger } from '../../../common/log.js';
import { startContainerd, type RunningContainerd } from '../../harness/containerd.js';

const execFileP = promisify(execFile);
let c: RunningContainerd;
let work: string;
let manifest: Manifest;
let dir: string;

beforeAll(async () => {
  c = await startContainerd({ version: '1.6' });
  work = await mkdtemp(join(tmpdir(), 'pw-bundle-ctrd-'));
  const bin = join(work, 'bin');
  await mkdir(bin);
  await symlink(c.ctrBinary, join(bin, 'ctr'));
  await symlink(c.binary, join(bin, 'containerd'));
  await mkdir(join(work, 'host/etc/containerd'), { recursive: true });
  await symlink(c.configPath, join(work, 'host/etc/containerd/config.toml'));
  const file = join(work, 'b.tar.gz');
  const now = Date.now();
  manifest = await writeBundle({
    hostRoot: join(work, 'host'), sinceMs: now - 3600_000, untilMs: now, fileCap: 1 << 20, commandTimeoutMs: 20_000, redact: true, exec: 'local',
    goroutines: false, toolPath: `${bin}:${dirname(process.execPath)}`, containerdSocket: c.socket, containerdRoot: c.root, only: ['containerd/', 'pullwatch/containerd-ingests'],
  }, createWriteStream(file), silentLogger());
  dir = join(work, 'x');
  await mkdir(dir);
  await execFileP('tar', ['-xzf', file, '-C', dir]);
}, 120_000);

afterAll(async () => {
  await c?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

describe('containerd/ items with a real containerd', () => {
  const item = (p: string) => manifest.items.find((i) => i.path === p)!;

  it('runs ctr against the given socket: version, namespaces, images, containers, tasks, plugins, snapshots', () => {
    for (const p of ['containerd/containerd-version.txt', 'containerd/containerd-namespaces.txt', 'containerd/containerd-images.txt', 'containerd/containerd-containers.txt',
      'containerd/containerd-tasks.txt', 'containerd/containerd-plugins.txt', 'containerd/containerd-snapshots.txt', 'containerd/containerd-content-active.txt']) {
      expect(item(p).status, `${p}: ${item(p).error ?? ''}`).toBe('ok');
      expect(item(p).command).toEqual(expect.arrayContaining(['--address', c.socket]));
    }
    expect(readFileSync(join(dir, 'containerd/containerd-version.txt'), 'utf8')).toMatch(/Server:[\s\S]*Version:/);
    expect(readFileSync(join(dir, 'containerd/containerd-plugins.txt'), 'utf8')).toMatch(/io\.containerd\.content\.v1\s+content/);
  });

  it('dumps the effective config and copies config.toml', () => {
    expect(item('containerd/containerd-config.txt').status).toBe('ok');
    expect(readFileSync(join(dir, 'containerd/containerd-config.txt'), 'utf8')).toContain(c.root);
    expect(item('containerd/config.toml').status).toBe('ok');
  });

  it('reads the ingest dir under the containerd root', () => {
    const j = JSON.parse(readFileSync(join(dir, 'pullwatch/containerd-ingests.json'), 'utf8')) as { dir: string; ingests: unknown[] };
    expect(j.dir).toBe(join(c.root, 'io.containerd.content.v1.content/ingest'));
    expect(Array.isArray(j.ingests)).toBe(true);
  });
});
