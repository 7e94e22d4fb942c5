/**
 * The tune plan: per setting, where it is set, its effective value, the risk on this version and
 * the recommendation. buildPlan is pure over a detected NodeLayout; computeTunePlan does the I/O
 * (detection) and is what the agent's /v1/tune and the bundle call.
 */
import { formatDuration, parseDuration } from '../../common/duration.js';
import { detectNode, type ExecFn, type NodeLayout } from './detect.js';
import { containerdDefaultMs, cmpSemver } from './versions.js';
import { recommendDeadline } from './recommend.js';
import { TIMEOUT_KEY, tableDisplay, timeoutTable, isMajor2 } from './containerd.js';
import { KUBELET_DEFAULTS, type KubeletKey } from './kubelet.js';
import type {
  ContainerdFamily, DeadlineRecommendation, HistoryInfo, HistoryPull, TunePlan, TuneSetting, SettingSource,
} from './types.js';

export interface ComputeTunePlanOptions {
  hostRoot: string;
  /** Pull history of this node; null = none (see historyInfo for why). */
  history: HistoryPull[] | null;
  historyInfo?: HistoryInfo;
  deadlineOverrideMs?: number;
  now: Date;
  exec?: ExecFn;
  containerdBinary?: string;
}

export async function computeTunePlan(opts: ComputeTunePlanOptions): Promise<TunePlan> {
  const layout = await detectNode({
    hostRoot: opts.hostRoot,
    ...(opts.exec ? { exec: opts.exec } : {}),
    ...(opts.containerdBinary ? { containerdBinary: opts.containerdBinary } : {}),
  });
  return buildPlan(layout, opts);
}

/** Parsed plan plus the layout it came from (apply needs both). */
export async function computePlanWithLayout(opts: ComputeTunePlanOptions): Promise<{ plan: TunePlan; layout: NodeLayout }> {
  const layout = await detectNode({
    hostRoot: opts.hostRoot,
    ...(opts.exec ? { exec: opts.exec } : {}),
    ...(opts.containerdBinary ? { containerdBinary: opts.containerdBinary } : {}),
  });
  return { plan: buildPlan(layout, opts), layout };
}

const dur = (ms: number | null | undefined): string => (ms === null || ms === undefined ? '—' : formatDuration(ms));

export function buildPlan(layout: NodeLayout, opts: Pick<ComputeTunePlanOptions, 'history' | 'historyInfo' | 'deadlineOverrideMs' | 'now' | 'hostRoot'>): TunePlan {
  const warnings: string[] = [];
  const errors = [...layout.errors];
  if (layout.runtime.versionError && layout.runtime.name !== 'unknown') errors.push(`${layout.runtime.name}: ${layout.runtime.versionError}`);
  const history: HistoryInfo = opts.historyInfo ?? (opts.history
    ? { source: 'agent', note: `${opts.history.length} pulls from the agent`, pulls: opts.history.length }
    : { source: 'none', note: 'no history', pulls: 0 });
  const deadline = recommendDeadline({
    history: opts.history,
    historyNote: history.note,
    runtime: layout.runtime.name,
    family: layout.runtime.family,
    ...(opts.deadlineOverrideMs !== undefined ? { overrideMs: opts.deadlineOverrideMs } : {}),
  });
  const settings: TuneSetting[] = [runtimeSetting(layout, deadline, warnings)];
  settings.push(legacyFlagSetting(layout, deadline));
  settings.push(...kubeletSettings(layout));
  if (layout.kubelet.versionError) warnings.push(`kubelet version unknown: ${layout.kubelet.versionError}`);
  if (layout.containerd) warnings.push(...layout.containerd.warnings);
  warnings.push(...persistenceWarnings(layout));
  return {
    schemaVersion: 1,
    generatedAt: opts.now.toISOString(),
    hostRoot: opts.hostRoot,
    runtime: layout.runtime,
    kubelet: layout.kubelet,
    history,
    deadline,
    settings,
    files: layout.fs.files,
    filesRead: layout.fs.files.filter((f) => f.status === 'read').length,
    errors,
    warnings,
  };
}

function runtimeSetting(layout: NodeLayout, rec: DeadlineRecommendation, warnings: string[]): TuneSetting {
  const r = layout.runtime;
  const recDisplay = formatDuration(rec.valueMs);
  if (r.name === 'containerd') {
    const fam = r.family as ContainerdFamily;
    const view = layout.containerd;
    const fileVersion = view?.files[0]?.version ?? (isMajor2(fam) ? 3 : 2);
    const key = `${tableDisplay(timeoutTable(isMajor2(fam) && fileVersion < 3 ? 2 : fileVersion))}.${TIMEOUT_KEY}`;
    if (fam === 'no-deadline') {
      return {
        id: 'runtime.pullProgressTimeout', component: 'containerd', key, supported: false,
        source: { kind: 'absent' },
        effective: { raw: null, value: null, display: 'none (no such setting)' },
        risk: { level: 'danger', text: `containerd ${r.version ?? ''} has no pull progress deadline: a stalled pull hangs until TCP gives up (often hours) and, with serializeImagePulls, blocks every other pull` },
        recommendation: { value: null, display: 'upgrade containerd to ≥ 1.7.10', apply: false, manual: true, reason: 'no configuration can add a deadline on containerd 1.6; upgrade to 1.7.10+ (default 5m) and rely on pullwatch stall alerts until then' },
      };
    }
    if (fam === 'unknown') {
      return {
        id: 'runtime.pullProgressTimeout', component: 'containerd', key, supported: false,
        source: view?.timeout.source ?? { kind: 'default' },
        effective: { raw: view?.timeout.raw ?? null, value: view?.timeout.ms ?? null, display: view?.timeout.raw ?? 'unknown' },
        risk: { level: 'unknown', text: `containerd version ${r.version ?? 'unknown'}: ${r.versionError ?? 'semantics not known'}` },
        recommendation: { value: rec.valueMs, display: recDisplay, apply: false, manual: true, reason: 'pullwatch does not write a deadline whose meaning it cannot verify for this version; set it by hand if you know the semantics' },
      };
    }
    const def = containerdDefaultMs(fam) as number;
    const setMs = view?.timeout.ms ?? null;
    const broken = view?.timeout.error;
    const effMs = broken ? null : setMs ?? def;
    const source: SettingSource = view?.timeout.source ?? { kind: 'default' };
    const display = broken ? `invalid (${view?.timeout.raw ?? '?'})` : source.kind === 'default' ? `${dur(def)} (default)` : dur(effMs);
    const risk = containerdRisk(fam, effMs, rec, r.version);
    if (view && !view.mainExists) warnings.push(`${view.mainPath} does not exist: containerd runs on built-in defaults`);
    const apply = !broken && effMs !== rec.valueMs;
    return {
      id: 'runtime.pullProgressTimeout', component: 'containerd', key, supported: true, source,
      effective: { raw: view?.timeout.raw ?? null, value: effMs, display },
      risk,
      recommendation: {
        value: rec.valueMs, display: recDisplay, apply, manual: !!broken,
        reason: broken ? `fix the invalid value first: ${broken}` : apply ? rec.reason : `already ${recDisplay}; ${rec.reason}`,
      },
    };
  }
  if (r.name === 'cri-o') {
    const view = layout.crio;
    const fam = r.family;
    const key = '[crio.image] pull_progress_timeout';
    if (fam === 'crio-no-timeout' || fam === 'unknown') {
      return {
        id: 'runtime.pullProgressTimeout', component: 'cri-o', key, supported: false,
        source: view?.timeout.source ?? { kind: 'absent' },
        effective: { raw: view?.timeout.raw ?? null, value: null, display: fam === 'unknown' ? 'unknown' : 'none (no such setting)' },
        risk: fam === 'unknown'
          ? { level: 'unknown', text: `CRI-O version ${r.version ?? 'unknown'}: ${r.versionError ?? ''}` }
          : { level: 'danger', text: `CRI-O ${r.version} has no pull_progress_timeout (added in 1.32.0, 1.31.3, 1.30.11): a stalled pull hangs` },
        recommendation: { value: rec.valueMs, display: fam === 'unknown' ? recDisplay : 'upgrade CRI-O', apply: false, manual: true, reason: fam === 'unknown' ? 'version unknown; not writing' : 'upgrade CRI-O to a release with pull_progress_timeout' },
      };
    }
    const def = fam === 'crio-default-0s' ? 0 : 10_000;
    const effMs = view?.timeout.error ? null : view?.timeout.ms ?? def;
    const source = view?.timeout.source ?? { kind: 'default' };
    const risks: string[] = [];
    let level: TuneSetting['risk']['level'] = 'ok';
    if (effMs === 0) { level = 'danger'; risks.push('0s disables the deadline: a stalled pull hangs'); }
    else if (effMs !== null && effMs < rec.valueMs) { level = 'warn'; risks.push(`${dur(effMs)} is shorter than the recommended ${dur(rec.valueMs)}: healthy slow pulls may be cancelled`); }
    risks.push('the timer starts only at the first progress event: a pull that never receives a byte is not covered');
    const apply = !view?.timeout.error && effMs !== rec.valueMs;
    return {
      id: 'runtime.pullProgressTimeout', component: 'cri-o', key, supported: true, source,
      effective: { raw: view?.timeout.raw ?? null, value: effMs, display: source.kind === 'default' ? `${dur(def)} (default)` : dur(effMs) },
      risk: { level, text: risks.join('; ') },
      recommendation: { value: rec.valueMs, display: recDisplay, apply, manual: !!view?.timeout.error, reason: apply ? rec.reason : `already ${recDisplay}` },
    };
  }
  if (r.name === 'docker') {
    const flag = layout.criDockerdService?.flags.get('image-pull-progress-deadline');
    let ms: number | null = 60_000;
    let bad: string | undefined;
    if (flag?.value) { try { ms = parseDuration(flag.value); } catch (e) { bad = (e as Error).message; ms = null; } }
    return {
      id: 'runtime.pullProgressTimeout', component: 'cri-dockerd', key: '--image-pull-progress-deadline', supported: true,
      source: flag ? { kind: 'flag', path: flag.origin.path, line: flag.origin.line, flag: '--image-pull-progress-deadline' } : { kind: 'default' },
      effective: { raw: flag?.value ?? null, value: ms, display: flag ? (bad ? `invalid (${flag.value})` : dur(ms)) : '1m0s (default)' },
      risk: ms !== null && ms < rec.valueMs ? { level: 'warn', text: `${dur(ms)} cancels slow but healthy pulls (cri-dockerd keeps dockershim's 1m default)` } : { level: 'ok', text: 'cri-dockerd cancels pulls without progress after this deadline' },
      recommendation: { value: rec.valueMs, display: recDisplay, apply: false, manual: ms !== rec.valueMs, reason: `set --image-pull-progress-deadline=${recDisplay} in the cri-docker unit (pullwatch does not edit cri-dockerd units); ${rec.reason}` },
    };
  }
  return {
    id: 'runtime.pullProgressTimeout', component: 'containerd', key: 'image_pull_progress_timeout', supported: false,
    source: { kind: 'absent' }, effective: { raw: null, value: null, display: 'unknown' },
    risk: { level: 'unknown', text: `no container runtime found (${r.detectedBy})` },
    recommendation: { value: null, display: '—', apply: false, manual: false, reason: 'nothing to tune' },
  };
}

function containerdRisk(fam: ContainerdFamily, effMs: number | null, rec: DeadlineRecommendation, version: string | null): TuneSetting['risk'] {
  const parts: string[] = [];
  let level: TuneSetting['risk']['level'] = 'ok';
  if (effMs === null) return { level: 'danger', text: 'the configured value is invalid: containerd will refuse to start with this config' };
  if (effMs === 0) {
    level = 'danger';
    parts.push(fam === '2.1+'
      ? `0s on containerd ${version} makes PullImage hang forever on the transfer-service path (containerd#14158)`
      : '0 disables the deadline: a stalled pull hangs until TCP gives up');
  } else {
    if (fam === '1.7.0-1.7.9' && effMs === 60_000) { level = 'warn'; parts.push('containerd 1.7.0–1.7.9 default of 1m cancels pulls from slow registries'); }
    else if (effMs < rec.valueMs && rec.basis !== 'default') { level = 'warn'; parts.push(`${dur(effMs)} is below what this node's pulls need (${dur(rec.valueMs)}): healthy slow pulls get cancelled`); }
    else if (effMs < rec.valueMs) { level = 'warn'; parts.push(`${dur(effMs)} is short; slow registries may be cancelled`); }
    else if (effMs > 3 * rec.valueMs && rec.basis === 'evidence') { level = 'info'; parts.push(`${dur(effMs)} lets a dead pull hang ${dur(effMs - rec.valueMs)} longer than needed`); }
    parts.push('fires only on zero progress: a trickling pull is never cancelled (containerd#11650)');
  }
  return { level, text: parts.join('; ') };
}

function legacyFlagSetting(layout: NodeLayout, rec: DeadlineRecommendation): TuneSetting {
  const flag = layout.kubeletService?.flags.get('image-pull-progress-deadline');
  const kv = layout.kubeletSemver;
  const dead = !kv || cmpSemver(kv, [1, 24, 0]) >= 0;
  const base = { id: 'kubelet.imagePullProgressDeadline' as const, component: 'kubelet' as const, key: '--image-pull-progress-deadline', supported: !dead };
  if (!flag) {
    return {
      ...base, source: { kind: 'absent' }, effective: { raw: null, value: null, display: 'not set' },
      risk: { level: 'ok', text: dead ? 'not set (correct: the flag has no effect since Kubernetes 1.24)' : 'dockershim default 1m applies' },
      recommendation: { value: null, display: '—', apply: false, manual: false, reason: dead ? 'the runtime deadline above is what governs pulls' : `set --image-pull-progress-deadline=${formatDuration(rec.valueMs)}` },
    };
  }
  let ms: number | null;
  try { ms = flag.value ? parseDuration(flag.value) : null; } catch { ms = null; }
  return {
    ...base,
    source: { kind: 'flag', path: flag.origin.path, line: flag.origin.line, flag: '--image-pull-progress-deadline' },
    effective: { raw: flag.value, value: ms, display: dead ? `${flag.value ?? ''} (ignored)` : dur(ms) },
    risk: dead
      ? { level: 'warn', text: `kubelet ${layout.kubelet.version ?? '(version unknown)'} has no --image-pull-progress-deadline (removed with dockershim in 1.24; node images such as AKS AgentBaker strip it): it protects nothing, hides the real deadline, and a kubelet that rejects unknown flags will not start with it` }
      : { level: 'info', text: 'dockershim honours this flag' },
    recommendation: dead
      ? { value: null, display: 'remove the flag', apply: false, manual: true, reason: `remove it from ${flag.origin.path}:${flag.origin.line}; the runtime's deadline governs pulls` }
      : { value: rec.valueMs, display: formatDuration(rec.valueMs), apply: false, manual: true, reason: rec.reason },
  };
}

function kubeletSettings(layout: NodeLayout): TuneSetting[] {
  const v = layout.kubeletView.values;
  const kver = layout.kubeletSemver;
  const canParallelCap = !!kver && cmpSemver(kver, [1, 27, 0]) >= 0;
  const runtimeHasDeadline = !(layout.runtime.name === 'containerd' && layout.runtime.family === 'no-deadline');
  const serialize = v.serializeImagePulls;
  const maxPar = v.maxParallelImagePulls;
  const out: TuneSetting[] = [];
  const display = (key: KubeletKey): string => {
    const x = v[key];
    if (x.error) return `invalid (${x.raw ?? '?'})`;
    const val = x.value === null ? (key === 'maxParallelImagePulls' ? 'unlimited' : '—') : String(x.value);
    return x.source.kind === 'default' ? `${val} (default)` : val;
  };
  const noKubelet = !layout.kubeletService && !layout.kubeletView.configFile;
  const applyKubelet = !noKubelet && !!layout.kubeletView.configFile && canParallelCap;

  // serializeImagePulls
  {
    const risky = serialize.value === true;
    const wantFalse = canParallelCap && risky;
    out.push({
      id: 'kubelet.serializeImagePulls', component: 'kubelet', key: 'serializeImagePulls', supported: true,
      source: serialize.source, effective: { raw: serialize.raw, value: serialize.value, display: display('serializeImagePulls') },
      risk: risky
        ? { level: runtimeHasDeadline ? 'warn' : 'danger', text: `one stuck pull blocks every other pull on this node${runtimeHasDeadline ? ' until the runtime deadline fires' : ', and this runtime has no deadline'}` }
        : { level: 'ok', text: maxPar.value === null ? 'pulls run in parallel (no cap: see maxParallelImagePulls)' : 'pulls run in parallel' },
      recommendation: wantFalse
        ? { value: false, display: 'false', apply: applyKubelet && serialize.source.kind !== 'flag', manual: serialize.source.kind === 'flag', reason: 'a stalled pull should not block unrelated pods; cap parallelism with maxParallelImagePulls' }
        : risky
          ? { value: true, display: 'true', apply: false, manual: false, reason: kver ? `kubelet ${kver.text} has no maxParallelImagePulls (1.27+); parallel pulls would be unbounded` : 'kubelet version unknown; not changing' }
          : { value: serialize.value, display: String(serialize.value), apply: false, manual: false, reason: 'keep' },
    });
  }
  // maxParallelImagePulls
  {
    const willBeParallel = serialize.value === false || (canParallelCap && serialize.value === true);
    const want = willBeParallel && canParallelCap && maxPar.value === null ? 3 : maxPar.value;
    const change = want !== maxPar.value;
    out.push({
      id: 'kubelet.maxParallelImagePulls', component: 'kubelet', key: 'maxParallelImagePulls', supported: canParallelCap,
      source: maxPar.source, effective: { raw: maxPar.raw, value: maxPar.value, display: display('maxParallelImagePulls') },
      risk: !canParallelCap
        ? { level: 'info', text: 'needs kubelet 1.27+' }
        : serialize.value === false && maxPar.value === null
          ? { level: 'warn', text: 'unlimited parallel pulls can saturate the node\'s disk and network during a rollout' }
          : { level: 'ok', text: serialize.value === true ? 'has no effect while serializeImagePulls is true' : 'parallel pulls are capped' },
      recommendation: change
        ? { value: want, display: String(want), apply: applyKubelet && maxPar.source.kind !== 'flag', manual: false, reason: '3 parallel pulls: a stalled one no longer blocks the others, and a rollout cannot saturate the node' }
        : { value: maxPar.value, display: display('maxParallelImagePulls'), apply: false, manual: false, reason: 'keep' },
    });
  }
  for (const key of ['registryPullQPS', 'registryBurst'] as const) {
    const x = v[key];
    const def = KUBELET_DEFAULTS[key];
    const zero = x.value === 0;
    out.push({
      id: key === 'registryPullQPS' ? 'kubelet.registryPullQPS' : 'kubelet.registryBurst', component: 'kubelet', key, supported: true,
      source: x.source, effective: { raw: x.raw, value: x.value, display: display(key) },
      risk: zero && key === 'registryPullQPS'
        ? { level: 'info', text: 'registryPullQPS 0 = no limit' }
        : { level: 'info', text: `pulls beyond ${key === 'registryPullQPS' ? `${String(x.value)}/s` : `a burst of ${String(x.value)}`} fail at once with "pull QPS exceeded" (not a deadline; listed because it fails pulls fast)` },
      recommendation: { value: x.value, display: String(x.value ?? def), apply: false, manual: false, reason: 'keep; raise it only if pulls fail with "pull QPS exceeded" (kubelet event)' },
    });
  }
  return out;
}

/** Files that node tooling rewrites: an edit there is lost, or only this node gets it. */
function persistenceWarnings(layout: NodeLayout): string[] {
  const read = new Set(layout.fs.files.filter((f) => f.status === 'read').map((f) => f.path));
  const out: string[] = [];
  if (read.has('/etc/eks/kubelet/environment')) {
    out.push('EKS AL2023 (nodeadm): nodeadm renders /etc/containerd/config.toml and the kubelet config.json at boot; carry the values in the NodeConfig (spec.containerd.config, spec.kubelet.config) so new and rebooted nodes keep them');
  } else if (layout.kubeletView.configPath === '/etc/kubernetes/kubelet/kubelet-config.json') {
    out.push('EKS AL2: bootstrap.sh writes these files when a node joins; edits here stay on this node only — put the values in the launch template (--kubelet-extra-args / containerd config) for new nodes');
  }
  if (layout.kubeletView.configPath === '/var/lib/kubelet/config.yaml') {
    out.push('kubeadm: `kubeadm upgrade` rewrites /var/lib/kubelet/config.yaml from the kubelet-config ConfigMap; set kubelet values there too');
  }
  return out;
}
