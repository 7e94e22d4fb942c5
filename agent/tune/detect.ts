/**
 * Detection (I/O): which runtime and versions run on this node, and every file that decides the
 * pull-related settings, all read under --host-root.
 */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { HostFs } from './hostfs.js';
import { UNIT_DIRS, parseUnitSection, effectiveService, parseEnvFile, parseFlags, type Directive, type Flag, type ServiceView, type Origin } from './systemd.js';
import {
  parseContainerdVersion, containerdFamily, parseCrioVersion, crioFamily, parseKubeletVersion, parseCriDockerdVersion, type SemVer,
} from './versions.js';
import { loadContainerdConfig, CONTAINERD_DEFAULT_CONFIG, type ContainerdView } from './containerd.js';
import { loadCrioConfig, CRIO_CONFIG, CRIO_DROPIN_DIR, type CrioView } from './crio.js';
import { loadKubeletConfig, KUBELET_VALUE_FLAGS, type KubeletView } from './kubelet.js';
import type { KubeletDetection, RuntimeDetection } from './types.js';

export interface ExecResult { code: number | null; stdout: string; stderr: string; error?: string }
export type ExecFn = (file: string, args: string[], opts?: { timeoutMs?: number }) => Promise<ExecResult>;

export const defaultExec: ExecFn = (file, args, opts) => new Promise((resolve) => {
  execFile(file, args, { timeout: opts?.timeoutMs ?? 10_000, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
    const e = err as (NodeJS.ErrnoException & { code?: unknown }) | null;
    resolve({
      code: e ? (typeof e.code === 'number' ? e.code : -1) : 0,
      stdout: String(stdout), stderr: String(stderr),
      ...(e ? { error: e.message.split('\n')[0] as string } : {}),
    });
  });
});

export interface DetectOptions {
  hostRoot: string;
  exec?: ExecFn;
  /** Host paths of binaries when not at the usual places. */
  containerdBinary?: string;
}

export interface ServiceInfo { name: string; unitFiles: string[]; view: ServiceView; flags: Map<string, Flag> }

export interface NodeLayout {
  fs: HostFs;
  runtime: RuntimeDetection;
  runtimeSemver: SemVer | null;
  kubelet: KubeletDetection;
  kubeletSemver: SemVer | null;
  kubeletView: KubeletView;
  kubeletService?: ServiceInfo;
  containerd?: ContainerdView;
  containerdService?: ServiceInfo;
  crio?: CrioView;
  criDockerdService?: ServiceInfo;
  errors: string[];
}

/** Reads a systemd service with its drop-ins and environment files; undefined when no unit file exists. */
export async function readService(fs: HostFs, name: string, valueFlags: Set<string>): Promise<ServiceInfo | undefined> {
  let unit: string | undefined;
  for (const d of UNIT_DIRS) {
    const p = `${d}/${name}.service`;
    if (await fs.exists(p)) { unit = p; break; }
  }
  const dropins = new Map<string, string>();
  for (const d of [...UNIT_DIRS].reverse()) {
    for (const n of await fs.list(`${d}/${name}.service.d`)) if (n.endsWith('.conf')) dropins.set(n, `${d}/${name}.service.d/${n}`);
  }
  if (!unit && dropins.size === 0) return undefined;
  const files = [...(unit ? [unit] : []), ...[...dropins.keys()].sort().map((n) => dropins.get(n) as string)];
  const directives: Directive[] = [];
  const unitFiles: string[] = [];
  for (const f of files) {
    const r = await fs.read(f, `${name} unit`);
    if (!r.ok) continue;
    unitFiles.push(f);
    directives.push(...parseUnitSection(r.text, f));
  }
  const envFiles = new Map<string, Array<{ name: string; value: string; origin: Origin }>>();
  for (const d of directives) {
    if (d.key !== 'EnvironmentFile' || !d.value) continue;
    const p = d.value.replace(/^-/, '');
    const r = await fs.read(p, `${name} environment file`);
    if (r.ok) envFiles.set(p, parseEnvFile(r.text, p));
  }
  const view = effectiveService(directives, envFiles);
  return { name, unitFiles, view, flags: parseFlags(view.exec, valueFlags) };
}

async function binaryVersion(fs: HostFs, exec: ExecFn, candidates: string[], args: string[]): Promise<{ binary?: string; output?: string; error?: string }> {
  let lastError: string | undefined;
  for (const c of candidates) {
    if (!(await fs.exists(c))) continue;
    const local = fs.toLocal(await fs.realHostPath(c));
    let r = await exec(local, args);
    if ((r.code !== 0 || !r.stdout.trim()) && path.resolve(fs.hostRoot) !== '/') {
      // A host binary linked against host libraries: run it in the host root instead.
      const viaChroot = await exec('chroot', [fs.hostRoot, c, ...args]);
      if (viaChroot.code === 0) r = viaChroot;
    }
    if (r.code === 0 && (r.stdout.trim() || r.stderr.trim())) return { binary: c, output: (r.stdout.trim() || r.stderr.trim()) };
    lastError = `${c} ${args.join(' ')} failed: ${r.error ?? r.stderr.trim().split('\n')[0] ?? `exit ${r.code}`}`;
  }
  return lastError ? { error: lastError } : { error: `none of ${candidates.join(', ')} exists` };
}

const binPaths = (name: string): string[] => ['/usr/bin', '/usr/local/bin', '/bin', '/usr/sbin', '/opt/bin'].map((d) => `${d}/${name}`);

export async function detectNode(opts: DetectOptions): Promise<NodeLayout> {
  const fs = new HostFs(opts.hostRoot);
  const exec = opts.exec ?? defaultExec;
  const errors: string[] = [];

  // kubelet first: its runtime endpoint names the runtime in use.
  const kubeletService = await readService(fs, 'kubelet', KUBELET_VALUE_FLAGS);
  const flags = kubeletService?.flags ?? new Map<string, Flag>();
  let fallbackConfig: string | undefined;
  if (!flags.get('config')?.value) {
    for (const p of ['/var/lib/kubelet/config.yaml', '/etc/kubernetes/kubelet/config.json', '/etc/kubernetes/kubelet/kubelet-config.json']) {
      if (await fs.exists(p)) { fallbackConfig = p; break; }
    }
  }
  const kubeletView = await loadKubeletConfig(fs, flags, fallbackConfig);
  errors.push(...kubeletView.errors);
  const kubeletBin = kubeletService?.view.exec[0]?.text;
  const kv = await binaryVersion(fs, exec, kubeletBin ? [kubeletBin, ...binPaths('kubelet')] : binPaths('kubelet'), ['--version']);
  const kubeletSemver = kv.output ? parseKubeletVersion(kv.output) : null;
  const kubelet: KubeletDetection = {
    version: kubeletSemver?.text ?? null,
    ...(kubeletSemver ? {} : { versionError: kv.error ?? `unrecognised kubelet --version output: ${kv.output ?? ''}` }),
    ...(kv.binary ? { binary: kv.binary } : {}),
    unitFiles: kubeletService?.unitFiles ?? [],
    ...(kubeletView.configPath ? { configFile: kubeletView.configPath } : {}),
    ...(kubeletView.configDir ? { configDir: kubeletView.configDir } : {}),
    ...(kubeletView.runtimeEndpoint ? { runtimeEndpoint: kubeletView.runtimeEndpoint } : {}),
  };

  const ep = kubeletView.runtimeEndpoint ?? '';
  let name: RuntimeDetection['name'] = 'unknown';
  let detectedBy = '';
  if (/crio/.test(ep)) { name = 'cri-o'; detectedBy = `kubelet runtime endpoint ${ep}`; }
  else if (/dockershim|cri-dockerd/.test(ep)) { name = 'docker'; detectedBy = `kubelet runtime endpoint ${ep}`; }
  else if (/containerd/.test(ep)) { name = 'containerd'; detectedBy = `kubelet runtime endpoint ${ep}`; }
  else {
    const containerdCandidates = opts.containerdBinary ? [opts.containerdBinary] : binPaths('containerd');
    for (const [n, cands] of [['containerd', containerdCandidates], ['cri-o', binPaths('crio')], ['docker', binPaths('cri-dockerd')]] as const) {
      let found = false;
      for (const c of cands) if (await fs.exists(c)) { found = true; break; }
      if (found) { name = n; detectedBy = `${n === 'docker' ? 'cri-dockerd' : n === 'cri-o' ? 'crio' : 'containerd'} binary present`; break; }
    }
    if (name === 'unknown') detectedBy = 'no kubelet runtime endpoint and no containerd, crio or cri-dockerd binary found';
  }

  const layout: Omit<NodeLayout, 'runtime' | 'runtimeSemver'> = { fs, kubelet, kubeletSemver, kubeletView, errors, ...(kubeletService ? { kubeletService } : {}) };
  let runtime: RuntimeDetection = { name, version: null, family: 'unknown', detectedBy };
  let runtimeSemver: SemVer | null = null;

  if (name === 'containerd') {
    const svc = await readService(fs, 'containerd', new Set(['config', 'c', 'address', 'a', 'log-level', 'l', 'root', 'state']));
    if (svc) layout.containerdService = svc;
    const candidates = [...(opts.containerdBinary ? [opts.containerdBinary] : []), ...(svc?.view.exec[0]?.text ? [svc.view.exec[0].text] : []), ...binPaths('containerd')];
    const v = await binaryVersion(fs, exec, [...new Set(candidates)], ['--version']);
    runtimeSemver = v.output ? parseContainerdVersion(v.output) : null;
    const family = containerdFamily(runtimeSemver);
    runtime = {
      name, version: runtimeSemver?.text ?? null, family, detectedBy,
      ...(v.binary ? { binary: v.binary } : {}),
      ...(v.output ? { versionOutput: v.output.split('\n')[0] as string } : {}),
      ...(!runtimeSemver ? { versionError: v.error ?? `unrecognised containerd --version output: ${v.output ?? ''}` } : family === 'unknown' ? { versionError: `containerd ${runtimeSemver.text} is newer than the versions whose deadline semantics pullwatch knows (≤ 2.x)` } : {}),
    };
    const configPath = svc?.flags.get('config')?.value ?? svc?.flags.get('c')?.value ?? CONTAINERD_DEFAULT_CONFIG;
    layout.containerd = await loadContainerdConfig(fs, configPath, family);
    errors.push(...layout.containerd.errors);
  } else if (name === 'cri-o') {
    const svc = await readService(fs, 'crio', new Set(['config', 'config-dir']));
    const v = await binaryVersion(fs, exec, binPaths('crio'), ['--version']);
    runtimeSemver = v.output ? parseCrioVersion(v.output) : null;
    runtime = {
      name, version: runtimeSemver?.text ?? null, family: crioFamily(runtimeSemver), detectedBy,
      ...(v.binary ? { binary: v.binary } : {}),
      ...(v.output ? { versionOutput: v.output.split('\n')[0] as string } : {}),
      ...(!runtimeSemver ? { versionError: v.error ?? `unrecognised crio --version output` } : crioFamily(runtimeSemver) === 'unknown' ? { versionError: `CRI-O ${runtimeSemver.text} is not a version pullwatch knows` } : {}),
    };
    layout.crio = await loadCrioConfig(fs, svc?.flags.get('config')?.value ?? CRIO_CONFIG, svc?.flags.get('config-dir')?.value ?? CRIO_DROPIN_DIR);
    errors.push(...layout.crio.errors);
  } else if (name === 'docker') {
    const svc = await readService(fs, 'cri-docker', new Set(['image-pull-progress-deadline', 'container-runtime-endpoint', 'network-plugin', 'pod-infra-container-image']));
    if (svc) layout.criDockerdService = svc;
    const v = await binaryVersion(fs, exec, binPaths('cri-dockerd'), ['--version']);
    runtimeSemver = v.output ? parseCriDockerdVersion(v.output) : null;
    runtime = {
      name, version: runtimeSemver?.text ?? null, family: 'cri-dockerd', detectedBy,
      ...(v.binary ? { binary: v.binary } : {}),
      ...(!runtimeSemver ? { versionError: v.error ?? 'unrecognised cri-dockerd --version output' } : {}),
    };
  }
  return { ...layout, runtime, runtimeSemver };
}
