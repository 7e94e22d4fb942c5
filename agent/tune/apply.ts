/**
 * `tune apply`: turns the plan's "apply" recommendations into file edits and writes them safely.
 *
 * Where the value goes:
 *  - the setting is already written somewhere → that line is edited in place (one place of truth);
 *  - containerd 2.x / CRI-O / kubelet with --config-dir → a drop-in (containerd: added to `imports`);
 *  - containerd 1.x → in place in the file whose CRI section is effective, because 1.x imports
 *    replace a plugin's *whole* section (a drop-in with only the timeout would reset sandbox_image,
 *    SystemdCgroup, registry config… — verified with the real 1.6 and 1.7 binaries).
 * Every edit is proven minimal (re-parsed and compared with the original), backed up with a
 * timestamp first, written atomically (temp + fsync + rename, symlinks kept), validated after
 * (re-read with the same loader; `containerd config dump` for containerd), and rolled back on any
 * failure. A lock file (O_EXCL, pid) keeps two applies apart.
 */
import { constants as fsc } from 'node:fs';
import { copyFile, lstat, mkdir, open, readFile, rename, rm, stat, writeFile, chmod, chown } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createTwoFilesPatch } from 'diff';
import { formatDuration, parseDuration } from '../../common/duration.js';
import { HostFs } from './hostfs.js';
import { defaultExec, type ExecFn, type NodeLayout } from './detect.js';
import { setTomlValue, addTomlImport, verifyTomlEdit, tomlString, TomlEditError } from './toml-edit.js';
import { loadContainerdConfig, timeoutTable, TIMEOUT_KEY, isMajor2, timeoutFromDump, type ContainerdFile } from './containerd.js';
import { loadCrioConfig, CRIO_TABLE, CRIO_KEY } from './crio.js';
import { loadKubeletConfig, parseKubeletConfigText, setKubeletKeys, type KubeletFile } from './kubelet.js';
import { globToRegExp } from './hostfs.js';
import { TuneError, type ContainerdFamily, type TunePlan } from './types.js';

export type Component = 'containerd' | 'cri-o' | 'kubelet';

export interface FileChange {
  component: Component;
  /** Host path as configured (may be a symlink). */
  path: string;
  /** Host path actually written (symlink target). */
  realPath: string;
  before: string | null;
  after: string;
  what: string;
}

export interface ApplyOptions {
  plan: TunePlan;
  layout: NodeLayout;
  only?: 'runtime' | 'kubelet' | 'all';
  dryRun?: boolean;
  restart?: boolean;
  force?: boolean;
  /** Host paths. */
  backupDir?: string;
  lockPath?: string;
  now?: Date;
  exec?: ExecFn;
  /** Run `containerd config dump` to validate (default true). */
  runtimeValidate?: boolean;
  /** Restart hook (default: nsenter into PID 1 and `systemctl restart <unit>`). */
  restartComponent?: (c: Component) => Promise<void>;
  /** Health probe (default: ctr/crictl version through nsenter; kubelet /healthz). */
  healthy?: (c: Component) => Promise<boolean>;
  healthTimeoutMs?: number;
  /** In-flight pulls according to the agent; throws when it cannot tell. */
  inFlight?: () => Promise<number>;
  log?: (line: string) => void;
}

export interface ApplyResult {
  changes: FileChange[];
  diff: string;
  backupDir?: string;
  written: boolean;
  restarted: Component[];
  rolledBack: boolean;
  messages: string[];
}

export const DEFAULT_BACKUP_DIR = '/var/lib/pullwatch/tune-backups';
export const DEFAULT_LOCK = '/run/pullwatch-tune.lock';
const DROPIN_NAME = { containerd: 'pullwatch-tune.toml', crio: '99-pullwatch-tune.conf', kubelet: '99-pullwatch-tune.conf' };

const UNIT: Record<Component, string> = { containerd: 'containerd', 'cri-o': 'crio', kubelet: 'kubelet' };

/** Computes the file edits (no writes). Throws TuneError when it must refuse. */
export function planChanges(plan: TunePlan, layout: NodeLayout, only: 'runtime' | 'kubelet' | 'all' = 'all', now = new Date()): FileChange[] {
  const changes: FileChange[] = [];
  const stamp = `# Written by \`pullwatch tune apply\` at ${now.toISOString()}.`;
  const rt = plan.settings.find((s) => s.id === 'runtime.pullProgressTimeout');
  if (rt?.recommendation.apply && only !== 'kubelet') {
    const ms = rt.recommendation.value as number;
    if (plan.runtime.name === 'containerd') changes.push(...containerdChanges(layout, plan.runtime.family as ContainerdFamily, ms, stamp, plan.deadline.reason));
    else if (plan.runtime.name === 'cri-o') changes.push(crioChange(layout, ms, stamp, plan.deadline.reason));
  }
  if (only !== 'runtime') {
    const kub: Record<string, number | boolean> = {};
    for (const s of plan.settings) {
      if (s.component !== 'kubelet' || !s.recommendation.apply) continue;
      if (s.id === 'kubelet.serializeImagePulls' || s.id === 'kubelet.maxParallelImagePulls') kub[s.key] = s.recommendation.value as number | boolean;
    }
    if (Object.keys(kub).length > 0) changes.push(...kubeletChanges(layout, kub));
  }
  return changes;
}

function refuseOnErrors(errors: string[], what: string): void {
  if (errors.length > 0) throw new TuneError(`refusing to edit ${what}: ${errors.join('; ')}`, 'malformed');
}

function containerdChanges(layout: NodeLayout, family: ContainerdFamily, ms: number, stamp: string, reason: string): FileChange[] {
  const view = layout.containerd;
  if (!view) throw new TuneError('containerd config was not read', 'internal');
  refuseOnErrors(view.errors, 'containerd config');
  if (ms === 0 && family === '2.1+') throw new TuneError('refusing to write 0s on containerd 2.1+ (containerd#14158)', 'harmful-deadline');
  const value = formatDuration(ms);
  const edit = (f: ContainerdFile, what: string): FileChange => {
    const table = timeoutTable(f.version);
    const quote = /'/.test(f.text.split('\n').find((l) => l.includes(TIMEOUT_KEY)) ?? '') ? `'${value}'` : tomlString(value);
    let after: string;
    try {
      after = setTomlValue(f.text, table, TIMEOUT_KEY, quote);
      verifyTomlEdit(f.text, after, [{ path: [...table, TIMEOUT_KEY], value }]);
    } catch (e) {
      throw new TuneError(`cannot edit ${f.path} safely: ${(e as Error).message}`, e instanceof TomlEditError ? 'unsafe-edit' : 'malformed');
    }
    return { component: 'containerd', path: f.path, realPath: f.realPath, before: f.text, after, what };
  };
  // 1) already set somewhere effective → edit there
  if (view.timeout.file) return [edit(view.timeout.file, `${TIMEOUT_KEY} = "${value}" (in place)`)];
  const main = view.files.find((f) => f.path === view.mainPath);
  if (!isMajor2(family)) {
    // 2) containerd 1.x: in place in the effective CRI section (imports would replace the whole section)
    const target = view.criSectionFile ?? main;
    if (target) return [edit(target, `${TIMEOUT_KEY} = "${value}" (in place: containerd 1.x imports replace whole plugin sections)`)];
    const text = `${stamp}\n# ${reason}\nversion = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  ${TIMEOUT_KEY} = ${tomlString(value)}\n`;
    return [{ component: 'containerd', path: view.mainPath, realPath: view.mainPath, before: null, after: text, what: 'new config with the deadline' }];
  }
  // 3) containerd 2.x: drop-in through imports
  const version = main?.version ?? 3;
  if (main && version < 2) throw new TuneError(`${main.path} is a version ${version} config; refusing to add a drop-in next to it`, 'unsupported');
  const header = version >= 3 ? `[plugins.'io.containerd.cri.v1.images']` : `[plugins."io.containerd.grpc.v1.cri"]`;
  const dropText = `${stamp}\n# Pull progress deadline: ${reason}\nversion = ${version}\n\n${header}\n  ${TIMEOUT_KEY} = ${tomlString(value)}\n`;
  if (!main) {
    return [{ component: 'containerd', path: view.mainPath, realPath: view.mainPath, before: null, after: dropText, what: 'new config with the deadline' }];
  }
  // an existing glob import whose directory we can drop a file into?
  const rawImports = Array.isArray(main.parsed.imports) ? (main.parsed.imports as unknown[]).filter((x): x is string => typeof x === 'string') : [];
  let dropPath: string | undefined;
  for (const imp of rawImports) {
    const abs = path.posix.isAbsolute(imp) ? path.posix.normalize(imp) : path.posix.join(path.posix.dirname(main.path), imp);
    const dir = path.posix.dirname(abs);
    const base = path.posix.basename(abs);
    if (!/[*?[]/.test(dir) && base.includes('*') && globToRegExp(base).test(`99-${DROPIN_NAME.containerd}`)) { dropPath = `${dir}/99-${DROPIN_NAME.containerd}`; break; }
  }
  const changes: FileChange[] = [];
  if (!dropPath) {
    dropPath = `${path.posix.dirname(main.path)}/${DROPIN_NAME.containerd}`;
    let after: string;
    try {
      after = addTomlImport(main.text, dropPath);
      verifyTomlEdit(main.text, after, [{ path: ['imports'], value: [...rawImports, dropPath] }]);
    } catch (e) {
      throw new TuneError(`cannot add the import to ${main.path} safely: ${(e as Error).message}`, 'unsafe-edit');
    }
    changes.push({ component: 'containerd', path: main.path, realPath: main.realPath, before: main.text, after, what: `imports += "${dropPath}"` });
  }
  const existing = view.files.find((f) => f.path === dropPath);
  if (existing) changes.push(edit(existing, `${TIMEOUT_KEY} = "${value}"`));
  else changes.push({ component: 'containerd', path: dropPath, realPath: dropPath, before: null, after: dropText, what: `drop-in with ${TIMEOUT_KEY} = "${value}"` });
  return changes;
}

function crioChange(layout: NodeLayout, ms: number, stamp: string, reason: string): FileChange {
  const view = layout.crio;
  if (!view) throw new TuneError('CRI-O config was not read', 'internal');
  refuseOnErrors(view.errors, 'CRI-O config');
  const value = formatDuration(ms);
  const src = view.timeout.source;
  if (src.kind === 'file') {
    const f = view.files.find((x) => x.path === src.path);
    if (!f) throw new TuneError(`${src.path} vanished`, 'internal');
    let after: string;
    try {
      after = setTomlValue(f.text, CRIO_TABLE, CRIO_KEY, tomlString(value));
      verifyTomlEdit(f.text, after, [{ path: [...CRIO_TABLE, CRIO_KEY], value }]);
    } catch (e) { throw new TuneError(`cannot edit ${f.path} safely: ${(e as Error).message}`, 'unsafe-edit'); }
    return { component: 'cri-o', path: f.path, realPath: f.realPath, before: f.text, after, what: `${CRIO_KEY} = "${value}" (in place)` };
  }
  const p = `${view.dropInDir}/${DROPIN_NAME.crio}`;
  return {
    component: 'cri-o', path: p, realPath: p, before: null,
    after: `${stamp}\n# Pull progress deadline: ${reason}\n[crio.image]\n${CRIO_KEY} = ${tomlString(value)}\n`,
    what: `drop-in with ${CRIO_KEY} = "${value}"`,
  };
}

function kubeletChanges(layout: NodeLayout, kub: Record<string, number | boolean>): FileChange[] {
  const kv = layout.kubeletView;
  refuseOnErrors(kv.errors, 'kubelet config');
  const byFile = new Map<string, { file: KubeletFile; keys: Record<string, number | boolean> }>();
  const dropKeys: Record<string, number | boolean> = {};
  for (const [key, value] of Object.entries(kub)) {
    const src = kv.values[key as keyof typeof kv.values]?.source;
    const file = src?.kind === 'file' ? [kv.configFile, ...kv.dropIns].find((f) => f?.path === src.path) : undefined;
    if (file) {
      const e = byFile.get(file.path) ?? { file, keys: {} };
      e.keys[key] = value;
      byFile.set(file.path, e);
    } else if (kv.configDir) dropKeys[key] = value;
    else if (kv.configFile) {
      const e = byFile.get(kv.configFile.path) ?? { file: kv.configFile, keys: {} };
      e.keys[key] = value;
      byFile.set(kv.configFile.path, e);
    } else throw new TuneError('no kubelet config file to edit', 'unsupported');
  }
  const out: FileChange[] = [];
  for (const { file, keys } of byFile.values()) {
    let after: string;
    try {
      after = setKubeletKeys(file, keys);
      const re = parseKubeletConfigText(after, file.path);
      const expected = { ...file.data, ...keys };
      if (JSON.stringify(sortKeys(expected)) !== JSON.stringify(sortKeys(re.data))) throw new Error('edit changed more than the intended keys');
    } catch (e) { throw new TuneError(`cannot edit ${file.path} safely: ${(e as Error).message}`, 'unsafe-edit'); }
    out.push({ component: 'kubelet', path: file.path, realPath: file.realPath, before: file.text, after, what: Object.entries(keys).map(([k, v]) => `${k}: ${String(v)}`).join(', ') });
  }
  if (Object.keys(dropKeys).length > 0 && kv.configDir) {
    const p = `${kv.configDir}/${DROPIN_NAME.kubelet}`;
    const existing = kv.dropIns.find((d) => d.path === p);
    const body = { apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration', ...(existing?.data ?? {}), ...dropKeys };
    out.push({ component: 'kubelet', path: p, realPath: existing?.realPath ?? p, before: existing?.text ?? null, after: JSON.stringify(body, null, 4) + '\n', what: `drop-in: ${Object.entries(dropKeys).map(([k, v]) => `${k}: ${String(v)}`).join(', ')}` });
  }
  return out;
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object') return Object.fromEntries(Object.keys(v as object).sort().map((k) => [k, sortKeys((v as Record<string, unknown>)[k])]));
  return v;
}

export function unifiedDiff(changes: FileChange[]): string {
  return changes.map((c) => createTwoFilesPatch(c.before === null ? '/dev/null' : `a${c.path}`, `b${c.path}`, c.before ?? '', c.after, '', '', { context: 3 })).join('');
}

// ---------------------------------------------------------------- lock

interface LockInfo { pid: number; host: string; startedAt: string }

export async function acquireLock(localPath: string, now = new Date()): Promise<() => Promise<void>> {
  await mkdir(path.dirname(localPath), { recursive: true });
  const info: LockInfo = { pid: process.pid, host: os.hostname(), startedAt: now.toISOString() };
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fh = await open(localPath, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o644);
      await fh.writeFile(JSON.stringify(info) + '\n');
      await fh.close();
      return async () => { await rm(localPath, { force: true }); };
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'EROFS') throw new TuneError(`cannot create the lock ${localPath}: read-only filesystem`, 'read-only');
      if (code !== 'EEXIST') throw new TuneError(`cannot create the lock ${localPath}: ${(e as Error).message}`, 'lock');
      let holder: LockInfo | undefined;
      try { holder = JSON.parse(await readFile(localPath, 'utf8')) as LockInfo; } catch { holder = undefined; }
      const age = Date.now() - (await stat(localPath).catch(() => ({ mtimeMs: Date.now() }))).mtimeMs;
      const alive = holder && typeof holder.pid === 'number' ? pidAlive(holder.pid) : age < 10 * 60_000;
      if (alive && attempt === 0) {
        throw new TuneError(`another \`pullwatch tune apply\` is running (lock ${localPath}${holder ? `, pid ${holder.pid} since ${holder.startedAt}` : ''}); try again when it has finished`, 'locked');
      }
      if (alive) throw new TuneError(`lock ${localPath} is held`, 'locked');
      await rm(localPath, { force: true }); // stale: its process is gone
    }
  }
  throw new TuneError(`cannot take the lock ${localPath}`, 'locked');
}

function pidAlive(pid: number): boolean {
  try { process.kill(pid, 0); return true; } catch (e) { return (e as NodeJS.ErrnoException).code === 'EPERM'; }
}

// ---------------------------------------------------------------- writing

async function probeWritable(localDir: string): Promise<void> {
  await mkdir(localDir, { recursive: true }).catch((e: NodeJS.ErrnoException) => {
    if (e.code === 'EROFS') throw new TuneError(`${localDir} is on a read-only filesystem; mount it read-write (e.g. the DaemonSet's host mount) to apply`, 'read-only');
    throw new TuneError(`cannot create ${localDir}: ${e.message}`, 'write');
  });
  const probe = path.join(localDir, `.pullwatch-probe-${process.pid}`);
  try {
    const fh = await open(probe, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o600);
    await fh.close();
    await rm(probe, { force: true });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EROFS') throw new TuneError(`${localDir} is on a read-only filesystem; nothing was changed`, 'read-only');
    throw new TuneError(`cannot write in ${localDir} (${code ?? (e as Error).message}); nothing was changed`, 'write');
  }
}

async function atomicWrite(localPath: string, text: string): Promise<void> {
  const dir = path.dirname(localPath);
  const tmp = path.join(dir, `.${path.basename(localPath)}.pullwatch-tmp-${process.pid}`);
  let mode = 0o644;
  let owner: { uid: number; gid: number } | undefined;
  try { const st = await stat(localPath); mode = st.mode & 0o7777; owner = { uid: st.uid, gid: st.gid }; } catch { /* new file */ }
  try {
    const fh = await open(tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, mode);
    try { await fh.writeFile(text); await fh.sync(); } finally { await fh.close(); }
    await chmod(tmp, mode);
    if (owner) await chown(tmp, owner.uid, owner.gid).catch(() => undefined);
    await rename(tmp, localPath);
  } catch (e) {
    await rm(tmp, { force: true }).catch(() => undefined);
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EROFS') throw new TuneError(`${localPath}: read-only filesystem`, 'read-only');
    if (code === 'EPERM' || code === 'EACCES') throw new TuneError(`${localPath}: not permitted (${code}; immutable file?)`, 'write');
    throw e;
  }
}

async function backup(fs: HostFs, changes: FileChange[], backupHostDir: string, now: Date): Promise<string> {
  const stampDir = `${backupHostDir}/${now.toISOString().replace(/[:.]/g, '-')}-${process.pid}`;
  const local = fs.toLocal(stampDir);
  await mkdir(local, { recursive: true });
  const manifest: Array<{ path: string; realPath: string; existed: boolean; backup?: string }> = [];
  for (const c of changes) {
    const existed = c.before !== null;
    const entry: (typeof manifest)[number] = { path: c.path, realPath: c.realPath, existed };
    if (existed) {
      const dest = path.join(local, c.realPath);
      await mkdir(path.dirname(dest), { recursive: true });
      await copyFile(fs.toLocal(c.realPath), dest);
      entry.backup = `${stampDir}${c.realPath}`;
    }
    manifest.push(entry);
  }
  await writeFile(path.join(local, 'manifest.json'), JSON.stringify({ createdAt: now.toISOString(), files: manifest }, null, 2) + '\n');
  return stampDir;
}

async function rollback(fs: HostFs, changes: FileChange[]): Promise<void> {
  for (const c of [...changes].reverse()) {
    const local = fs.toLocal(c.realPath);
    if (c.before === null) await rm(local, { force: true });
    else await atomicWrite(local, c.before);
  }
}

// ---------------------------------------------------------------- validation

async function validateAfter(plan: TunePlan, layout: NodeLayout, changes: FileChange[], opts: ApplyOptions): Promise<void> {
  const fs = new HostFs(layout.fs.hostRoot);
  const exec = opts.exec ?? defaultExec;
  const rt = plan.settings.find((s) => s.id === 'runtime.pullProgressTimeout');
  const want = typeof rt?.recommendation.value === 'number' ? rt.recommendation.value : null;
  if (changes.some((c) => c.component === 'containerd') && layout.containerd && want !== null) {
    const view = await loadContainerdConfig(fs, layout.containerd.mainPath, plan.runtime.family as ContainerdFamily);
    if (view.errors.length) throw new TuneError(`after writing, the containerd config does not load: ${view.errors.join('; ')}`, 'validate');
    if (view.timeout.ms !== want) throw new TuneError(`after writing, the effective ${TIMEOUT_KEY} is ${view.timeout.raw ?? 'the default'} (from ${view.timeout.source.kind === 'file' ? view.timeout.source.path : 'defaults'}), not ${formatDuration(want)}`, 'validate');
    if (opts.runtimeValidate !== false) {
      const dump = await containerdConfigDump(fs, exec, plan.runtime.binary ?? '/usr/bin/containerd', layout.containerd.mainPath);
      let got: string | undefined;
      try { got = timeoutFromDump(dump); } catch (e) { throw new TuneError(`containerd config dump output does not parse: ${(e as Error).message}`, 'validate'); }
      if (got === undefined || parseDuration(got) !== want) throw new TuneError(`containerd config dump shows ${TIMEOUT_KEY} = ${got ?? '(missing)'}, expected ${formatDuration(want)}`, 'validate');
    }
  }
  if (changes.some((c) => c.component === 'cri-o') && layout.crio && want !== null) {
    const view = await loadCrioConfig(fs, layout.crio.files[0]?.path, layout.crio.dropInDir);
    if (view.errors.length) throw new TuneError(`after writing, the CRI-O config does not load: ${view.errors.join('; ')}`, 'validate');
    if (view.timeout.ms !== want) throw new TuneError(`after writing, the effective ${CRIO_KEY} is ${view.timeout.raw ?? 'the default'}, not ${formatDuration(want)} (a later drop-in overrides it?)`, 'validate');
  }
  if (changes.some((c) => c.component === 'kubelet')) {
    const flags = layout.kubeletService?.flags ?? new Map();
    const view = await loadKubeletConfig(fs, flags, layout.kubeletView.configPath);
    if (view.errors.length) throw new TuneError(`after writing, the kubelet config does not load: ${view.errors.join('; ')}`, 'validate');
    for (const s of plan.settings) {
      if (s.component !== 'kubelet' || !s.recommendation.apply) continue;
      const v = view.values[s.key as keyof typeof view.values];
      if (v && v.value !== s.recommendation.value) throw new TuneError(`after writing, kubelet ${s.key} is ${String(v.value)}, not ${String(s.recommendation.value)}`, 'validate');
    }
  }
}

/** `containerd --config FILE config dump`, run in the host root (chroot) unless the host root is /. */
export async function containerdConfigDump(fs: HostFs, exec: ExecFn, binaryHostPath: string, configHostPath: string): Promise<string> {
  const direct = path.resolve(fs.hostRoot) === '/';
  const r = direct
    ? await exec(binaryHostPath, ['--config', configHostPath, 'config', 'dump'], { timeoutMs: 20_000 })
    : await exec('chroot', [fs.hostRoot, binaryHostPath, '--config', configHostPath, 'config', 'dump'], { timeoutMs: 20_000 });
  if (r.code !== 0) throw new TuneError(`containerd config dump failed: ${(r.stderr.trim() || r.error || `exit ${r.code}`).split('\n').slice(-1)[0]}`, 'validate');
  return r.stdout;
}

// ---------------------------------------------------------------- restart

export function defaultRestart(exec: ExecFn): (c: Component) => Promise<void> {
  return async (c) => {
    const r = await exec('nsenter', ['-t', '1', '-m', '-u', '-i', '-n', '-p', '--', 'systemctl', 'restart', UNIT[c]], { timeoutMs: 120_000 });
    if (r.code !== 0) throw new TuneError(`systemctl restart ${UNIT[c]} failed: ${r.stderr.trim() || r.error || `exit ${r.code}`}`, 'restart');
  };
}

export function defaultHealthy(exec: ExecFn, layout: NodeLayout): (c: Component) => Promise<boolean> {
  return async (c) => {
    if (c === 'kubelet') {
      try { const res = await fetch('http://127.0.0.1:10248/healthz', { signal: AbortSignal.timeout(3000) }); return res.ok; } catch { return false; }
    }
    const cmd = c === 'containerd'
      ? ['ctr', '--address', layout.containerd?.grpcAddress ?? '/run/containerd/containerd.sock', 'version']
      : ['crictl', '--runtime-endpoint', 'unix:///var/run/crio/crio.sock', 'version'];
    const r = await exec('nsenter', ['-t', '1', '-m', '-u', '-i', '-n', '-p', '--', ...cmd], { timeoutMs: 10_000 });
    return r.code === 0;
  };
}

async function waitHealthy(check: (c: Component) => Promise<boolean>, c: Component, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check(c).catch(() => false)) return true;
    await new Promise((r) => setTimeout(r, 500));
  }
  return false;
}

// ---------------------------------------------------------------- apply

export async function applyPlan(opts: ApplyOptions): Promise<ApplyResult> {
  const { plan, layout } = opts;
  const now = opts.now ?? new Date();
  const log = opts.log ?? (() => undefined);
  const exec = opts.exec ?? defaultExec;
  const fs = layout.fs;
  if (layout.errors.length > 0) {
    throw new TuneError(`refusing to apply while the node's config has problems (fix them first): ${layout.errors.join('; ')}`, 'malformed');
  }
  const changes = planChanges(plan, layout, opts.only ?? 'all', now).filter((c) => c.before !== c.after);
  const diff = unifiedDiff(changes);
  const result: ApplyResult = { changes, diff, written: false, restarted: [], rolledBack: false, messages: [] };
  if (changes.length === 0) { result.messages.push('nothing to change: the files already carry the recommended values'); return result; }
  if (opts.dryRun) { result.messages.push(`dry run: ${changes.length} file(s) would change`); return result; }

  const components = [...new Set(changes.map((c) => c.component))].sort((a, b) => (a === 'kubelet' ? 1 : 0) - (b === 'kubelet' ? 1 : 0));
  const inFlight = async (): Promise<number> => {
    if (!opts.inFlight) throw new TuneError('no way to ask the agent about in-flight pulls; refusing to restart (use --force)', 'agent-unreachable');
    return opts.inFlight();
  };
  if (opts.restart && !opts.force) {
    const n = await inFlight();
    if (n > 0) throw new TuneError(`${n} pull(s) in flight: refusing to restart ${components.map((c) => UNIT[c]).join(', ')} now (nothing was changed); try again when pulls are done`, 'pulls-in-flight');
  }

  const release = await acquireLock(fs.toLocal(opts.lockPath ?? DEFAULT_LOCK), now);
  try {
    for (const dir of new Set(changes.map((c) => path.posix.dirname(c.realPath)))) await probeWritable(fs.toLocal(dir));
    for (const c of changes) {
      if (c.before === null) continue;
      const st = await lstat(fs.toLocal(c.realPath)).catch(() => null);
      if (!st?.isFile()) throw new TuneError(`${c.realPath} is not a regular file; refusing`, 'unsupported');
    }
    result.backupDir = await backup(fs, changes, opts.backupDir ?? DEFAULT_BACKUP_DIR, now);
    log(`backup: ${result.backupDir}`);
    const written: FileChange[] = [];
    try {
      for (const c of changes) {
        const current = await readFile(fs.toLocal(c.realPath), 'utf8').catch((e: NodeJS.ErrnoException) => { if (e.code === 'ENOENT') return null; throw e; });
        if (current !== c.before) throw new TuneError(`${c.path} changed while planning; nothing was written`, 'concurrent');
        await atomicWrite(fs.toLocal(c.realPath), c.after);
        written.push(c);
        log(`wrote ${c.realPath}: ${c.what}`);
      }
      await validateAfter(plan, layout, changes, opts);
    } catch (e) {
      await rollback(fs, written);
      result.rolledBack = written.length > 0;
      throw e instanceof TuneError ? new TuneError(`${e.message}${written.length ? ' — files restored from backup' : ''}`, e.code) : e;
    }
    result.written = true;

    if (opts.restart) {
      const restartFn = opts.restartComponent ?? defaultRestart(exec);
      const healthy = opts.healthy ?? defaultHealthy(exec, layout);
      const timeout = opts.healthTimeoutMs ?? 60_000;
      if (!opts.force) {
        const n = await inFlight();
        if (n > 0) { result.messages.push(`${n} pull(s) started meanwhile: files are written but ${components.join(', ')} not restarted; run \`pullwatch tune apply --restart\` again later`); return result; }
      }
      for (const c of components) {
        let ok = false;
        let why = '';
        try { await restartFn(c); ok = await waitHealthy(healthy, c, timeout); if (!ok) why = `not healthy within ${formatDuration(timeout)}`; } catch (e) { why = (e as Error).message; }
        if (ok) { result.restarted.push(c); log(`restarted ${UNIT[c]}: healthy`); continue; }
        log(`restart of ${UNIT[c]} failed (${why}); rolling back`);
        await rollback(fs, changes);
        result.rolledBack = true;
        const again: string[] = [];
        for (const r of [...result.restarted, c]) {
          try { await restartFn(r); again.push(`${UNIT[r]} ${await waitHealthy(healthy, r, timeout) ? 'healthy' : 'NOT healthy'}`); } catch (e) { again.push(`${UNIT[r]} restart failed: ${(e as Error).message}`); }
        }
        throw new TuneError(`${UNIT[c]} did not come back healthy after the change (${why}); files restored from ${result.backupDir} and restarted again (${again.join(', ')})`, 'rolled-back');
      }
    }
    return result;
  } finally {
    await release();
  }
}

