/**
 * Deadline recommendation from this node's measured pulls (pure).
 *
 * Rule: deadline = clamp(K × p99 idle gap, 1m, 30m), where the p99 is taken per registry over the
 * idle gaps (> 1 s without a byte) inside pulls that *completed*, and the node-wide value is the
 * largest per-registry result (one deadline must let the slowest healthy registry finish). The
 * value is rounded up to a whole 30 s. With fewer than MIN_COMPLETED completed pulls the history
 * says too little and the documented default (5m) is used. `--deadline` overrides the rule, but a
 * value known to be harmful on the detected runtime version is refused.
 */
import { formatDuration } from '../../common/duration.js';
import type { ContainerdFamily, CrioFamily, DeadlineRecommendation, HistoryPull, RegistryEvidence } from './types.js';
import { TuneError } from './types.js';

export const K = 3;
export const MIN_MS = 60_000;
export const MAX_MS = 30 * 60_000;
export const DEFAULT_MS = 5 * 60_000;
export const MIN_COMPLETED = 20;
const ROUND_MS = 30_000;

export const RULE = `deadline = clamp(${K} × p99 idle gap of completed pulls (per registry, largest wins), 1m, 30m), rounded up to 30s; fewer than ${MIN_COMPLETED} completed pulls → default 5m`;

/** Nearest-rank percentile of a non-empty list. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1] as number;
}

export function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

export function evidenceByRegistry(history: HistoryPull[]): RegistryEvidence[] {
  const groups = new Map<string, HistoryPull[]>();
  for (const p of history) {
    const key = p.registry || '(unknown registry)';
    const g = groups.get(key) ?? [];
    g.push(p);
    groups.set(key, g);
  }
  const out: RegistryEvidence[] = [];
  for (const [registry, pulls] of groups) {
    const done = pulls.filter((p) => p.state === 'completed');
    const gaps = done.flatMap((p) => p.idleGapsMs.filter((g) => Number.isFinite(g) && g >= 0));
    const rates = done.map((p) => p.rateBytesPerSecond).filter((r): r is number => typeof r === 'number' && r > 0);
    const rateFromDuration = done
      .filter((p) => typeof p.durationMs === 'number' && p.durationMs > 0 && typeof p.bytesDone === 'number' && p.bytesDone > 0)
      .map((p) => (p.bytesDone as number) / ((p.durationMs as number) / 1000));
    const layerSizes = done.flatMap((p) => p.layers.map((l) => l.bytesTotal ?? l.bytesDone ?? 0)).filter((x) => x > 0);
    out.push({
      registry,
      completedPulls: done.length,
      idleGaps: gaps.length,
      p99IdleGapMs: percentile(gaps, 99),
      maxIdleGapMs: gaps.length ? Math.max(...gaps) : 0,
      medianRateBytesPerSecond: median(rateFromDuration.length ? rateFromDuration : rates),
      largestLayerBytes: layerSizes.length ? Math.max(...layerSizes) : null,
      cancelledByRuntime: pulls.filter((p) => p.state === 'cancelled-by-runtime').length,
    });
  }
  return out.sort((a, b) => b.p99IdleGapMs - a.p99IdleGapMs || a.registry.localeCompare(b.registry));
}

export interface RecommendInput {
  history: HistoryPull[] | null;
  /** Why there is no history, e.g. "no history (agent unreachable)". */
  historyNote?: string;
  runtime: 'containerd' | 'cri-o' | 'docker' | 'unknown';
  family: ContainerdFamily | CrioFamily | 'cri-dockerd' | 'unknown';
  overrideMs?: number;
}

/** Throws TuneError for an override that is harmful on this runtime version. */
export function checkOverride(ms: number, runtime: RecommendInput['runtime'], family: RecommendInput['family']): string[] {
  const notes: string[] = [];
  if (!Number.isFinite(ms) || ms < 0) throw new TuneError(`--deadline must be a positive duration`, 'bad-deadline');
  if (ms === 0) {
    if (runtime === 'containerd' && family === '2.1+') {
      throw new TuneError('--deadline 0 refused: on containerd 2.1+ a 0s image_pull_progress_timeout makes PullImage hang forever on the transfer-service path (containerd#14158)', 'harmful-deadline');
    }
    if (runtime === 'containerd' && family === 'unknown') {
      throw new TuneError('--deadline 0 refused: the containerd version is unknown and 0s hangs pulls forever on 2.1+ (containerd#14158)', 'harmful-deadline');
    }
    notes.push('--deadline 0 disables the runtime\'s pull deadline: a stalled pull will hang until the kubelet or a person cancels it');
  } else if (ms < 10_000) {
    throw new TuneError(`--deadline ${formatDuration(ms)} refused: below 10s the runtime cancels pulls during normal registry pauses (containerd checks progress only every 10s)`, 'harmful-deadline');
  } else if (ms < MIN_MS) {
    notes.push(`--deadline ${formatDuration(ms)} is below 1m: slow but healthy registries (large layers prepared on demand) will be cancelled`);
  }
  return notes;
}

export function recommendDeadline(input: RecommendInput): DeadlineRecommendation {
  const base = { rule: RULE, k: K, minMs: MIN_MS, maxMs: MAX_MS, minCompletedPulls: MIN_COMPLETED };
  const perRegistry = input.history ? evidenceByRegistry(input.history) : [];
  const completed = perRegistry.reduce((s, r) => s + r.completedPulls, 0);
  const notes: string[] = [];
  const cancelled = perRegistry.reduce((s, r) => s + r.cancelledByRuntime, 0);
  if (cancelled > 0) notes.push(`${cancelled} pull(s) in the history were cancelled by the runtime's deadline`);
  for (const r of perRegistry) {
    if (r.completedPulls > 0 && r.completedPulls < MIN_COMPLETED) notes.push(`${r.registry}: only ${r.completedPulls} completed pull(s); its p99 is a rough estimate`);
  }

  if (input.overrideMs !== undefined) {
    notes.push(...checkOverride(input.overrideMs, input.runtime, input.family));
    const p99 = perRegistry.length ? Math.max(...perRegistry.map((r) => r.p99IdleGapMs)) : null;
    if (p99 !== null && completed > 0 && input.overrideMs > 0 && input.overrideMs < p99) {
      notes.push(`--deadline ${formatDuration(input.overrideMs)} is shorter than the p99 idle gap measured here (${formatDuration(p99)}): healthy pulls will be cancelled`);
    }
    return {
      ...base, valueMs: input.overrideMs, basis: 'override', completedPulls: completed, p99IdleGapMs: p99, perRegistry,
      reason: `set by --deadline ${formatDuration(input.overrideMs)}`, notes,
    };
  }

  if (!input.history || completed < MIN_COMPLETED) {
    const why = !input.history
      ? (input.historyNote ?? 'no history')
      : `too little history: ${completed} completed pull(s), the rule needs at least ${MIN_COMPLETED}`;
    return {
      ...base, valueMs: DEFAULT_MS, basis: 'default', completedPulls: completed, p99IdleGapMs: null, perRegistry,
      reason: `${why}; using the documented default 5m`, notes,
    };
  }

  const worst = perRegistry.filter((r) => r.completedPulls > 0)[0] as RegistryEvidence;
  const raw = K * worst.p99IdleGapMs;
  const clamped = Math.min(MAX_MS, Math.max(MIN_MS, raw));
  const valueMs = Math.min(MAX_MS, Math.ceil(clamped / ROUND_MS) * ROUND_MS);
  let reason = `${completed} completed pulls; slowest registry ${worst.registry}: p99 idle gap ${formatDuration(worst.p99IdleGapMs)} × ${K} = ${formatDuration(raw)}`;
  if (raw < MIN_MS) reason += `, raised to the 1m floor`;
  else if (raw > MAX_MS) reason += `, capped at 30m (a longer gap is a stall, not a slow registry)`;
  else if (valueMs !== raw) reason += `, rounded up to ${formatDuration(valueMs)}`;
  return { ...base, valueMs, basis: 'evidence', completedPulls: completed, p99IdleGapMs: worst.p99IdleGapMs, perRegistry, reason, notes };
}
