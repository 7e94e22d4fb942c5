import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync, appendFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { DurableQueue, QueueError } from '../../../agent/sinks/collector/queue.js';

const dirs: string[] = [];
const open: DurableQueue[] = [];
const children: ChildProcess[] = [];

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'pw-queue-'));
  dirs.push(d);
  return d;
}
function openQ(dir: string, extra: Partial<Parameters<typeof DurableQueue.open>[0]> = {}): DurableQueue {
  const q = DurableQueue.open({ dir, ...extra });
  open.push(q);
  return q;
}
function texts(q: DurableQueue, n = 1_000_000): string[] {
  return q.peek(n).map((r) => r.payload.toString('utf8'));
}
function segments(dir: string): string[] {
  return readdirSync(dir).filter((n) => n.endsWith('.pwq')).sort();
}

afterEach(async () => {
  for (const q of open.splice(0)) await q.close().catch(() => undefined);
});
afterAll(() => {
  for (const c of children) if (c.pid && c.exitCode === null && c.signalCode === null) process.kill(c.pid, 'SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('DurableQueue', () => {
  it('keeps FIFO order, acks by position and continues after a clean reopen', async () => {
    const dir = tempDir();
    const q = openQ(dir);
    for (let i = 0; i < 5; i++) q.append(`e${i}`);
    const batch = q.peek(2);
    expect(batch.map((r) => r.payload.toString())).toEqual(['e0', 'e1']);
    expect(q.peek(2).map((r) => r.payload.toString())).toEqual(['e0', 'e1']); // peek does not remove
    q.ack(batch[1]!.pos);
    expect(q.depth()).toBe(3);
    q.ack(batch[0]!.pos); // older position: ignored
    expect(q.depth()).toBe(3);
    await q.close();

    const q2 = openQ(dir);
    expect(q2.depth()).toBe(3);
    q2.append('e5');
    expect(texts(q2)).toEqual(['e2', 'e3', 'e4', 'e5']);
  });

  it('loses nothing when the process dies without close (reopen from disk)', () => {
    const dir = tempDir();
    const q = DurableQueue.open({ dir }); // deliberately never closed: a crash
    for (let i = 0; i < 100; i++) q.append(JSON.stringify({ i }));
    const b = q.peek(10);
    q.ack(b[9]!.pos);
    const q2 = openQ(dir);
    expect(q2.depth()).toBe(90);
    expect(texts(q2).map((t) => (JSON.parse(t) as { i: number }).i)).toEqual(Array.from({ length: 90 }, (_, k) => k + 10));
  });

  it('detects a torn record at the tail, truncates it, counts it and keeps appending', async () => {
    const dir = tempDir();
    const q = openQ(dir);
    q.append('one'); q.append('two'); q.append('three');
    await q.close();
    const seg = join(dir, segments(dir)[0]!);
    const goodSize = statSync(seg).size;
    // Half of a record: header claims 100 bytes of payload, only 10 follow (crash mid-write).
    const header = Buffer.alloc(12);
    header.write('PWQ1', 0, 'latin1');
    header.writeUInt32BE(100, 4);
    header.writeUInt32BE(0xdeadbeef, 8);
    appendFileSync(seg, Buffer.concat([header, Buffer.alloc(10, 0x61)]));

    const q2 = openQ(dir);
    expect(q2.stats()).toMatchObject({ depth: 3, torn: 1, corrupt: 0 });
    expect(statSync(seg).size).toBe(goodSize);
    q2.append('four');
    expect(texts(q2)).toEqual(['one', 'two', 'three', 'four']);
    await q2.close();
    // Counted once: the tail was cut, so a further reopen finds nothing torn.
    const q3 = openQ(dir);
    expect(q3.stats()).toMatchObject({ depth: 4, torn: 1 });
  });

  it('detects a header-only torn write (crash before the payload)', async () => {
    const dir = tempDir();
    const q = openQ(dir);
    q.append('a');
    await q.close();
    appendFileSync(join(dir, segments(dir)[0]!), Buffer.from('PWQ1\0\0', 'latin1'));
    const q2 = openQ(dir);
    expect(q2.stats()).toMatchObject({ depth: 1, torn: 1 });
    expect(texts(q2)).toEqual(['a']);
  });

  it('skips a corrupt record in the middle (CRC mismatch) and counts it', async () => {
    const dir = tempDir();
    const q = openQ(dir);
    q.append('first-record'); q.append('second-record'); q.append('third-record');
    await q.close();
    const seg = join(dir, segments(dir)[0]!);
    const bytes = readFileSync(seg);
    const at = bytes.indexOf('second-record');
    bytes.writeUInt8(bytes.readUInt8(at + 3) ^ 0xff, at + 3);
    writeFileSync(seg, bytes);
    const q2 = openQ(dir);
    expect(q2.stats()).toMatchObject({ depth: 2, corrupt: 1, torn: 0 });
    expect(texts(q2)).toEqual(['first-record', 'third-record']);
  });

  it('rolls segments, deletes acked ones, and stays within maxBytes by dropping the oldest (counted, persisted)', async () => {
    const dir = tempDir();
    const maxBytes = 16 * 1024;
    const q = openQ(dir, { maxBytes, segmentBytes: 4096 });
    const payload = (i: number): string => `${String(i).padStart(6, '0')}:${'x'.repeat(100)}`;
    for (let i = 0; i < 1000; i++) {
      q.append(payload(i));
      expect(q.stats().bytes).toBeLessThanOrEqual(maxBytes);
    }
    const s = q.stats();
    expect(s.dropped + s.depth).toBe(1000);
    expect(s.dropped).toBeGreaterThan(800);
    expect(s.segments).toBeLessThanOrEqual(5);
    const kept = texts(q);
    expect(kept.length).toBe(s.depth);
    // The newest survive, in order, contiguous up to the last one appended.
    const ids = kept.map((t) => Number(t.slice(0, 6)));
    expect(ids[ids.length - 1]).toBe(999);
    expect(ids).toEqual(Array.from({ length: ids.length }, (_, k) => 1000 - ids.length + k));
    // Ack everything: acked segments are deleted, one (active) remains.
    q.ack(q.peek(10_000).at(-1)!.pos);
    expect(q.depth()).toBe(0);
    expect(segments(dir).length).toBe(1);
    await q.close();
    const q2 = openQ(dir, { maxBytes, segmentBytes: 4096 });
    expect(q2.stats().dropped).toBe(s.dropped);
    expect(q2.depth()).toBe(0);
  });

  it('drops only unacked records of a partly acked oldest segment', () => {
    const dir = tempDir();
    const q = openQ(dir, { maxBytes: 4096 * 4, segmentBytes: 4096 });
    const rec = 'y'.repeat(1000); // ~4 per segment
    for (let i = 0; i < 4; i++) q.append(rec);
    const b = q.peek(2);
    q.ack(b[1]!.pos);
    for (let i = 0; i < 16; i++) q.append(rec);
    const s = q.stats();
    expect(s.dropped + s.depth).toBe(18);
  });

  it('peek honours maxRecords and maxBytes and spans segments', () => {
    const dir = tempDir();
    const q = openQ(dir, { maxBytes: 64 * 1024, segmentBytes: 1024 });
    for (let i = 0; i < 50; i++) q.append(`${i}:${'z'.repeat(90)}`);
    expect(segments(dir).length).toBeGreaterThan(3);
    expect(q.peek(30).length).toBe(30);
    expect(q.peek(100, 500).length).toBe(6); // stops once 500 payload bytes are reached
    const all = q.peek(100);
    expect(all.map((r) => Number(r.payload.toString().split(':')[0]))).toEqual(Array.from({ length: 50 }, (_, k) => k));
    q.ack(all[24]!.pos);
    expect(q.peek(1)[0]!.payload.toString().startsWith('25:')).toBe(true);
  });

  it('rejects records over the limit with a clear error', () => {
    const q = openQ(tempDir(), { maxRecordBytes: 100 });
    expect(() => q.append('x'.repeat(101))).toThrow(QueueError);
    expect(() => q.append('x'.repeat(101))).toThrow(/exceeds the queue's limit of 100 bytes/);
    expect(q.depth()).toBe(0);
  });

  it('fsync-per-append mode works and recovers the same way', () => {
    const dir = tempDir();
    const q = DurableQueue.open({ dir, fsyncIntervalMs: 0 });
    for (let i = 0; i < 20; i++) q.append(`s${i}`);
    const q2 = openQ(dir);
    expect(q2.depth()).toBe(20);
  });

  it('recovers from an unreadable meta.json by re-reading from the oldest segment', async () => {
    const dir = tempDir();
    const q = openQ(dir);
    q.append('a'); q.append('b');
    q.ack(q.peek(1)[0]!.pos);
    await q.close();
    writeFileSync(join(dir, 'meta.json'), '{"v":1,"cursor":');
    const q2 = openQ(dir);
    expect(texts(q2)).toEqual(['a', 'b']); // re-delivered, never lost (the collector dedups by id)
  });

  it('refuses a queue dir held by another live process', async () => {
    const dir = tempDir();
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    children.push(child);
    await new Promise((r) => child.once('spawn', r));
    writeFileSync(join(dir, 'lock'), `${child.pid}\n`);
    expect(() => DurableQueue.open({ dir })).toThrow(/in use by process/);
    process.kill(child.pid!, 'SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const q = openQ(dir); // stale lock of a dead process is taken over
    expect(q.depth()).toBe(0);
  });

  it('says clearly when the queue dir cannot be used', () => {
    const file = join(tempDir(), 'not-a-dir');
    writeFileSync(file, 'x');
    expect(() => DurableQueue.open({ dir: join(file, 'q') })).toThrow(/cannot open the event queue in .*not-a-dir\/q: (ENOTDIR|EEXIST)/);
  });
});
