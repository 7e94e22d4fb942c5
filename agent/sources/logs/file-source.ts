/**
 * Follows a plain log file (kubelet.log, containerd.log, /var/log/syslog, …) by polling — fs.watch
 * is unreliable on hostPath mounts and overlay filesystems. Survives rotation (rename + new file,
 * noticed by a new inode: the old file is read to its end first), truncation (copytruncate: the
 * size drops below our offset, we restart at 0) and a file that does not exist yet (waits for it).
 * At start it reads back a bounded tail (default 256 KiB) so pulls already in flight are known.
 */
import { open, stat, type FileHandle } from 'node:fs/promises';
import type { LogComponent } from '../../model/observations.js';
import type { Source, SourceContext } from '../source.js';
import { LogEmitter } from './emit.js';
import { DEFAULT_MAX_LINE_BYTES, LineSplitter } from './line-reader.js';
import { parseLogLine } from './parse/index.js';

export interface FileLogSourceOptions {
  /** Poll interval (default 500 ms). */
  pollMs?: number;
  /** Bytes read back from the end of a file that exists at start (default 256 KiB; 0 = none). */
  tailBytes?: number;
  /** Longer lines are dropped and counted as `line-too-long` (default 64 KiB). */
  maxLineBytes?: number;
  /** Component of every line; default: detected per line. */
  component?: LogComponent;
  /** Year for year-less stamps (klog); default: the current one. */
  year?: number;
  /** Most bytes read per poll (default 16 MiB): a huge backlog is read over several polls. */
  maxBytesPerPoll?: number;
  /** Source name in observations and health reports (default `file:<path>`). */
  name?: string;
}

const READ_CHUNK = 64 * 1024;
const FINGERPRINT_BYTES = 64;

export class FileLogSource implements Source {
  readonly name: string;
  private readonly pollMs: number;
  private readonly tailBytes: number;
  private readonly maxBytesPerPoll: number;
  private readonly splitter: LineSplitter;
  private readonly buf = Buffer.allocUnsafe(READ_CHUNK);
  private ctx: SourceContext | null = null;
  private emitter: LogEmitter | null = null;
  private fh: FileHandle | null = null;
  private ino = -1;
  private dev = -1;
  private pos = 0;
  private skipPartial = false;
  /** The last bytes before `pos` and the mtime when we read them: a copytruncate that regrew past our offset changes them. */
  private fingerprint: Buffer | null = null;
  private mtimeMs = 0;
  private firstPollDone = false;
  private missingReported = false;
  private notFileReported = false;
  private timer: NodeJS.Timeout | null = null;
  private polling: Promise<void> | null = null;
  private running = false;
  /** Lines seen (parsed or not) — for tests and benches. */
  linesRead = 0;

  constructor(readonly path: string, private readonly opts: FileLogSourceOptions = {}) {
    this.name = opts.name ?? `file:${path}`;
    this.pollMs = opts.pollMs ?? 500;
    this.tailBytes = Math.max(0, opts.tailBytes ?? 256 * 1024);
    this.maxBytesPerPoll = opts.maxBytesPerPoll ?? 16 * 1024 * 1024;
    this.splitter = new LineSplitter(opts.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES, (n) =>
      this.ctx?.health.report(this.name, 'line-too-long', `${this.path}: a line longer than ${opts.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES} bytes was dropped (${n}+ bytes)`));
  }

  get emitted(): number {
    return this.emitter?.emitted ?? 0;
  }

  async start(ctx: SourceContext): Promise<void> {
    if (this.running) return;
    this.ctx = ctx;
    this.emitter = new LogEmitter(this.name, ctx);
    this.running = true;
    await this.runPoll();
    this.schedule();
  }

  async stop(): Promise<void> {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.polling) await this.polling.catch(() => {});
    await this.closeFile();
  }

  /** Runs one poll now (tests use this to avoid waiting for the timer). */
  async pollNow(): Promise<void> {
    await this.runPoll();
  }

  private schedule(): void {
    if (!this.running) return;
    this.timer = setTimeout(() => {
      void this.runPoll().finally(() => this.schedule());
    }, this.pollMs);
    this.timer.unref();
  }

  private runPoll(): Promise<void> {
    if (!this.polling) {
      this.polling = this.poll()
        .catch((err) => this.ctx?.health.report(this.name, 'poll-failed', err))
        .finally(() => { this.polling = null; });
    }
    return this.polling;
  }

  private async poll(): Promise<void> {
    const first = !this.firstPollDone;
    this.firstPollDone = true;
    let st;
    try {
      st = await stat(this.path, { bigint: false });
    } catch (err) {
      if (this.fh) await this.drainAndClose(); // renamed away and not recreated yet: finish the old file
      if (!this.missingReported) {
        this.missingReported = true;
        const code = (err as NodeJS.ErrnoException).code;
        this.ctx?.health.report(this.name, code === 'ENOENT' ? 'file-missing' : 'stat-failed',
          code === 'ENOENT' ? `${this.path} does not exist yet; waiting for it` : err);
      }
      return;
    }
    this.missingReported = false;
    if (!st.isFile()) {
      if (!this.notFileReported) { this.notFileReported = true; this.ctx?.health.report(this.name, 'not-a-file', `${this.path} is not a regular file`); }
      return;
    }
    this.notFileReported = false;
    if (this.fh && (st.ino !== this.ino || st.dev !== this.dev)) await this.drainAndClose(); // rotated
    if (!this.fh) {
      try {
        this.fh = await open(this.path, 'r');
      } catch (err) {
        this.ctx?.health.report(this.name, 'open-failed', err);
        return;
      }
      const opened = await this.fh.stat();
      this.ino = opened.ino;
      this.dev = opened.dev;
      this.splitter.reset();
      this.fingerprint = null;
      if (first && opened.size > this.tailBytes) {
        this.pos = opened.size - this.tailBytes;
        this.skipPartial = true; // we start mid-line: drop up to the first newline
      } else {
        this.pos = 0;
        this.skipPartial = false;
      }
    } else if (st.size < this.pos || (st.mtimeMs !== this.mtimeMs && !(await this.fingerprintMatches()))) {
      // copytruncate: the file was emptied in place (and maybe written again past our offset);
      // what was left unfinished is a line of its own
      this.splitter.flush((l) => this.onLine(l));
      this.pos = 0;
      this.skipPartial = false;
      this.fingerprint = null;
    }
    this.mtimeMs = st.mtimeMs;
    const before = this.pos;
    await this.readAvailable();
    if (this.pos !== before) await this.takeFingerprint();
  }

  private async takeFingerprint(): Promise<void> {
    const fh = this.fh;
    if (!fh) return;
    const n = Math.min(FINGERPRINT_BYTES, this.pos);
    const b = Buffer.alloc(n);
    const { bytesRead } = await fh.read(b, 0, n, this.pos - n);
    this.fingerprint = b.subarray(0, bytesRead);
  }

  private async fingerprintMatches(): Promise<boolean> {
    const fh = this.fh;
    const fp = this.fingerprint;
    if (!fh || !fp || fp.length === 0 || this.pos < fp.length) return true;
    const b = Buffer.alloc(fp.length);
    const { bytesRead } = await fh.read(b, 0, fp.length, this.pos - fp.length);
    return bytesRead === fp.length && b.equals(fp);
  }

  private async readAvailable(): Promise<void> {
    const fh = this.fh;
    if (!fh) return;
    let budget = this.maxBytesPerPoll;
    while (budget > 0) {
      const { bytesRead } = await fh.read(this.buf, 0, Math.min(this.buf.length, budget), this.pos);
      if (bytesRead === 0) break;
      this.pos += bytesRead;
      budget -= bytesRead;
      let chunk = this.buf.subarray(0, bytesRead);
      if (this.skipPartial) {
        const nl = chunk.indexOf(0x0a);
        if (nl < 0) continue;
        chunk = chunk.subarray(nl + 1);
        this.skipPartial = false;
      }
      this.splitter.push(chunk, (l) => this.onLine(l));
    }
  }

  private async drainAndClose(): Promise<void> {
    try {
      await this.readAvailable();
    } catch (err) {
      this.ctx?.health.report(this.name, 'read-failed', err);
    }
    this.splitter.flush((l) => this.onLine(l));
    await this.closeFile();
  }

  private async closeFile(): Promise<void> {
    const fh = this.fh;
    this.fh = null;
    if (fh) await fh.close().catch(() => {});
  }

  private onLine(line: string): void {
    this.linesRead++;
    const ctx = this.ctx;
    if (!ctx || !this.emitter) return;
    this.emitter.emit(parseLogLine(line, { fallbackAt: ctx.now(), component: this.opts.component, year: this.opts.year }));
  }
}
