/**
 * The I/O under bundle items: safe file opening (never blocks on FIFOs/devices), finding the
 * byte range of a time-stamped log inside a window, reading a fixed range with redaction, a
 * bounded tail buffer, commands with timeouts killed by pid, and two-pass journal reads.
 */
import { spawn } from 'node:child_process';
import { constants as FS, promises as fsp, type Stats } from 'node:fs';
import { StreamRedactor } from './redact.js';
import { fixYear, parseLineTime } from './line-time.js';

/** 64 KiB: the latin1 strings redaction makes stay below V8's large-object size (~128 KiB), so they
 * die young in new space instead of piling up in large-object space until a full GC. */
export const READ_CHUNK = 64 * 1024;

export type ItemStatus = 'ok' | 'missing' | 'error' | 'truncated' | 'timeout' | 'skipped';

/** Opens a regular file for reading without ever blocking: lstat first, O_NONBLOCK, fstat after. */
export async function openRegular(path: string): Promise<{ fh: fsp.FileHandle; st: Stats } | { skip: ItemStatus; reason: string }> {
  let lst: Stats;
  try { lst = await fsp.lstat(path); } catch (e) { return errToSkip(e); }
  let st = lst;
  if (lst.isSymbolicLink()) {
    try { st = await fsp.stat(path); } catch (e) { return errToSkip(e); }
  }
  if (!st.isFile()) return { skip: 'skipped', reason: `not a regular file (${kindOf(st)})` };
  let fh: fsp.FileHandle;
  try {
    fh = await fsp.open(path, FS.O_RDONLY | FS.O_NONBLOCK | FS.O_NOCTTY);
  } catch (e) { return errToSkip(e); }
  const fst = await fh.stat();
  if (!fst.isFile()) {
    await fh.close();
    return { skip: 'skipped', reason: `not a regular file (${kindOf(fst)}; replaced while opening)` };
  }
  return { fh, st: fst };
}

export function kindOf(st: Stats): string {
  if (st.isFIFO()) return 'fifo';
  if (st.isSocket()) return 'socket';
  if (st.isCharacterDevice()) return 'character device';
  if (st.isBlockDevice()) return 'block device';
  if (st.isDirectory()) return 'directory';
  if (st.isSymbolicLink()) return 'symlink';
  return 'file';
}

function errToSkip(e: unknown): { skip: ItemStatus; reason: string } {
  const err = e as NodeJS.ErrnoException;
  if (err.code === 'ENOENT') return { skip: 'missing', reason: 'not found' };
  if (err.code === 'ELOOP') return { skip: 'error', reason: 'symlink loop (ELOOP)' };
  if (err.code === 'EACCES' || err.code === 'EPERM') return { skip: 'error', reason: `unreadable (${err.code})` };
  return { skip: 'error', reason: err.message };
}

async function readAt(fh: fsp.FileHandle, pos: number, len: number): Promise<Buffer> {
  const buf = Buffer.allocUnsafe(len);
  const { bytesRead } = await fh.read(buf, 0, len, pos);
  return buf.subarray(0, bytesRead);
}

/** First line start at or after `pos`. */
async function nextLineStart(fh: fsp.FileHandle, pos: number, size: number): Promise<number> {
  if (pos <= 0) return 0;
  let p = pos - 1;
  while (p < size) {
    const b = await readAt(fh, p, Math.min(65536, size - p));
    if (b.length === 0) return size;
    const i = b.indexOf(10);
    if (i >= 0) return p + i + 1;
    p += b.length;
  }
  return size;
}

interface TimedLine { start: number; t: number }

/** The first time-stamped line starting at or after `pos` (looks at most 64 KiB ahead). */
async function timedLineFrom(fh: fsp.FileHandle, pos: number, size: number, year: number, mtime: number): Promise<TimedLine | null> {
  const start = await nextLineStart(fh, pos, size);
  const b = await readAt(fh, start, Math.min(65536, size - start));
  const text = b.toString('latin1');
  let off = 0;
  while (off < text.length) {
    const nl = text.indexOf('\n', off);
    if (nl < 0) break;
    const t = parseLineTime(text.slice(off, Math.min(nl, off + 400)), year);
    if (t !== null) return { start: start + off, t: fixYear(t, mtime) };
    off = nl + 1;
  }
  return null;
}

/** Smallest line start whose timestamp is >= target (logs are time-ordered). */
async function lowerBound(fh: fsp.FileHandle, size: number, target: number, year: number, mtime: number): Promise<number> {
  let lo = 0;
  let hi = size;
  while (hi - lo > 65536) {
    const mid = Math.floor((lo + hi) / 2);
    const r = await timedLineFrom(fh, mid, size, year, mtime);
    if (!r || r.start >= hi) hi = mid;
    else if (r.t >= target) hi = r.start;
    else lo = r.start + 1;
  }
  // linear scan of [lo, hi]
  let p = await nextLineStart(fh, lo, size);
  while (p < size && p <= hi + 65536) {
    const r = await timedLineFrom(fh, p, size, year, mtime);
    if (!r) break;
    if (r.t >= target) return r.start;
    p = r.start + 1;
  }
  return await nextLineStart(fh, Math.min(hi, size), size);
}

export interface RangePlan { start: number; end: number; timestamped: boolean; capped: boolean; windowed: boolean }

/**
 * Which bytes of a log file to keep: lines inside [since, until] when lines carry timestamps,
 * then at most `cap` bytes from the end (on a line boundary).
 */
export async function planRange(fh: fsp.FileHandle, size: number, mtimeMs: number, opts: { sinceMs?: number; untilMs?: number; cap: number; timestamped: boolean }): Promise<RangePlan> {
  let start = 0;
  let end = size;
  let timestamped = false;
  let windowed = false;
  if (opts.timestamped && size > 0) {
    const year = new Date(mtimeMs).getUTCFullYear();
    const first = await timedLineFrom(fh, 0, size, year, mtimeMs);
    if (first) {
      timestamped = true;
      if (opts.sinceMs !== undefined) start = await lowerBound(fh, size, opts.sinceMs, year, mtimeMs);
      if (opts.untilMs !== undefined) end = await lowerBound(fh, size, opts.untilMs + 1, year, mtimeMs);
      if (end < start) end = start;
      windowed = start > 0 || end < size;
    }
  }
  let capped = false;
  if (end - start > opts.cap) {
    capped = true;
    start = await nextLineStart(fh, end - opts.cap, size);
    if (start > end) start = end;
  }
  return { start, end, timestamped, capped, windowed };
}

/**
 * Reads exactly [start, end) of a file, redacted (when `redactor` is given), as chunks summing
 * to exactly end-start bytes: a file that shrank is padded with newlines (reported via onShort).
 * Redaction starts up to 64 KiB before `start` (output discarded) so a secret spanning the cut,
 * e.g. a PEM block, is still recognised.
 */
export async function* readRange(fh: fsp.FileHandle, start: number, end: number, redactor: StreamRedactor | null, onShort: (missing: number) => void): AsyncGenerator<Buffer> {
  const want = end - start;
  let emitted = 0;
  let discard = 0;
  let pos = start;
  if (redactor && start > 0) {
    pos = await nextLineStart(fh, Math.max(0, start - 65536), end);
    if (pos > start) pos = start;
    discard = start - pos;
  }
  const emit = function* (b: Buffer): Generator<Buffer> {
    if (discard > 0) {
      const d = Math.min(discard, b.length);
      discard -= d;
      b = b.subarray(d);
    }
    if (b.length === 0) return;
    const room = want - emitted;
    if (b.length > room) b = b.subarray(0, room);
    emitted += b.length;
    if (b.length) yield b;
  };
  // With redaction the read buffer is copied by push(), so one buffer serves every read (less
  // garbage for the GC to find, lower peak RSS); without it each chunk must be its own.
  const shared = redactor ? Buffer.allocUnsafe(READ_CHUNK) : null;
  while (pos < end) {
    const len = Math.min(READ_CHUNK, end - pos);
    let b: Buffer;
    if (shared) {
      const { bytesRead } = await fh.read(shared, 0, len, pos);
      b = shared.subarray(0, bytesRead);
    } else b = await readAt(fh, pos, len);
    if (b.length === 0) break;
    pos += b.length;
    yield* emit(redactor ? redactor.push(b) : b);
  }
  if (redactor) yield* emit(redactor.end());
  if (emitted < want) {
    onShort(want - emitted);
    const pad = Buffer.alloc(want - emitted, 10);
    emitted = want;
    yield pad;
  }
}

/** Keeps the last `cap` bytes written to it. */
export class TailBuffer {
  private chunks: Buffer[] = [];
  private held = 0;
  total = 0;
  constructor(private readonly cap: number) {}
  push(b: Buffer): void {
    this.total += b.length;
    if (b.length >= this.cap) {
      this.chunks = [Buffer.from(b.subarray(b.length - this.cap))];
      this.held = this.cap;
      return;
    }
    this.chunks.push(b);
    this.held += b.length;
    while (this.held > this.cap) {
      const first = this.chunks[0]!;
      const over = this.held - this.cap;
      if (first.length <= over) { this.chunks.shift(); this.held -= first.length; } else { this.chunks[0] = first.subarray(over); this.held -= over; }
    }
  }
  get truncated(): boolean { return this.total > this.held; }
  toBuffer(): Buffer { return Buffer.concat(this.chunks, this.held); }
}

export interface CommandResult {
  status: ItemStatus;
  stdout: TailBuffer;
  stderr: TailBuffer;
  exitCode: number | null;
  signal: string | null;
  durationMs: number;
  error?: string;
}

/**
 * Runs argv with a timeout; on timeout the whole process group is killed by pid (SIGKILL).
 * `onData` (when given) receives stdout instead of the tail buffer (streaming consumers).
 */
export function runCommand(argv: string[], opts: { timeoutMs: number; cap: number; env?: NodeJS.ProcessEnv; onData?: (b: Buffer) => void }): Promise<CommandResult> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    const stdout = new TailBuffer(opts.cap);
    const stderr = new TailBuffer(64 * 1024);
    let timedOut = false;
    let settled = false;
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: opts.env ?? process.env });
    const timer = setTimeout(() => {
      timedOut = true;
      if (child.pid) { try { process.kill(-child.pid, 'SIGKILL'); } catch { /* already gone */ } }
    }, opts.timeoutMs);
    child.stdout.on('data', (b: Buffer) => { if (opts.onData) opts.onData(b); else stdout.push(b); });
    child.stderr.on('data', (b: Buffer) => stderr.push(b));
    const done = (r: Omit<CommandResult, 'stdout' | 'stderr' | 'durationMs'>): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ ...r, stdout, stderr, durationMs: Date.now() - t0 });
    };
    child.on('error', (e: NodeJS.ErrnoException) => {
      done({ status: e.code === 'ENOENT' ? 'missing' : 'error', exitCode: null, signal: null, error: e.message });
    });
    child.on('close', (code, signal) => {
      if (timedOut) return done({ status: 'timeout', exitCode: code, signal, error: `timed out after ${opts.timeoutMs} ms (killed)` });
      if (code === 0) return done({ status: 'ok', exitCode: 0, signal: null });
      const err = stderr.toBuffer().toString('utf8').trim().split('\n').slice(-3).join(' | ');
      done({ status: 'error', exitCode: code, signal, error: `exit ${code ?? signal}${err ? `: ${err}` : ''}` });
    });
  });
}

/** Counts the bytes a command writes (first pass of a two-pass read), without keeping them. */
export async function countCommandBytes(argv: string[], opts: { timeoutMs: number; env?: NodeJS.ProcessEnv }): Promise<{ bytes: number; result: CommandResult }> {
  let bytes = 0;
  const result = await runCommand(argv, { ...opts, cap: 1, onData: (b) => { bytes += b.length; } });
  return { bytes, result };
}

/**
 * Streams a command's stdout (second pass) as an async iterable with backpressure via pause/resume.
 * The caller must consume it to the end. `finished` resolves with the result.
 */
export function streamCommand(argv: string[], opts: { timeoutMs: number; env?: NodeJS.ProcessEnv }): { chunks: AsyncIterable<Buffer>; finished: Promise<CommandResult> } {
  const t0 = Date.now();
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: opts.env ?? process.env });
  const stderr = new TailBuffer(64 * 1024);
  child.stderr.on('data', (b: Buffer) => stderr.push(b));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    if (child.pid) { try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ } }
  }, opts.timeoutMs);
  const finished = new Promise<CommandResult>((resolve) => {
    const fin = (status: ItemStatus, code: number | null, signal: string | null, error?: string): void => {
      clearTimeout(timer);
      resolve({ status, stdout: new TailBuffer(1), stderr, exitCode: code, signal, durationMs: Date.now() - t0, ...(error ? { error } : {}) });
    };
    child.on('error', (e: NodeJS.ErrnoException) => fin(e.code === 'ENOENT' ? 'missing' : 'error', null, null, e.message));
    child.on('close', (code, signal) => {
      if (timedOut) fin('timeout', code, signal, `timed out after ${opts.timeoutMs} ms (killed)`);
      else if (code === 0) fin('ok', 0, null);
      else fin('error', code, signal, `exit ${code ?? signal}: ${stderr.toBuffer().toString('utf8').trim().split('\n').slice(-3).join(' | ')}`);
    });
  });
  return { chunks: child.stdout as AsyncIterable<Buffer>, finished };
}
