import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ContainerdIngestSource } from '../../../agent/sources/containerd/ingest-source.js';
import { assertSane, tempDir, testCtx } from './helpers.js';
import { ContentStore } from './layout.js';

/** A separate process creates and deletes ingest dirs as fast as it can, while we poll. */
const RACER = `
const fs = require('node:fs'); const path = require('node:path'); const crypto = require('node:crypto');
const dir = process.argv[1]; let i = 0;
for (;;) {
  const ref = 'k8s.io/' + i + '/layer-sha256:' + crypto.createHash('sha256').update(String(i)).digest('hex');
  const d = path.join(dir, crypto.createHash('sha256').update(ref).digest('hex'));
  fs.mkdirSync(d);
  fs.writeFileSync(path.join(d, 'ref'), ref);
  // startedat/updatedat are written to <name>.tmp and renamed, as content/local/store.go does.
  for (const f of ['startedat', 'updatedat']) {
    fs.writeFileSync(path.join(d, f + '.tmp'), '2026-01-01T00:00:00.123456789Z');
    fs.renameSync(path.join(d, f + '.tmp'), path.join(d, f));
  }
  fs.writeFileSync(path.join(d, 'total'), '100');
  fs.writeFileSync(path.join(d, 'data'), Buffer.alloc(100));
  if (i >= 8) fs.rmSync(path.join(dir, fs.readdirSync(dir).sort()[0]), { recursive: true, force: true });
  i++;
}`;

let racer: ChildProcess | undefined;
const cleanups: Array<() => void> = [];
afterEach(() => {
  if (racer?.pid) { try { process.kill(racer.pid, 'SIGKILL'); } catch { /* already gone */ } }
  racer = undefined;
  for (const c of cleanups.splice(0)) c();
});

describe('ContainerdIngestSource while dirs vanish between readdir and read', () => {
  it('never throws, never emits impossible numbers, and does not report the race as bad input', async () => {
    const tmp = tempDir('pw-race-');
    cleanups.push(tmp.cleanup);
    const store = new ContentStore(join(tmp.path, 'root')).init();
    racer = spawn(process.execPath, ['-e', RACER, store.ingest], { stdio: ['ignore', 'ignore', 'pipe'] });
    let racerErr = '';
    racer.stderr?.on('data', (b: Buffer) => { racerErr += b.toString(); });
    const t = testCtx();
    const source = new ContainerdIngestSource({ root: store.root, pollMs: 1000 });
    await source.start(t.ctx);
    // Poll until enough races have been seen (bounded: the machine may be loaded).
    const deadline = Date.now() + 30_000;
    let polls = 0;
    const closedSoFar = () => t.ingests().reduce((n, o) => n + o.closed.length, 0);
    const presentSoFar = () => t.ingests().reduce((n, o) => n + o.present.length, 0);
    while (Date.now() < deadline && (polls < 100 || closedSoFar() <= 20 || presentSoFar() <= 100)) {
      source.pollOnce();
      polls++;
      await new Promise((r) => setImmediate(r));
    }
    await source.stop();
    expect(racerErr).toBe('');
    expect(polls).toBeGreaterThanOrEqual(100);
    const all = t.ingests();
    const statuses = all.flatMap((o) => o.present);
    expect(statuses.length).toBeGreaterThan(100);
    for (const s of statuses) {
      assertSane(s);
      expect(s.offset).toBeGreaterThanOrEqual(0);
      expect(s.offset).toBeLessThanOrEqual(100);
      if (s.total !== undefined) expect(s.total).toBe(100);
      expect(s.ref).toMatch(/^k8s\.io\/\d+\/layer-sha256:[a-f0-9]{64}$/);
    }
    expect(all.flatMap((o) => o.closed).length).toBeGreaterThan(20);
    expect(t.health.snapshot()).toEqual([]);
  });
});
