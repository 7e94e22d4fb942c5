/**
 * Follows the systemd journal for the units that log pulls, through the real `journalctl`
 * (`-o json --follow`), one JSON object per line. journalctl exiting (no journal yet, rotation
 * trouble, killed) is reported and it is started again with backoff, resuming after the last
 * cursor seen so nothing is read twice or skipped. A missing journalctl binary or journal is
 * reported through SourceHealth and retried; the agent keeps running.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Source, SourceContext } from '../source.js';
import { LogEmitter } from './emit.js';
import { LineSplitter } from './line-reader.js';
import { parseJournalLine } from './parse/index.js';

export const DEFAULT_JOURNAL_UNITS = ['kubelet', 'containerd', 'crio', 'docker', 'cri-docker'];

export interface JournalLogSourceOptions {
  /** Read this journal directory (`journalctl --directory`). */
  directory?: string;
  /** Read the journal of the system mounted here (`journalctl --root`, e.g. /host). */
  root?: string;
  /** Units (`-u`); default kubelet, containerd, crio, docker, cri-docker. */
  units?: string[];
  /** `--since` for the first start (journalctl syntax: "-10min", "2026-11-21 09:00:00"). */
  since?: string;
  /** Entries read back at first start when `since` is not given (`--lines`, default 1000). */
  lines?: number;
  /** journalctl executable (default `journalctl` from PATH). */
  journalctl?: string;
  /** Longest JSON line kept (default 256 KiB); longer entries are dropped and counted. */
  maxLineBytes?: number;
  /** First restart delay (default 1 s), doubled up to restartMaxMs (default 30 s). */
  restartMinMs?: number;
  restartMaxMs?: number;
  /** Source name (default `journal` or `journal:<directory>`). */
  name?: string;
}

const STDERR_KEEP = 2048;
/** A journalctl that ran this long is considered healthy: the backoff starts over. */
const HEALTHY_RUN_MS = 60_000;

export class JournalLogSource implements Source {
  readonly name: string;
  private ctx: SourceContext | null = null;
  private emitter: LogEmitter | null = null;
  private child: ChildProcess | null = null;
  private childExit: Promise<void> | null = null;
  private running = false;
  private restartTimer: NodeJS.Timeout | null = null;
  private delayMs: number;
  private cursor: string | undefined;
  private stderrTail = '';
  private readonly splitter: LineSplitter;
  /** journalctl processes started so far (tests). */
  starts = 0;
  /** JSON lines read (parsed or not). */
  linesRead = 0;

  constructor(private readonly opts: JournalLogSourceOptions = {}) {
    if (opts.directory && opts.root) throw new Error('JournalLogSource: give either directory or root, not both');
    this.name = opts.name ?? (opts.directory ? `journal:${opts.directory}` : 'journal');
    this.delayMs = opts.restartMinMs ?? 1000;
    const max = opts.maxLineBytes ?? 256 * 1024;
    this.splitter = new LineSplitter(max, (n) =>
      this.ctx?.health.report(this.name, 'line-too-long', `a journal entry longer than ${max} bytes was dropped (${n}+ bytes)`));
  }

  get emitted(): number {
    return this.emitter?.emitted ?? 0;
  }

  /** pid of the running journalctl, if any. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** The journalctl arguments for the next start. */
  args(): string[] {
    const a: string[] = [];
    if (this.opts.directory) a.push('--directory', this.opts.directory);
    else if (this.opts.root) a.push('--root', this.opts.root);
    a.push('-o', 'json', '--all', '--follow', '--no-pager');
    for (const u of this.opts.units ?? DEFAULT_JOURNAL_UNITS) a.push('-u', u);
    if (this.cursor) a.push('--after-cursor', this.cursor);
    else if (this.opts.since) a.push('--since', this.opts.since);
    else a.push('--lines', String(this.opts.lines ?? 1000));
    return a;
  }

  async start(ctx: SourceContext): Promise<void> {
    if (this.running) return;
    this.ctx = ctx;
    this.emitter = new LogEmitter(this.name, ctx);
    this.running = true;
    this.spawnChild();
  }

  async stop(): Promise<void> {
    this.running = false;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    this.restartTimer = null;
    const child = this.child;
    const exited = this.childExit;
    if (child && child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      try { process.kill(child.pid, 'SIGTERM'); } catch { /* already gone */ }
      const killTimer = setTimeout(() => {
        if (child.pid !== undefined && child.exitCode === null) {
          try { process.kill(child.pid, 'SIGKILL'); } catch { /* already gone */ }
        }
      }, 2000);
      await exited;
      clearTimeout(killTimer);
    }
    this.child = null;
  }

  private spawnChild(): void {
    const ctx = this.ctx;
    if (!ctx || !this.running) return;
    const bin = this.opts.journalctl ?? 'journalctl';
    const startedAt = Date.now();
    this.stderrTail = '';
    this.splitter.reset();
    let child: ChildProcess;
    try {
      child = spawn(bin, this.args(), { stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (err) {
      ctx.health.report(this.name, 'journalctl-missing', err);
      this.scheduleRestart(startedAt);
      return;
    }
    this.starts++;
    this.child = child;
    let failedToStart = false;
    this.childExit = new Promise<void>((resolve) => {
      child.once('close', (code, signal) => {
        if (this.child === child) this.child = null;
        resolve();
        if (!this.running || failedToStart) return;
        this.splitter.flush((l) => this.onLine(l));
        const why = this.stderrTail.trim().split('\n').slice(-3).join(' | ');
        ctx.health.report(this.name, 'journalctl-exited',
          `journalctl exited (${signal ?? `code ${code}`})${why ? `: ${why}` : ''}`);
        this.scheduleRestart(startedAt);
      });
    });
    child.once('error', (err) => {
      // spawn failure (ENOENT, EACCES): 'close' may follow; report once as missing and retry
      failedToStart = true;
      if (this.child === child) this.child = null;
      const code = (err as NodeJS.ErrnoException).code;
      ctx.health.report(this.name, code === 'ENOENT' ? 'journalctl-missing' : 'journalctl-failed',
        code === 'ENOENT' ? `${bin} not found: install systemd's journalctl or use --log-source file:PATH` : err);
      this.scheduleRestart(startedAt);
    });
    child.stdout?.on('data', (chunk: Buffer) => this.splitter.push(chunk, (l) => this.onLine(l)));
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (s: string) => {
      this.stderrTail = (this.stderrTail + s).slice(-STDERR_KEEP);
    });
  }

  private scheduleRestart(startedAt: number): void {
    if (!this.running || this.restartTimer) return;
    const max = this.opts.restartMaxMs ?? 30_000;
    if (Date.now() - startedAt >= HEALTHY_RUN_MS) this.delayMs = this.opts.restartMinMs ?? 1000;
    const delay = this.delayMs;
    this.delayMs = Math.min(max, this.delayMs * 2);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      this.spawnChild();
    }, delay);
    this.restartTimer.unref();
  }

  private onLine(line: string): void {
    const ctx = this.ctx;
    if (!ctx || !this.emitter) return;
    if (line.length === 0 || line.trim().length === 0) return;
    this.linesRead++;
    const r = parseJournalLine(line, ctx.now());
    if (!r.ok) {
      ctx.health.report(this.name, 'bad-json', `journalctl printed a line that is not JSON: ${r.error}`);
      return;
    }
    if (r.cursor !== undefined) this.cursor = r.cursor;
    this.emitter.emit(r.parsed);
  }
}
