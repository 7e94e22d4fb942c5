/**
 * A small durable FIFO queue on disk, for the agent's events while the collector is away.
 *
 * Layout of `dir`:
 *   seg-000000000001.pwq …   append-only segment files of records
 *   meta.json                the ack cursor (segment, byte offset, record index) and counters
 *   lock                     pid of the process that has the queue open
 *
 * Record: 12-byte header + payload.
 *   magic "PWQ1" (4) · payload length u32 BE (4) · CRC-32 of (length bytes + payload) u32 BE (4)
 * A torn write (crash in the middle of an append) leaves a record whose length runs past the end
 * of the file or whose CRC does not match: on open the tail of the newest segment is truncated to
 * the last good record and counted in `torn`; a bad region in the middle of a segment is skipped by
 * scanning for the next valid header and counted in `corrupt`.
 *
 * fsync policy: `append()` writes the whole record with one synchronous write(2), so once it returns
 * the record survives a crash of the process. The data is fdatasync'ed in the background at most
 * `fsyncIntervalMs` later (default 100 ms), so a power loss or kernel crash can lose at most the
 * records of that window; `fsyncIntervalMs: 0` fdatasyncs inside every append. New segment files
 * get their directory fsynced too. The ack cursor (meta.json) is written with write-to-temp +
 * fsync + rename; losing the newest ack only re-delivers events, which the collector deduplicates
 * by id.
 *
 * Bounded: when the segments together exceed `maxBytes`, whole oldest segments are deleted and the
 * records in them that were not yet acked are counted in `dropped` (persisted, so the count keeps
 * growing across restarts). Memory is constant: the queue keeps only the list of segments (at most
 * maxBytes / segmentBytes + 1 entries) and reads records from disk when asked.
 *
 * No npm library did this: the persistent queues on npm are SQLite/Redis/DB-backed job runners, not
 * a bounded append-only log with torn-write detection, so this is a small one written for pullwatch.
 */
import {
  closeSync, constants as fsConstants, fdatasync, fdatasyncSync, fsyncSync, ftruncateSync, mkdirSync,
  openSync, readdirSync, readFileSync, readSync, renameSync, unlinkSync, writeFileSync, writeSync, fstatSync,
} from 'node:fs';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { z } from 'zod';
import type { Logger } from '../../../common/log.js';

const MAGIC = Buffer.from('PWQ1', 'latin1');
const HEADER_BYTES = 12;
const SEGMENT_RE = /^seg-(\d{12})\.pwq$/;
const SCAN_CHUNK = 64 * 1024;

export interface DurableQueueOptions {
  dir: string;
  /** Upper bound of all segment files together (default 64 MiB). */
  maxBytes?: number;
  /** Size at which a new segment is started (default 4 MiB, at most maxBytes / 4). */
  segmentBytes?: number;
  /** Largest payload accepted by append() (default 1 MiB, at most segmentBytes - header). */
  maxRecordBytes?: number;
  /** Background fdatasync delay after an append (default 100 ms); 0 = fdatasync in every append. */
  fsyncIntervalMs?: number;
  logger?: Logger;
}

/** Where a record ends: pass it to ack() to remove that record and everything before it. */
export interface QueuePosition { seg: number; off: number; idx: number }

export interface QueueRecord { payload: Buffer; pos: QueuePosition }

export interface QueueStats {
  /** Records appended and not yet acked (nor dropped). */
  depth: number;
  /** Bytes of all segment files. */
  bytes: number;
  segments: number;
  /** Records deleted unacked because the queue was full (since the queue dir was created). */
  dropped: number;
  /** Torn records found at the end of a segment on open (crash during a write). */
  torn: number;
  /** Corrupt regions skipped in the middle of a segment. */
  corrupt: number;
}

export class QueueError extends Error {}

interface Segment { seq: number; path: string; size: number; records: number }

const MetaSchema = z.object({
  v: z.literal(1),
  cursor: z.object({ seg: z.number().int().nonnegative(), off: z.number().int().nonnegative(), idx: z.number().int().nonnegative() }),
  dropped: z.number().int().nonnegative(),
  torn: z.number().int().nonnegative(),
  corrupt: z.number().int().nonnegative(),
});
type Meta = z.infer<typeof MetaSchema>;

function segName(seq: number): string { return `seg-${String(seq).padStart(12, '0')}.pwq`; }

function comparePos(a: { seg: number; off: number }, b: { seg: number; off: number }): number {
  return a.seg !== b.seg ? a.seg - b.seg : a.off - b.off;
}

function recordCrc(lenBytes: Buffer, payload: Buffer): number {
  return crc32(payload, crc32(lenBytes));
}

function encodeRecord(payload: Buffer): Buffer {
  const out = Buffer.allocUnsafe(HEADER_BYTES + payload.length);
  MAGIC.copy(out, 0);
  out.writeUInt32BE(payload.length, 4);
  out.writeUInt32BE(recordCrc(out.subarray(4, 8), payload), 8);
  payload.copy(out, HEADER_BYTES);
  return out;
}

function readFully(fd: number, buf: Buffer, position: number): number {
  let done = 0;
  while (done < buf.length) {
    const n = readSync(fd, buf, done, buf.length - done, position + done);
    if (n === 0) break;
    done += n;
  }
  return done;
}

type ReadResult = { ok: true; payload: Buffer; next: number } | { ok: false; next: number };

export class DurableQueue {
  readonly dir: string;
  private readonly maxBytes: number;
  private readonly segmentBytes: number;
  private readonly maxRecordBytes: number;
  private readonly fsyncIntervalMs: number;
  private readonly logger: Logger | undefined;
  private segments: Segment[] = [];
  private activeFd = -1;
  private retiredFds: number[] = [];
  private dirSyncPending = false;
  private totalBytes = 0;
  private meta: Meta = { v: 1, cursor: { seg: 1, off: 0, idx: 0 }, dropped: 0, torn: 0, corrupt: 0 };
  private fsyncTimer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> = Promise.resolve();
  private closed = false;

  private constructor(opts: DurableQueueOptions) {
    this.dir = opts.dir;
    this.maxBytes = Math.max(opts.maxBytes ?? 64 * 1024 * 1024, 4 * 1024);
    this.segmentBytes = Math.max(Math.min(opts.segmentBytes ?? 4 * 1024 * 1024, Math.floor(this.maxBytes / 4)), 1024);
    this.maxRecordBytes = Math.min(opts.maxRecordBytes ?? 1024 * 1024, this.segmentBytes - HEADER_BYTES);
    this.fsyncIntervalMs = Math.max(0, opts.fsyncIntervalMs ?? 100);
    this.logger = opts.logger;
  }

  /** Opens (creating if needed) the queue in opts.dir, recovering from a crash of a previous process. */
  static open(opts: DurableQueueOptions): DurableQueue {
    const q = new DurableQueue(opts);
    try {
      q.recover();
    } catch (e) {
      if (e instanceof QueueError) throw e;
      const err = e as NodeJS.ErrnoException;
      throw new QueueError(`cannot open the event queue in ${opts.dir}: ${err.code ?? ''} ${err.message}`.replace(/\s+/g, ' '));
    }
    return q;
  }

  get maxPayloadBytes(): number { return this.maxRecordBytes; }

  // ---------------------------------------------------------------- open / recover

  private recover(): void {
    mkdirSync(this.dir, { recursive: true });
    this.takeLock();
    for (const name of readdirSync(this.dir)) {
      if (name.endsWith('.tmp')) { try { unlinkSync(join(this.dir, name)); } catch { /* gone already */ } }
    }
    const meta = this.readMeta();
    if (meta) this.meta = meta;
    const seqs = readdirSync(this.dir)
      .map((n) => SEGMENT_RE.exec(n)?.[1])
      .filter((s): s is string => s !== undefined)
      .map(Number)
      .sort((a, b) => a - b);
    const cursor = this.meta.cursor;
    // Segments wholly before the cursor were acked; a crash between the ack and the unlink leaves them.
    for (const seq of seqs) {
      if (seq < cursor.seg) { try { unlinkSync(join(this.dir, segName(seq))); } catch { /* ignore */ } }
    }
    const live = seqs.filter((s) => s >= cursor.seg);
    live.forEach((seq, i) => {
      const seg = this.scanSegment(seq, i === live.length - 1);
      this.segments.push(seg);
      this.totalBytes += seg.size;
    });
    const first = this.segments[0];
    if (!first) {
      const seq = Math.max(cursor.seg, (seqs[seqs.length - 1] ?? 0) + 1);
      this.meta.cursor = { seg: seq, off: 0, idx: 0 };
      this.createSegment(seq);
    } else {
      if (first.seq !== cursor.seg) this.meta.cursor = { seg: first.seq, off: 0, idx: 0 };
      else if (cursor.off > first.size) this.meta.cursor = { seg: first.seq, off: first.size, idx: first.records };
      else this.meta.cursor.idx = this.countRecordsBefore(first, cursor.off);
      const last = this.segments[this.segments.length - 1] as Segment;
      if (last.size >= this.segmentBytes) this.createSegment(last.seq + 1);
      else this.activeFd = openSync(last.path, fsConstants.O_RDWR);
    }
    this.writeMeta(true);
    this.enforceBound();
  }

  private takeLock(): void {
    const path = join(this.dir, 'lock');
    try {
      const pid = Number(readFileSync(path, 'utf8').trim());
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid) {
        let alive = true;
        try { process.kill(pid, 0); } catch (e) { alive = (e as NodeJS.ErrnoException).code === 'EPERM'; }
        if (alive) throw new QueueError(`queue dir ${this.dir} is in use by process ${pid}`);
      }
    } catch (e) {
      if (e instanceof QueueError) throw e;
    }
    writeFileSync(path, `${process.pid}\n`);
  }

  private readMeta(): Meta | undefined {
    let text: string;
    try { text = readFileSync(join(this.dir, 'meta.json'), 'utf8'); } catch { return undefined; }
    try {
      return MetaSchema.parse(JSON.parse(text));
    } catch (e) {
      this.logger?.warn({ err: (e as Error).message, dir: this.dir }, 'queue meta.json unreadable; re-reading the queue from its oldest segment');
      return undefined;
    }
  }

  private writeMeta(sync: boolean): void {
    const path = join(this.dir, 'meta.json');
    const tmp = `${path}.tmp`;
    const fd = openSync(tmp, 'w');
    try {
      writeSync(fd, JSON.stringify(this.meta));
      if (sync) fsyncSync(fd);
    } finally { closeSync(fd); }
    renameSync(tmp, path);
  }

  /** Counts the valid records of a segment; truncates a torn tail of the newest one. */
  private scanSegment(seq: number, isLast: boolean): Segment {
    const path = join(this.dir, segName(seq));
    const fd = openSync(path, fsConstants.O_RDWR);
    try {
      const size = fstatSync(fd).size;
      let pos = 0;
      let records = 0;
      let lastGoodEnd = 0;
      while (pos < size) {
        const r = this.readRecordAt(fd, pos, size);
        if (r.ok) { records++; pos = r.next; lastGoodEnd = pos; continue; }
        if (r.next >= size) {
          // Nothing valid after this point: a torn tail.
          this.meta.torn++;
          this.logger?.warn({ segment: segName(seq), at: pos, bytes: size - pos }, 'queue: torn record at segment end skipped');
          if (isLast) { ftruncateSync(fd, lastGoodEnd); fdatasyncSync(fd); return { seq, path, size: lastGoodEnd, records }; }
          break;
        }
        this.meta.corrupt++;
        this.logger?.warn({ segment: segName(seq), at: pos, bytes: r.next - pos }, 'queue: corrupt region skipped');
        pos = r.next;
      }
      return { seq, path, size, records };
    } finally { closeSync(fd); }
  }

  private countRecordsBefore(seg: Segment, off: number): number {
    const fd = openSync(seg.path, 'r');
    try {
      let pos = 0;
      let n = 0;
      while (pos < off) {
        const r = this.readRecordAt(fd, pos, seg.size);
        if (r.ok && r.next <= off) n++;
        if (r.next <= pos) break;
        pos = r.next;
      }
      return n;
    } finally { closeSync(fd); }
  }

  /** Reads the record at pos, or on a bad one says where the next valid record starts (or size). */
  private readRecordAt(fd: number, pos: number, size: number): ReadResult {
    const r = this.tryRecord(fd, pos, size);
    if (r) return { ok: true, payload: r.payload, next: r.next };
    return { ok: false, next: this.resync(fd, pos + 1, size) };
  }

  private tryRecord(fd: number, pos: number, size: number): { payload: Buffer; next: number } | undefined {
    if (pos + HEADER_BYTES > size) return undefined;
    const header = Buffer.allocUnsafe(HEADER_BYTES);
    if (readFully(fd, header, pos) < HEADER_BYTES) return undefined;
    if (!header.subarray(0, 4).equals(MAGIC)) return undefined;
    const len = header.readUInt32BE(4);
    if (len > this.maxRecordBytes || pos + HEADER_BYTES + len > size) return undefined;
    const payload = Buffer.allocUnsafe(len);
    if (readFully(fd, payload, pos + HEADER_BYTES) < len) return undefined;
    if (recordCrc(header.subarray(4, 8), payload) !== header.readUInt32BE(8)) return undefined;
    return { payload, next: pos + HEADER_BYTES + len };
  }

  /** Position of the next valid record at or after `from`, or `size` when there is none. */
  private resync(fd: number, from: number, size: number): number {
    const chunk = Buffer.allocUnsafe(SCAN_CHUNK + MAGIC.length - 1);
    let base = from;
    while (base < size) {
      const n = readFully(fd, chunk.subarray(0, Math.min(chunk.length, size - base)), base);
      if (n < MAGIC.length) break;
      let i = chunk.subarray(0, n).indexOf(MAGIC);
      while (i !== -1) {
        if (this.tryRecord(fd, base + i, size)) return base + i;
        i = chunk.subarray(0, n).indexOf(MAGIC, i + 1);
      }
      base += n - (MAGIC.length - 1);
    }
    return size;
  }

  // ---------------------------------------------------------------- write

  private get active(): Segment { return this.segments[this.segments.length - 1] as Segment; }

  private createSegment(seq: number): void {
    const path = join(this.dir, segName(seq));
    const fd = openSync(path, fsConstants.O_RDWR | fsConstants.O_CREAT | fsConstants.O_TRUNC, 0o600);
    if (this.activeFd >= 0) this.retiredFds.push(this.activeFd);
    this.activeFd = fd;
    this.segments.push({ seq, path, size: 0, records: 0 });
    this.dirSyncPending = true;
  }

  /** Appends one record (durable against a process crash when this returns). Throws QueueError when too large. */
  append(payload: Buffer | string): void {
    if (this.closed) throw new QueueError('queue is closed');
    const buf = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
    if (buf.length > this.maxRecordBytes) {
      throw new QueueError(`record of ${buf.length} bytes exceeds the queue's limit of ${this.maxRecordBytes} bytes`);
    }
    const rec = encodeRecord(buf);
    if (this.active.size > 0 && this.active.size + rec.length > this.segmentBytes) this.createSegment(this.active.seq + 1);
    const seg = this.active;
    let written = 0;
    try {
      while (written < rec.length) written += writeSync(this.activeFd, rec, written, rec.length - written, seg.size + written);
    } catch (e) {
      // Leave no half record behind (ENOSPC, EIO): cut back to the last whole one.
      try { ftruncateSync(this.activeFd, seg.size); } catch { /* recovery on open handles it */ }
      throw e;
    }
    seg.size += rec.length;
    seg.records++;
    this.totalBytes += rec.length;
    if (this.fsyncIntervalMs === 0) {
      fdatasyncSync(this.activeFd);
      this.syncRetired();
    } else {
      this.scheduleFsync();
    }
    this.enforceBound();
  }

  private syncRetired(): void {
    for (const fd of this.retiredFds.splice(0)) { try { fdatasyncSync(fd); } finally { closeSync(fd); } }
    if (this.dirSyncPending) { this.dirSyncPending = false; this.syncDir(); }
  }

  private syncDir(): void {
    try { const d = openSync(this.dir, 'r'); try { fsyncSync(d); } finally { closeSync(d); } } catch { /* not supported: best effort */ }
  }

  private scheduleFsync(): void {
    if (this.fsyncTimer) return;
    this.fsyncTimer = setTimeout(() => { this.fsyncTimer = undefined; void this.flush(); }, this.fsyncIntervalMs);
    this.fsyncTimer.unref();
  }

  /** fdatasyncs everything appended so far. */
  flush(): Promise<void> {
    const run = async (): Promise<void> => {
      if (this.activeFd < 0) return;
      const fds = [this.activeFd, ...this.retiredFds.splice(0)];
      const retired = fds.slice(1);
      for (const fd of fds) {
        await new Promise<void>((resolve) => fdatasync(fd, (err) => {
          if (err) this.logger?.warn({ err: err.message }, 'queue: fdatasync failed');
          resolve();
        }));
      }
      for (const fd of retired) { try { closeSync(fd); } catch { /* already closed */ } }
      if (this.dirSyncPending) { this.dirSyncPending = false; this.syncDir(); }
    };
    this.flushing = this.flushing.then(run, run);
    return this.flushing;
  }

  private enforceBound(): void {
    let changed = false;
    while (this.totalBytes > this.maxBytes && this.segments.length > 1) {
      const oldest = this.segments.shift() as Segment;
      const lost = oldest.seq === this.meta.cursor.seg ? oldest.records - this.meta.cursor.idx : oldest.records;
      this.meta.dropped += Math.max(0, lost);
      this.totalBytes -= oldest.size;
      try { unlinkSync(oldest.path); } catch { /* ignore */ }
      const next = this.segments[0] as Segment;
      this.meta.cursor = { seg: next.seq, off: 0, idx: 0 };
      changed = true;
      this.logger?.warn({ segment: segName(oldest.seq), records: lost, maxBytes: this.maxBytes }, 'queue full: oldest unsent events dropped');
    }
    if (changed) this.writeMeta(false);
  }

  // ---------------------------------------------------------------- read / ack

  /**
   * The oldest unacked records, without removing them: at most maxRecords and about maxBytes of
   * payload (always at least one record when there is one).
   */
  peek(maxRecords: number, maxBytes = Number.POSITIVE_INFINITY): QueueRecord[] {
    if (this.closed) throw new QueueError('queue is closed');
    const out: QueueRecord[] = [];
    let bytes = 0;
    let { seg: segSeq, off, idx } = this.meta.cursor;
    for (let i = 0; i < this.segments.length && out.length < maxRecords; i++) {
      const seg = this.segments[i] as Segment;
      if (seg.seq < segSeq) continue;
      if (seg.seq > segSeq) { segSeq = seg.seq; off = 0; idx = 0; }
      const isActive = i === this.segments.length - 1;
      const fd = isActive ? this.activeFd : openSync(seg.path, 'r');
      try {
        while (off < seg.size && out.length < maxRecords && (out.length === 0 || bytes < maxBytes)) {
          const r = this.readRecordAt(fd, off, seg.size);
          off = r.next;
          if (!r.ok) continue;
          idx++;
          bytes += r.payload.length;
          out.push({ payload: r.payload, pos: { seg: seg.seq, off, idx } });
        }
      } finally { if (!isActive) closeSync(fd); }
      if (out.length > 0 && bytes >= maxBytes) break;
    }
    return out;
  }

  /** Removes every record up to and including the one that ends at pos. Older positions are ignored. */
  ack(pos: QueuePosition): void {
    if (this.closed) throw new QueueError('queue is closed');
    if (comparePos(pos, this.meta.cursor) <= 0) return;
    if (!this.segments.some((s) => s.seq === pos.seg)) return;
    this.meta.cursor = { ...pos };
    while (this.segments.length > 1) {
      const first = this.segments[0] as Segment;
      const done = first.seq < this.meta.cursor.seg || (first.seq === this.meta.cursor.seg && this.meta.cursor.off >= first.size);
      if (!done) break;
      this.segments.shift();
      this.totalBytes -= first.size;
      try { unlinkSync(first.path); } catch { /* ignore */ }
      const next = this.segments[0] as Segment;
      if (this.meta.cursor.seg <= first.seq) this.meta.cursor = { seg: next.seq, off: 0, idx: 0 };
    }
    this.writeMeta(false);
  }

  depth(): number {
    let n = 0;
    for (const s of this.segments) n += s.records;
    return Math.max(0, n - this.meta.cursor.idx);
  }

  stats(): QueueStats {
    return {
      depth: this.depth(),
      bytes: this.totalBytes,
      segments: this.segments.length,
      dropped: this.meta.dropped,
      torn: this.meta.torn,
      corrupt: this.meta.corrupt,
    };
  }

  /** Flushes, persists the cursor and releases the directory. */
  async close(): Promise<void> {
    if (this.closed) return;
    if (this.fsyncTimer) { clearTimeout(this.fsyncTimer); this.fsyncTimer = undefined; }
    await this.flush();
    this.closed = true;
    try { fdatasyncSync(this.activeFd); } catch { /* best effort */ }
    closeSync(this.activeFd);
    this.activeFd = -1;
    this.writeMeta(true);
    try { unlinkSync(join(this.dir, 'lock')); } catch { /* ignore */ }
  }
}
