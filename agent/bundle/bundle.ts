/**
 * The bundle engine: walks the item table (items.ts) and streams a tar.gz to a Writable with
 * constant memory. Nothing is staged on disk. README.txt is the first entry, manifest.json the
 * last. Sizes go in tar headers up front, so:
 *  - regular files: the byte range is planned first (time window, tail cap) and read exactly;
 *    redaction keeps lengths (redact.ts), a file that grows is read up to its planned end, one
 *    that shrinks is padded and reported;
 *  - commands and /proc files: output kept in memory up to a bounded cap (tail kept);
 *  - journals: two passes of journalctl over a fixed window (count, then stream).
 */
import { once } from 'node:events';
import { constants as FS, promises as fsp } from 'node:fs';
import { hostname } from 'node:os';
import { join, posix } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import type { Writable } from 'node:stream';
import tar from 'tar-stream';
import type { Logger } from '../../common/log.js';
import { StreamRedactor, mergeCounts, REDACTION_RULES, type RedactionCounts } from './redact.js';
import { ITEMS, IPTABLES_TABLES, type Fallback, type GeneratorName, type ItemSpec } from './items.js';
import { countCommandBytes, openRegular, planRange, readRange, runCommand, streamCommand, TailBuffer, kindOf, type ItemStatus } from './io.js';
import { readIngests } from '../capture/ingests.js';
import { listCaptures } from '../capture/store.js';

export const BUNDLE_FORMAT_VERSION = 1;
/** zlib level 5 gives about the size of `gzip -6` (measured on log text) at ~1.4x its speed. */
export const DEFAULT_GZIP_LEVEL = 5;
/** Command and /proc output is held in memory up to this (or --file-cap when smaller). */
export const MEMORY_ITEM_CAP = 16 * 1024 * 1024;

export interface BundleOptions {
  hostRoot: string;
  sinceMs: number;
  untilMs: number;
  fileCap: number;
  commandTimeoutMs: number;
  redact: boolean;
  /** 'auto': nsenter into PID 1 when it is the host and we are in another mount namespace. */
  exec: 'auto' | 'nsenter' | 'local';
  containerdRoot?: string;
  containerdSocket?: string;
  agentUrl?: string;
  capturesDir?: string;
  goroutines: boolean;
  journalDir?: string;
  /** Restrict to these items (archive path prefixes); tests and benchmarks. */
  only?: string[];
  /** Replace the item table (tests, benchmarks). */
  items?: ItemSpec[];
  gzipLevel?: number;
  /** The process whose namespaces nsenter joins (default 1: the host's init, with hostPID). */
  hostPid?: number;
  /** PATH searched for this image's own tools (default: process PATH). */
  toolPath?: string;
  /** Called after each item (progress). */
  onItem?: (item: ManifestItem, bytesSoFar: number) => void;
  version?: string;
}

export interface ManifestItem {
  path: string;
  source: 'file' | 'command' | 'proc' | 'journal' | 'http' | 'generated';
  /** Host path (file/proc) or the exact argv run (command/journal) or URL (http). */
  src?: string;
  command?: string[];
  via?: 'nsenter' | 'local';
  status: ItemStatus;
  /** In the archive (false for missing/skipped). */
  archived: boolean;
  bytes: number;
  /** Bytes the source had before window and cap. */
  sourceBytes?: number;
  durationMs: number;
  error?: string;
  note?: string;
  redactions?: RedactionCounts;
}

export interface Manifest {
  formatVersion: number;
  generator: string;
  node: string;
  createdAt: string;
  window: { since: string; until: string; timezone: 'UTC' };
  options: { hostRoot: string; fileCap: number; commandTimeoutMs: number; exec: 'nsenter' | 'local'; redact: boolean; noRedact: boolean; goroutines: boolean };
  items: ManifestItem[];
  totals: { items: number; archived: number; bytes: number; durationMs: number; byStatus: Partial<Record<ItemStatus, number>>; redactions: RedactionCounts; redactionRules: readonly string[] };
}

interface Ctx {
  o: BundleOptions;
  logger: Logger;
  pack: tar.Pack;
  mode: 'nsenter' | 'local';
  env: NodeJS.ProcessEnv;
  items: ManifestItem[];
  counts: RedactionCounts;
  seen: Set<string>;
  bytes: number;
  startedAt: number;
}

const HOST_PATH_DIRS = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];

export function hostPath(hostRoot: string, p: string): string {
  return hostRoot === '/' ? p : join(hostRoot, p);
}

/** nsenter when PID 1's root is our host root and PID 1 lives in another mount namespace. */
export async function detectExecMode(hostRoot: string, want: BundleOptions['exec']): Promise<'nsenter' | 'local'> {
  if (want !== 'auto') return want;
  try {
    const [a, b] = await Promise.all([fsp.readlink('/proc/1/ns/mnt'), fsp.readlink('/proc/self/ns/mnt')]);
    if (a === b) return 'local';
    const [r1, hr] = await Promise.all([fsp.stat('/proc/1/root'), fsp.stat(hostRoot)]);
    if (r1.ino !== hr.ino || r1.dev !== hr.dev) return 'local';
    return (await which('nsenter', process.env.PATH)) ? 'nsenter' : 'local';
  } catch {
    return 'local';
  }
}

async function isExecutable(p: string): Promise<boolean> {
  try {
    const st = await fsp.stat(p);
    if (!st.isFile()) return false;
    await fsp.access(p, FS.X_OK);
    return true;
  } catch { return false; }
}

export async function which(tool: string, pathEnv: string | undefined): Promise<string | null> {
  if (tool.includes('/')) return (await isExecutable(tool)) ? tool : null;
  for (const dir of (pathEnv ?? '').split(':')) {
    if (!dir) continue;
    const p = join(dir, tool);
    if (await isExecutable(p)) return p;
  }
  return null;
}

/** Resolves argv to what we actually run, or null when the tool is nowhere. */
async function resolveArgv(ctx: Ctx, argv: string[]): Promise<{ run: string[]; via: 'nsenter' | 'local' } | null> {
  const tool = argv[0]!;
  if (ctx.mode === 'nsenter') {
    const pid = String(ctx.o.hostPid ?? 1);
    for (const d of HOST_PATH_DIRS) {
      if (await isExecutable(join('/proc', pid, 'root', d, tool))) {
        const nsenter = (await which('nsenter', ctx.env.PATH)) ?? (await which('nsenter', process.env.PATH ?? HOST_PATH_DIRS.join(':'))) ?? 'nsenter';
        return { run: [nsenter, '-t', pid, '-m', '-u', '-i', '-n', '-p', '--', join(d, tool), ...argv.slice(1)], via: 'nsenter' };
      }
    }
  }
  const local = await which(tool, ctx.env.PATH);
  return local ? { run: [local, ...argv.slice(1)], via: 'local' } : null;
}

async function writeEntry(ctx: Ctx, name: string, size: number, mtime: Date, body: AsyncIterable<Buffer> | Buffer): Promise<void> {
  if (ctx.seen.has(name)) throw new Error(`duplicate archive path ${name}`);
  ctx.seen.add(name);
  let done!: (e?: Error | null) => void;
  const finished = new Promise<void>((resolve, reject) => { done = (e) => (e ? reject(e) : resolve()); });
  const sink = ctx.pack.entry({ name, size, mtime, mode: 0o644, type: 'file' }, (err) => done(err));
  if (Buffer.isBuffer(body)) {
    if (body.length) sink.write(body);
  } else {
    for await (const chunk of body) {
      if (!sink.write(chunk)) await once(sink, 'drain');
    }
  }
  // @types/tar-stream types the sink as a Node Writable whose end() wants a chunk; streamx takes none.
  (sink as unknown as { end(): void }).end();
  await finished;
  ctx.bytes += size;
}

function redactBuffer(ctx: Ctx, buf: Buffer, counts: RedactionCounts): Buffer {
  if (!ctx.o.redact) return buf;
  const r = new StreamRedactor(counts);
  return Buffer.concat([r.push(buf), r.end()]);
}

function record(ctx: Ctx, item: ManifestItem): void {
  if (item.redactions && Object.keys(item.redactions).length === 0) delete item.redactions;
  if (item.redactions) mergeCounts(ctx.counts, item.redactions);
  ctx.items.push(item);
  ctx.o.onItem?.(item, ctx.bytes);
}

async function addBuffer(ctx: Ctx, base: Omit<ManifestItem, 'bytes' | 'archived' | 'durationMs'>, t0: number, raw: Buffer): Promise<void> {
  const counts: RedactionCounts = {};
  const data = redactBuffer(ctx, raw, counts);
  await writeEntry(ctx, base.path, data.length, new Date(), data);
  record(ctx, { ...base, archived: true, bytes: data.length, durationMs: Date.now() - t0, redactions: counts });
}

function memCap(ctx: Ctx): number {
  return Math.min(ctx.o.fileCap, MEMORY_ITEM_CAP);
}

// ---------------------------------------------------------------- files

async function collectFile(ctx: Ctx, archivePath: string, absPath: string, srcLabel: string, timestamped: boolean): Promise<void> {
  const t0 = Date.now();
  const opened = await openRegular(absPath);
  if ('skip' in opened) {
    record(ctx, { path: archivePath, source: 'file', src: srcLabel, status: opened.skip, archived: false, bytes: 0, durationMs: Date.now() - t0, error: opened.reason });
    return;
  }
  const { fh, st } = opened;
  try {
    if (timestamped && st.mtimeMs < ctx.o.sinceMs && st.size > 0 && /\.\d+$|-\d{8}$|\.old$/.test(absPath)) {
      record(ctx, { path: archivePath, source: 'file', src: srcLabel, status: 'skipped', archived: false, bytes: 0, sourceBytes: st.size, durationMs: Date.now() - t0, note: 'rotated log last written before --since' });
      return;
    }
    if (/\.(gz|xz|bz2|zst|lz4)$/.test(absPath)) {
      record(ctx, { path: archivePath, source: 'file', src: srcLabel, status: 'skipped', archived: false, bytes: 0, sourceBytes: st.size, durationMs: Date.now() - t0, note: 'compressed rotated log: cannot be redacted or windowed in the stream' });
      return;
    }
    const plan = await planRange(fh, st.size, st.mtimeMs, { sinceMs: ctx.o.sinceMs, untilMs: ctx.o.untilMs, cap: ctx.o.fileCap, timestamped });
    const counts: RedactionCounts = {};
    const redactor = ctx.o.redact ? new StreamRedactor(counts) : null;
    let short = 0;
    const size = plan.end - plan.start;
    await writeEntry(ctx, archivePath, size, st.mtime, readRange(fh, plan.start, plan.end, redactor, (n) => { short = n; }));
    const notes: string[] = [];
    if (plan.windowed) notes.push(`lines outside the window dropped (kept bytes ${plan.start}..${plan.end} of ${st.size})`);
    if (plan.capped) notes.push(`capped at --file-cap ${ctx.o.fileCap} bytes (tail kept)`);
    let now: number | undefined;
    try { now = (await fh.stat()).size; } catch { /* gone */ }
    if (now !== undefined && now > st.size) notes.push(`grew by ${now - st.size} bytes while read (read up to its size at open)`);
    const item: ManifestItem = {
      path: archivePath, source: 'file', src: srcLabel, status: plan.capped ? 'truncated' : 'ok', archived: true, bytes: size, sourceBytes: st.size,
      durationMs: Date.now() - t0, redactions: counts,
    };
    if (short > 0) { item.status = 'error'; item.error = `file shrank while read: last ${short} bytes padded with newlines`; }
    if (notes.length) item.note = notes.join('; ');
    record(ctx, item);
  } finally {
    await fh.close().catch(() => undefined);
  }
}

function globToRegex(seg: string): RegExp {
  const re = seg.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*').replace(/\?/g, '[^/]');
  return new RegExp(`^${re}$`);
}

/** Expands wildcard patterns (per path segment) under base; directories expand recursively when asked. No symlinked dirs are followed. */
async function expandGlob(root: string, pattern: string, recursive: boolean, limit: number): Promise<{ files: string[]; truncated: boolean }> {
  const segs = pattern.split('/').filter(Boolean);
  const out: string[] = [];
  let truncated = false;
  const walkAll = async (rel: string, depth: number): Promise<void> => {
    if (depth > 10 || out.length >= limit) { truncated ||= out.length >= limit; return; }
    let ents;
    try { ents = await fsp.readdir(join(root, rel), { withFileTypes: true }); } catch { return; }
    ents.sort((a, b) => a.name.localeCompare(b.name));
    for (const e of ents) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) await walkAll(r, depth + 1);
      else { if (out.length >= limit) { truncated = true; return; } out.push(r); }
    }
  };
  const step = async (rel: string, i: number): Promise<void> => {
    if (out.length >= limit) { truncated = true; return; }
    if (i === segs.length) {
      let st;
      try { st = await fsp.lstat(join(root, rel)); } catch { return; }
      if (st.isDirectory()) { if (recursive) await walkAll(rel, 0); } else out.push(rel);
      return;
    }
    const seg = segs[i]!;
    if (!/[*?]/.test(seg)) { await step(rel ? `${rel}/${seg}` : seg, i + 1); return; }
    let names: string[];
    try { names = await fsp.readdir(join(root, rel)); } catch { return; }
    const re = globToRegex(seg);
    for (const n of names.sort()) if (re.test(n)) await step(rel ? `${rel}/${n}` : n, i + 1);
  };
  await step('', 0);
  return { files: out, truncated };
}

async function collectGlob(ctx: Ctx, spec: Extract<ItemSpec, { kind: 'glob' }>): Promise<void> {
  const t0 = Date.now();
  const root = hostPath(ctx.o.hostRoot, spec.base);
  const files: string[] = [];
  let truncated = false;
  for (const p of spec.patterns) {
    const r = await expandGlob(root, p, spec.recursive ?? false, (spec.maxFiles ?? 2000) - files.length);
    for (const f of r.files) if (!files.includes(f)) files.push(f);
    truncated ||= r.truncated;
  }
  if (files.length === 0) {
    record(ctx, { path: `${spec.into}/`, source: 'file', src: `${spec.base}/{${spec.patterns.join(',')}}`, status: 'missing', archived: false, bytes: 0, durationMs: Date.now() - t0, error: 'no matching files' });
    return;
  }
  for (const f of files) {
    const archivePath = posix.join(spec.into, f);
    if (ctx.seen.has(archivePath)) continue;
    await collectFile(ctx, archivePath, join(root, f), posix.join(spec.base, f), spec.timestamped ?? false);
  }
  if (truncated) {
    record(ctx, { path: `${spec.into}/`, source: 'file', src: spec.base, status: 'truncated', archived: false, bytes: 0, durationMs: Date.now() - t0, note: `more than ${spec.maxFiles ?? 2000} files matched; the rest were left out` });
  }
}

// ---------------------------------------------------------------- proc, commands, journals

async function readProcFile(abs: string, cap: number): Promise<{ buf?: Buffer; truncated?: boolean; status?: ItemStatus; error?: string }> {
  const opened = await openRegular(abs);
  if ('skip' in opened) return { status: opened.skip, error: opened.reason };
  const tail = new TailBuffer(cap);
  try {
    const chunk = Buffer.alloc(64 * 1024);
    for (;;) {
      const { bytesRead } = await opened.fh.read(chunk, 0, chunk.length, null);
      if (bytesRead === 0) break;
      tail.push(Buffer.from(chunk.subarray(0, bytesRead)));
    }
  } catch (e) {
    return { status: 'error', error: (e as Error).message };
  } finally { await opened.fh.close().catch(() => undefined); }
  return { buf: tail.toBuffer(), truncated: tail.truncated };
}

async function collectProc(ctx: Ctx, path: string, src: string, t0 = Date.now(), note?: string): Promise<void> {
  const r = await readProcFile(src, memCap(ctx));
  if (!r.buf) {
    record(ctx, { path, source: 'proc', src, status: r.status ?? 'error', archived: false, bytes: 0, durationMs: Date.now() - t0, ...(r.error ? { error: r.error } : {}), ...(note ? { note } : {}) });
    return;
  }
  await addBuffer(ctx, { path, source: 'proc', src, status: r.truncated ? 'truncated' : 'ok', ...(note ? { note } : {}) }, t0, r.buf);
}

async function collectFallback(ctx: Ctx, path: string, fb: Fallback, why: string, t0: number): Promise<void> {
  const note = `${why}; fell back to ${fb.kind === 'proc' ? fb.src : fb.gen}`;
  if (fb.kind === 'proc') return collectProc(ctx, path, fb.src, t0, note);
  return collectGenerated(ctx, path, fb.gen, t0, note);
}

async function collectCommand(ctx: Ctx, spec: Extract<ItemSpec, { kind: 'command' }>): Promise<void> {
  const t0 = Date.now();
  let argv = spec.argv;
  if (spec.needs === 'containerd-socket') {
    const sock = ctx.o.containerdSocket ?? (ctx.mode === 'nsenter' ? '/run/containerd/containerd.sock' : hostPath(ctx.o.hostRoot, '/run/containerd/containerd.sock'));
    argv = [argv[0]!, '--address', sock, '--connect-timeout', '5s', ...argv.slice(1)];
    const sockSeen = ctx.mode === 'nsenter' && !ctx.o.containerdSocket ? join('/proc', String(ctx.o.hostPid ?? 1), 'root', sock) : sock;
    const st = await fsp.lstat(sockSeen).catch(() => null);
    if (!st?.isSocket()) {
      record(ctx, { path: spec.path, source: 'command', command: argv, status: 'missing', archived: false, bytes: 0, durationMs: Date.now() - t0, error: `containerd socket ${sock} not found` });
      return;
    }
  }
  if (argv[0] === 'containerd' && argv[1] === 'config' && ctx.mode === 'local') {
    const cfg = hostPath(ctx.o.hostRoot, '/etc/containerd/config.toml');
    argv = ['containerd', '--config', cfg, ...argv.slice(1)];
  }
  const resolved = await resolveArgv(ctx, argv);
  if (!resolved) {
    if (spec.fallback) return collectFallback(ctx, spec.path, spec.fallback, `${argv[0]} not found`, t0);
    record(ctx, { path: spec.path, source: 'command', command: argv, status: 'missing', archived: false, bytes: 0, durationMs: Date.now() - t0, error: `${argv[0]} not found on the host or in this image` });
    return;
  }
  const res = await runCommand(resolved.run, { timeoutMs: ctx.o.commandTimeoutMs, cap: memCap(ctx), env: ctx.env });
  let out = res.stdout.toBuffer();
  const err = res.stderr.toBuffer();
  if (res.status !== 'ok' && err.length) out = Buffer.concat([out, Buffer.from('\n--- stderr ---\n'), err]);
  const base = { path: spec.path, source: 'command' as const, command: resolved.run, via: resolved.via, status: res.status === 'ok' && res.stdout.truncated ? 'truncated' as const : res.status, ...(res.error ? { error: res.error } : {}) };
  if (res.status === 'missing') {
    record(ctx, { ...base, archived: false, bytes: 0, durationMs: Date.now() - t0 });
    return;
  }
  await addBuffer(ctx, base, t0, out);
}

function journalArgv(ctx: Ctx, spec: Extract<ItemSpec, { kind: 'journal' }>): string[] {
  const argv = ['journalctl'];
  if (ctx.o.journalDir) argv.push('--directory', ctx.o.journalDir);
  else if (ctx.mode === 'local' && ctx.o.hostRoot !== '/') argv.push('--root', ctx.o.hostRoot);
  argv.push('-o', 'short-iso-precise', '--utc', '--no-pager', '-q', '--since', `@${Math.floor(ctx.o.sinceMs / 1000)}`, '--until', `@${Math.ceil(ctx.o.untilMs / 1000)}`);
  if (spec.kernel) argv.push('-k');
  for (const u of spec.units) argv.push('-u', u);
  return argv;
}

async function collectJournal(ctx: Ctx, spec: Extract<ItemSpec, { kind: 'journal' }>): Promise<void> {
  const t0 = Date.now();
  const argv = journalArgv(ctx, spec);
  const resolved = await resolveArgv(ctx, argv);
  if (!resolved) {
    record(ctx, { path: spec.path, source: 'journal', command: argv, status: 'missing', archived: false, bytes: 0, durationMs: Date.now() - t0, error: 'journalctl not found on the host or in this image' });
    return;
  }
  // Pass 1: how many bytes the window holds.
  const first = await countCommandBytes(resolved.run, { timeoutMs: ctx.o.commandTimeoutMs, env: ctx.env });
  const base = { path: spec.path, source: 'journal' as const, command: resolved.run, via: resolved.via };
  const stderr = first.result.stderr.toBuffer().toString('utf8');
  if (first.result.status !== 'ok' || first.bytes === 0) {
    const noFiles = /No journal files/i.test(stderr);
    const status: ItemStatus = first.result.status === 'ok' || noFiles ? (first.bytes === 0 ? 'missing' : 'ok') : first.result.status;
    if (first.bytes === 0) {
      record(ctx, { ...base, status, archived: false, bytes: 0, durationMs: Date.now() - t0, error: noFiles ? 'no journal files' : (first.result.error ?? 'no entries in the window') });
      return;
    }
  }
  const total = first.bytes;
  const size = Math.min(total, ctx.o.fileCap);
  const skip = total - size;
  // Pass 2: stream it, redacting from the start and dropping the first `skip` bytes (tail kept).
  const counts: RedactionCounts = {};
  const redactor = ctx.o.redact ? new StreamRedactor(counts) : null;
  const s = streamCommand(resolved.run, { timeoutMs: ctx.o.commandTimeoutMs, env: ctx.env });
  let emitted = 0;
  let seen = 0;
  let padded = 0;
  async function* body(): AsyncGenerator<Buffer> {
    const take = function* (b: Buffer): Generator<Buffer> {
      const from = Math.max(0, skip - seen);
      seen += b.length;
      if (from >= b.length) return;
      let part = b.subarray(from);
      if (emitted + part.length > size) part = part.subarray(0, size - emitted);
      emitted += part.length;
      if (part.length) yield part;
    };
    for await (const chunk of s.chunks) yield* take(redactor ? redactor.push(chunk) : chunk);
    if (redactor) yield* take(redactor.end());
    if (emitted < size) { padded = size - emitted; emitted = size; yield Buffer.alloc(padded, 10); }
  }
  await writeEntry(ctx, spec.path, size, new Date(ctx.o.untilMs), body());
  const res = await s.finished;
  const item: ManifestItem = { ...base, status: res.status === 'ok' ? (skip > 0 ? 'truncated' : 'ok') : res.status, archived: true, bytes: size, sourceBytes: total, durationMs: Date.now() - t0, redactions: counts };
  if (res.error) item.error = res.error;
  const notes = ['window applied by journalctl; ISO-8601 UTC timestamps (short-iso-precise --utc)'];
  if (skip > 0) notes.push(`capped at --file-cap ${ctx.o.fileCap} bytes (tail kept)`);
  if (padded) notes.push(`journal changed between passes: ${padded} bytes padded`);
  item.note = notes.join('; ');
  record(ctx, item);
}

// ---------------------------------------------------------------- generated

async function listPids(): Promise<number[]> {
  try { return (await fsp.readdir('/proc')).filter((n) => /^\d+$/.test(n)).map(Number).sort((a, b) => a - b); } catch { return []; }
}

async function readText(p: string, max = 65536): Promise<string | null> {
  const r = await readProcFile(p, max);
  return r.buf ? r.buf.toString('utf8') : null;
}

async function walkSysctl(dir: string, prefix: string, out: string[], budget: { n: number }): Promise<void> {
  let ents;
  try { ents = await fsp.readdir(dir, { withFileTypes: true }); } catch { return; }
  for (const e of ents.sort((a, b) => a.name.localeCompare(b.name))) {
    if (budget.n-- <= 0) return;
    const p = join(dir, e.name);
    const key = prefix ? `${prefix}.${e.name}` : e.name;
    if (e.isDirectory()) await walkSysctl(p, key, out, budget);
    else if (e.isFile()) {
      const v = await readText(p, 4096);
      if (v !== null) out.push(`${key} = ${v.trim().replace(/\s+/g, ' ')}`);
    }
  }
}

async function generate(ctx: Ctx, gen: GeneratorName): Promise<string> {
  switch (gen) {
    case 'os-summary': {
      const lines = [
        `node: ${await nodeName(ctx)}`,
        `collected at: ${new Date().toISOString()}`,
        `window: ${new Date(ctx.o.sinceMs).toISOString()} .. ${new Date(ctx.o.untilMs).toISOString()}`,
        `host root: ${ctx.o.hostRoot}`,
        `commands run via: ${ctx.mode}`,
        `kernel: ${(await readText('/proc/version'))?.trim() ?? '?'}`,
        `uptime (s): ${(await readText('/proc/uptime'))?.trim().split(' ')[0] ?? '?'}`,
      ];
      return lines.join('\n') + '\n';
    }
    case 'sysctl-from-proc': {
      const out: string[] = [];
      await walkSysctl('/proc/sys', '', out, { n: 20000 });
      return out.join('\n') + '\n';
    }
    case 'ps-from-proc': {
      const out = ['PID PPID STATE COMMAND'];
      for (const pid of await listPids()) {
        const stat = await readText(`/proc/${pid}/stat`, 4096);
        const cmd = await readText(`/proc/${pid}/cmdline`, 65536);
        if (!stat) continue;
        const close = stat.lastIndexOf(')');
        const fields = stat.slice(close + 2).split(' ');
        const comm = stat.slice(stat.indexOf('(') + 1, close);
        out.push(`${pid} ${fields[1] ?? '?'} ${fields[0] ?? '?'} ${cmd ? cmd.replace(/\0/g, ' ').trim() || `[${comm}]` : `[${comm}]`}`);
      }
      return out.join('\n') + '\n';
    }
    case 'allprocstat': {
      const out: string[] = [];
      for (const pid of await listPids()) {
        const s = await readText(`/proc/${pid}/stat`, 4096);
        if (s) out.push(s.trim());
      }
      return out.join('\n') + '\n';
    }
    case 'io-throttling': {
      // field 42: aggregated block I/O delays (centiseconds), as the EKS collector reports it
      const rows: [number, string][] = [];
      for (const pid of await listPids()) {
        const s = await readText(`/proc/${pid}/stat`, 4096);
        if (!s) continue;
        const close = s.lastIndexOf(')');
        const rest = s.slice(close + 2).split(' ');
        const delay = Number(rest[39] ?? 0);
        if (delay > 0) rows.push([delay, `${pid} ${s.slice(s.indexOf('(') + 1, close)} ${delay}`]);
      }
      rows.sort((a, b) => b[0] - a[0]);
      return ['PID Name Block-IO-Delay(centiseconds)', ...rows.map((r) => r[1])].join('\n') + '\n';
    }
    case 'cpu-throttling': {
      const out: string[] = [];
      const walk = async (dir: string, depth: number): Promise<void> => {
        if (depth > 8 || out.length > 5000) return;
        let ents;
        try { ents = await fsp.readdir(dir, { withFileTypes: true }); } catch { return; }
        if (ents.some((e) => e.name === 'cpu.stat')) {
          const st = await readText(join(dir, 'cpu.stat'), 8192);
          if (st && /nr_throttled [1-9]/.test(st)) {
            const procs = (await readText(join(dir, 'cgroup.procs'), 65536))?.trim();
            if (procs) out.push(`# ${dir}\n${st.trim()}\npids: ${procs.split('\n').join(' ')}\n`);
          }
        }
        for (const e of ents) if (e.isDirectory()) await walk(join(dir, e.name), depth + 1);
      };
      await walk('/sys/fs/cgroup', 0);
      return out.length ? out.join('\n') : 'No CPU throttled processes found\n';
    }
    case 'df-from-statfs': {
      const mounts = (await readText('/proc/self/mounts', 1 << 20)) ?? '';
      const out = ['Filesystem Type Size Used Avail Inodes IFree Mounted-on'];
      for (const line of mounts.split('\n')) {
        const [dev, mnt, type] = line.split(' ');
        if (!dev || !mnt || !type || /^(proc|sysfs|cgroup2?|devpts|mqueue|securityfs|debugfs|tracefs|bpf|pstore|configfs|fusectl|autofs|binfmt_misc|nsfs)$/.test(type)) continue;
        try {
          const s = await fsp.statfs(mnt.replace(/\\040/g, ' '));
          out.push(`${dev} ${type} ${s.blocks * s.bsize} ${(s.blocks - s.bfree) * s.bsize} ${s.bavail * s.bsize} ${s.files} ${s.ffree} ${mnt}`);
        } catch { /* not reachable from here */ }
      }
      return out.join('\n') + '\n';
    }
    case 'pullwatch-ingests': {
      const root = ctx.o.containerdRoot ?? hostPath(ctx.o.hostRoot, '/var/lib/containerd');
      const r = await readIngests(root);
      return JSON.stringify({ collectedAt: new Date().toISOString(), ...r }, null, 2) + '\n';
    }
  }
}

async function collectGenerated(ctx: Ctx, path: string, gen: GeneratorName, t0 = Date.now(), note?: string): Promise<void> {
  try {
    const text = await generate(ctx, gen);
    let buf = Buffer.from(text, 'utf8');
    let status: ItemStatus = 'ok';
    if (buf.length > memCap(ctx)) { buf = buf.subarray(buf.length - memCap(ctx)); status = 'truncated'; }
    await addBuffer(ctx, { path, source: 'generated', src: gen, status, ...(note ? { note } : {}) }, t0, buf);
  } catch (e) {
    record(ctx, { path, source: 'generated', src: gen, status: 'error', archived: false, bytes: 0, durationMs: Date.now() - t0, error: (e as Error).message });
  }
}

// ---------------------------------------------------------------- expanders

async function httpGet(url: string, timeoutMs: number, cap: number): Promise<{ status: number; body: Buffer }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), headers: { accept: 'application/json' } });
  const tail = new TailBuffer(cap);
  if (res.body) for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) tail.push(Buffer.from(chunk));
  return { status: res.status, body: tail.toBuffer() };
}

async function collectHttp(ctx: Ctx, path: string, url: string, transform?: (json: unknown) => unknown): Promise<unknown> {
  const t0 = Date.now();
  try {
    const r = await httpGet(url, ctx.o.commandTimeoutMs, memCap(ctx));
    if (r.status === 404) {
      record(ctx, { path, source: 'http', src: url, status: 'missing', archived: false, bytes: 0, durationMs: Date.now() - t0, error: 'HTTP 404' });
      return undefined;
    }
    if (r.status !== 200) {
      await addBuffer(ctx, { path, source: 'http', src: url, status: 'error', error: `HTTP ${r.status}` }, t0, r.body);
      return undefined;
    }
    let json: unknown;
    try { json = JSON.parse(r.body.toString('utf8')); } catch (e) {
      await addBuffer(ctx, { path, source: 'http', src: url, status: 'error', error: `invalid JSON: ${(e as Error).message}` }, t0, r.body);
      return undefined;
    }
    const out = transform ? transform(json) : json;
    await addBuffer(ctx, { path, source: 'http', src: url, status: 'ok' }, t0, Buffer.from(JSON.stringify(out, null, 2) + '\n'));
    return json;
  } catch (e) {
    record(ctx, { path, source: 'http', src: url, status: 'error', archived: false, bytes: 0, durationMs: Date.now() - t0, error: `agent not reachable: ${(e as Error).message}` });
    return undefined;
  }
}

interface PullLike { state?: string; layers?: unknown[]; image?: string }
function pullsOf(json: unknown): PullLike[] {
  if (Array.isArray(json)) return json as PullLike[];
  if (json && typeof json === 'object' && Array.isArray((json as { pulls?: unknown }).pulls)) return (json as { pulls: PullLike[] }).pulls;
  return [];
}

async function expand(ctx: Ctx, name: Extract<ItemSpec, { kind: 'expand' }>['expand']): Promise<void> {
  switch (name) {
    case 'iptables': {
      for (const bin of ['iptables', 'ip6tables', 'iptables-legacy', 'ip6tables-legacy']) {
        for (const table of IPTABLES_TABLES) {
          await collectCommand(ctx, { kind: 'command', path: `networking/${bin}-${table}.txt`, argv: [bin, '--wait', '1', '--numeric', '--verbose', '--list', '--table', table],
            ...(bin === 'iptables' ? { fallback: { kind: 'proc' as const, src: '/proc/net/ip_tables_names' } } : {}) });
        }
        await collectCommand(ctx, { kind: 'command', path: `networking/${bin}-save.txt`, argv: [`${bin}-save`] });
      }
      return;
    }
    case 'ethtool': {
      let ifaces: string[] = [];
      try { ifaces = (await fsp.readdir('/sys/class/net')).sort(); } catch { /* none */ }
      for (const i of ifaces) await collectCommand(ctx, { kind: 'command', path: `networking/ethtool/${i}.txt`, argv: ['ethtool', '-S', i] });
      return;
    }
    case 'xfs': {
      const mounts = (await readText('/proc/1/mounts', 1 << 20)) ?? (await readText('/proc/self/mounts', 1 << 20)) ?? '';
      const xfs = [...new Set(mounts.split('\n').map((l) => l.split(' ')).filter((f) => f[2] === 'xfs').map((f) => f[1]!))];
      for (const [i, m] of xfs.entries()) await collectCommand(ctx, { kind: 'command', path: `storage/xfs/${i}-${m.replace(/[^A-Za-z0-9]+/g, '_')}.txt`, argv: ['xfs_info', m] });
      if (xfs.length === 0) record(ctx, { path: 'storage/xfs/', source: 'command', command: ['xfs_info'], status: 'skipped', archived: false, bytes: 0, durationMs: 0, note: 'no xfs mounts' });
      return;
    }
    case 'overlay-usage': {
      const t0 = Date.now();
      const mounts = (await readText('/proc/1/mounts', 1 << 20)) ?? '';
      const uppers = [...mounts.matchAll(/upperdir=([^,\s]+)/g)].map((m) => m[1]!).slice(0, 500);
      const out = ['# overlay mounts (upperdir) of running containers'];
      for (const u of uppers) out.push(u);
      await addBuffer(ctx, { path: 'storage/overlay-upperdirs.txt', source: 'generated', src: '/proc/1/mounts', status: 'ok' }, t0, Buffer.from(out.join('\n') + '\n'));
      return;
    }
    case 'containerd-stacks': {
      if (!ctx.o.goroutines) return;
      const t0 = Date.now();
      let pid: number | undefined;
      for (const p of await listPids()) {
        if ((await readText(`/proc/${p}/comm`, 256))?.trim() === 'containerd') { pid = p; break; }
      }
      if (!pid) { record(ctx, { path: 'containerd/stacks/', source: 'generated', src: 'SIGUSR1', status: 'missing', archived: false, bytes: 0, durationMs: 0, error: 'no containerd process' }); return; }
      try { process.kill(pid, 'SIGUSR1'); } catch (e) {
        record(ctx, { path: 'containerd/stacks/', source: 'generated', src: `kill -USR1 ${pid}`, status: 'error', archived: false, bytes: 0, durationMs: 0, error: (e as Error).message });
        return;
      }
      await new Promise((r) => setTimeout(r, 1500));
      const tmp = ctx.mode === 'nsenter' ? join('/proc', String(ctx.o.hostPid ?? 1), 'root/tmp') : hostPath(ctx.o.hostRoot, '/tmp');
      let names: string[] = [];
      try { names = (await fsp.readdir(tmp)).filter((n) => /^containerd\..*stacks\.log$/.test(n)); } catch { /* none */ }
      for (const n of names) {
        const st = await fsp.stat(join(tmp, n)).catch(() => null);
        if (st && st.mtimeMs >= t0 - 1000) await collectFile(ctx, `containerd/stacks/${n}`, join(tmp, n), join('/tmp', n), false);
      }
      if (!names.length) record(ctx, { path: 'containerd/stacks/', source: 'generated', src: `kill -USR1 ${pid}`, status: 'ok', archived: false, bytes: 0, durationMs: Date.now() - t0, note: 'signal sent; stacks went to the containerd log (see containerd/containerd-log.txt)' });
      return;
    }
    case 'gpu': {
      const dev = await fsp.stat('/dev/nvidiactl').then(() => true, () => false);
      if (!dev) return;
      await collectCommand(ctx, { kind: 'command', path: 'gpu/nvidia-smi.txt', argv: ['nvidia-smi', '-q'] });
      await collectCommand(ctx, { kind: 'command', path: 'gpu/nvidia-bug-report.log', argv: ['nvidia-bug-report.sh', '--output-file', '/dev/stdout'] });
      return;
    }
    case 'pullwatch-agent': {
      if (!ctx.o.agentUrl) {
        record(ctx, { path: 'pullwatch/pulls.json', source: 'http', status: 'skipped', archived: false, bytes: 0, durationMs: 0, note: 'no --agent-url' });
        return;
      }
      const base = ctx.o.agentUrl.replace(/\/+$/, '');
      const json = await collectHttp(ctx, 'pullwatch/pulls.json', `${base}/v1/pulls?all=1`);
      if (json !== undefined) {
        const pulls = pullsOf(json);
        const t0 = Date.now();
        const stalls = pulls.filter((p) => p.state === 'stalled' || p.state === 'cancelled-by-runtime' || p.state === 'slow');
        await addBuffer(ctx, { path: 'pullwatch/stalls.json', source: 'generated', src: 'pulls.json', status: 'ok' }, t0, Buffer.from(JSON.stringify(stalls, null, 2) + '\n'));
        const inflight = pulls.filter((p) => p.state && !['completed', 'failed', 'cancelled-by-runtime'].includes(p.state));
        await addBuffer(ctx, { path: 'pullwatch/in-flight.json', source: 'generated', src: 'pulls.json', status: 'ok' }, t0, Buffer.from(JSON.stringify(inflight.map((p) => ({ image: p.image, state: p.state, layers: p.layers })), null, 2) + '\n'));
      }
      await collectHttp(ctx, 'pullwatch/tune-plan.json', `${base}/v1/tune`);
      return;
    }
    case 'pullwatch-captures': {
      const dir = ctx.o.capturesDir;
      if (!dir) return;
      const t0 = Date.now();
      const list = await listCaptures(dir).catch(() => []);
      if (list.length === 0) {
        record(ctx, { path: 'pullwatch/captures/', source: 'file', src: dir, status: 'missing', archived: false, bytes: 0, durationMs: Date.now() - t0, error: 'no stall captures saved' });
        return;
      }
      for (const c of list.slice(-200)) await collectFile(ctx, `pullwatch/captures/${c.name}`, c.path, c.path, false);
      return;
    }
  }
}

async function nodeName(ctx: Ctx): Promise<string> {
  const h = (await readText(hostPath(ctx.o.hostRoot, '/etc/hostname'), 256))?.trim();
  return process.env.PULLWATCH_NODE_NAME || h || hostname();
}

async function collect(ctx: Ctx, spec: ItemSpec): Promise<void> {
  switch (spec.kind) {
    case 'file': return collectFile(ctx, spec.path, hostPath(ctx.o.hostRoot, spec.src), spec.src, spec.timestamped ?? false);
    case 'glob': return collectGlob(ctx, spec);
    case 'command': return collectCommand(ctx, spec);
    case 'proc': return collectProc(ctx, spec.path, spec.src);
    case 'journal': return collectJournal(ctx, spec);
    case 'generate': return collectGenerated(ctx, spec.path, spec.gen);
    case 'expand': return expand(ctx, spec.expand);
  }
}

function readme(ctx: Ctx, node: string): string {
  return `pullwatch diagnostics bundle
============================

node:        ${node}
created:     ${new Date(ctx.startedAt).toISOString()}
window:      ${new Date(ctx.o.sinceMs).toISOString()} .. ${new Date(ctx.o.untilMs).toISOString()} (UTC)
host root:   ${ctx.o.hostRoot}
commands:    ${ctx.mode === 'nsenter' ? 'run in the host\'s namespaces (nsenter -t 1 -m -u -i -n -p)' : 'run with the tools of the image pullwatch runs in (or the host, when not in a container)'}
redaction:   ${ctx.o.redact ? 'ON (secrets replaced by <redacted:RULE>*** masks of the same length)' : 'OFF (--no-redact was given: this bundle may contain secrets)'}

Layout (the EKS log collector's folders, so its readers find their way):
  system/      os-release, uname, uptime, packages, services, ps, top, netstat/ss, cpu and io throttling, reboots, whole journal
  var_log/     syslog/messages (window + tail cap), cloud-init, kube-proxy; var_log/pods: node-critical pod logs
  kernel/      dmesg, kernel journal, uname, cmdline
  modinfo/     lsmod, modinfo of lustre/ip_vs/overlay
  storage/     mounts, df -h/-i, lsblk, lvm, fstab, xfs_info, overlay upperdirs
  networking/  iptables/ip6tables (+legacy) per table and -save, nft, ipvs, ipset, conntrack, ip addr/link/rule/route (all tables),
               resolv.conf, ethtool -S per interface, systemd-networkd units
  containerd/  config dump and files, journal, ctr version/namespaces/images/containers/tasks/plugins/snapshots/content active,
               goroutine stacks (with --goroutines)
  docker/      info, ps, images, version, journal, daemon.json
  kubelet/     journal, unit and drop-ins, config files (kubeadm and EKS layouts), kubeconfig (redacted), image_manager
  nodeadm/, sandbox-image/, crio/   when present
  sysctls/     sysctl --all (or read from /proc/sys)
  cni/         /etc/cni/net.d
  gpu/         nvidia-smi / nvidia-bug-report, when a GPU is present
  pullwatch/   this node's pulls, stalls and in-flight layer progress from the agent (/v1/pulls), the tune plan (/v1/tune),
               containerd's active ingests read from disk, and the captures the agent saved when pulls stalled

manifest.json (the last entry) lists every item, including those NOT in the archive: its source (file, command, proc, journal,
http, generated), the exact command run, status (ok, missing, error, truncated, timeout, skipped), bytes, duration, error text,
and how many secrets each redaction rule masked. Journals use ISO-8601 UTC timestamps with microseconds. Text logs with
timestamps keep the lines inside the window; every item keeps at most --file-cap bytes (the tail). /proc/*/environ is never read.
`;
}

/** Streams the bundle into `out` and resolves with the manifest once the gzip stream has ended. */
export async function writeBundle(opts: BundleOptions, out: Writable, logger: Logger): Promise<Manifest> {
  // Larger buffers than the 16 KiB defaults let reading+redaction (main thread) overlap with
  // compression (libuv pool) instead of taking turns; still a few MiB at most.
  const pack = tar.pack({ highWaterMark: 256 * 1024 });
  const gzip = createGzip({ level: opts.gzipLevel ?? DEFAULT_GZIP_LEVEL, chunkSize: 256 * 1024 });
  const piped = pipeline(pack, gzip, out);
  const mode = await detectExecMode(opts.hostRoot, opts.exec);
  const ctx: Ctx = {
    o: opts, logger, pack, mode, items: [], counts: {}, seen: new Set(), bytes: 0, startedAt: Date.now(),
    env: { PATH: opts.toolPath ?? process.env.PATH ?? HOST_PATH_DIRS.join(':'), LANG: 'C', LC_ALL: 'C', SYSTEMD_PAGER: '', SYSTEMD_COLORS: '0', TERM: 'dumb' },
  };
  let failed: unknown;
  piped.catch((e: unknown) => { failed = e; });
  const node = await nodeName(ctx);
  await writeEntry(ctx, 'README.txt', Buffer.byteLength(readme(ctx, node)), new Date(), Buffer.from(readme(ctx, node)));
  const items = opts.items ?? ITEMS;
  for (const spec of items) {
    if (failed) break;
    if (opts.only && !opts.only.some((p) => itemPath(spec).startsWith(p))) continue;
    try {
      await collect(ctx, spec);
    } catch (e) {
      if (failed) break;
      logger.warn({ err: e, item: itemPath(spec) }, 'bundle item failed');
      record(ctx, { path: itemPath(spec), source: sourceOf(spec), status: 'error', archived: false, bytes: 0, durationMs: 0, error: (e as Error).message });
    }
  }
  if (failed) { pack.destroy(); await piped.catch(() => undefined); throw failed; }
  const byStatus: Partial<Record<ItemStatus, number>> = {};
  for (const i of ctx.items) byStatus[i.status] = (byStatus[i.status] ?? 0) + 1;
  const manifest: Manifest = {
    formatVersion: BUNDLE_FORMAT_VERSION,
    generator: `pullwatch ${opts.version ?? ''}`.trim(),
    node,
    createdAt: new Date(ctx.startedAt).toISOString(),
    window: { since: new Date(opts.sinceMs).toISOString(), until: new Date(opts.untilMs).toISOString(), timezone: 'UTC' },
    options: { hostRoot: opts.hostRoot, fileCap: opts.fileCap, commandTimeoutMs: opts.commandTimeoutMs, exec: mode, redact: opts.redact, noRedact: !opts.redact, goroutines: opts.goroutines },
    items: ctx.items,
    totals: {
      items: ctx.items.length, archived: ctx.items.filter((i) => i.archived).length, bytes: ctx.bytes, durationMs: Date.now() - ctx.startedAt,
      byStatus, redactions: ctx.counts, redactionRules: REDACTION_RULES,
    },
  };
  const mbuf = Buffer.from(JSON.stringify(manifest, null, 2) + '\n');
  await writeEntry(ctx, 'manifest.json', mbuf.length, new Date(), mbuf);
  pack.finalize();
  await piped;
  return manifest;
}

function itemPath(spec: ItemSpec): string {
  switch (spec.kind) {
    case 'glob': return `${spec.into}/`;
    case 'expand': return `(${spec.expand})`;
    default: return spec.path;
  }
}

function sourceOf(spec: ItemSpec): ManifestItem['source'] {
  switch (spec.kind) {
    case 'glob': case 'file': return 'file';
    case 'command': return 'command';
    case 'proc': return 'proc';
    case 'journal': return 'journal';
    default: return 'generated';
  }
}

export { kindOf };
