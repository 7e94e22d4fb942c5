/**
 * A real crash: a child process appends to the queue as fast as it can and is SIGKILLed. Every
 * record whose append() had returned (the child says so on stdout, synchronously) is there after
 * reopening, in order, with no gap and no corrupt record.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { DurableQueue } from '../../../agent/sinks/collector/queue.js';
import { waitFor } from './helpers.js';

const ROOT = resolve(__dirname, '../../..');
const dirs: string[] = [];
const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) if (c.pid && c.exitCode === null && c.signalCode === null) process.kill(c.pid, 'SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const CHILD = `
  const { DurableQueue } = await import('./agent/sinks/collector/queue.ts');
  const q = DurableQueue.open({ dir: process.env.QDIR, maxBytes: 256 * 1024 * 1024, segmentBytes: 256 * 1024 });
  const pad = 'x'.repeat(300);
  for (let i = 0; ; i++) {
    q.append(JSON.stringify({ i, pad }));
    if (i % 50 === 0) process.stdout.write(i + '\\n');
  }
`;

describe('queue survives SIGKILL mid-stream', () => {
  it('keeps every appended record, contiguous and in order', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pw-crash-'));
    dirs.push(dir);
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', CHILD], {
      cwd: ROOT, env: { ...process.env, QDIR: dir }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    let out = '';
    let err = '';
    child.stdout!.on('data', (d: Buffer) => { out += d.toString(); });
    child.stderr!.on('data', (d: Buffer) => { err += d.toString(); });
    const lastAcked = (): number => Number(out.trim().split('\n').at(-1) ?? -1);
    await waitFor(() => lastAcked() >= 10_000 || child.exitCode !== null, 'the child appending', 60_000);
    expect(child.exitCode, err).toBeNull();
    const exited = new Promise((r) => child.once('exit', r));
    process.kill(child.pid!, 'SIGKILL');
    await exited;
    const acked = lastAcked();

    const q = DurableQueue.open({ dir, maxBytes: 256 * 1024 * 1024, segmentBytes: 256 * 1024 });
    try {
      const st = q.stats();
      expect(st.corrupt).toBe(0);
      expect(st.torn).toBeLessThanOrEqual(1);
      expect(st.depth).toBeGreaterThan(acked);
      expect(st.segments).toBeGreaterThan(1);
      let expectNext = 0;
      for (;;) {
        const batch = q.peek(2000);
        if (!batch.length) break;
        for (const r of batch) expect((JSON.parse(r.payload.toString()) as { i: number }).i).toBe(expectNext++);
        q.ack(batch.at(-1)!.pos);
      }
      expect(expectNext).toBe(st.depth);
    } finally {
      await q.close();
    }
  });
});
