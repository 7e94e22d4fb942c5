/**
 * Pure: which Kubernetes Event a pull transition becomes (reason, type, note). The note is what a
 * person reads in `kubectl describe pod`, e.g.
 *   image registry.example.com/team/app:1.2: layer sha256:ab12cd34ef56… stalled at 4.2 MB of 40.0 MB
 *   for 1m15s (registry.example.com, containerd 1.7.24, runtime deadline 5m0s)
 */
import { formatBytes } from '../../common/bytes.js';
import { formatDuration } from '../../common/duration.js';
import type { LayerRecord, PullRecord, Transition } from '../model/pulls.js';

export type PullEventReason = 'PullStalled' | 'PullSlow' | 'PullResumed' | 'PullCancelledByRuntime';

export interface PullEventSpec {
  reason: PullEventReason;
  type: 'Normal' | 'Warning';
  /** Machine-readable, ≤128 characters (events.k8s.io/v1 validation). */
  action: string;
  /** ≤1024 bytes (events.k8s.io/v1 validation). */
  note: string;
}

export const REPORTING_CONTROLLER = 'pullwatch.io/agent';
export const EVENT_ACTION = 'ObserveImagePull';
/** noteLengthLimit in k8s.io/kubernetes pkg/apis/core/validation/events.go. */
export const NOTE_LIMIT_BYTES = 1024;

const REASONS: Partial<Record<Transition['kind'], { reason: PullEventReason; type: 'Normal' | 'Warning' }>> = {
  stalled: { reason: 'PullStalled', type: 'Warning' },
  slow: { reason: 'PullSlow', type: 'Warning' },
  resumed: { reason: 'PullResumed', type: 'Normal' },
  cancelled: { reason: 'PullCancelledByRuntime', type: 'Warning' },
};

/** undefined for transitions that do not become an Event (started, completed, …). */
export function eventForTransition(t: Transition): PullEventSpec | undefined {
  const r = REASONS[t.kind];
  if (!r) return undefined;
  const note = truncateUtf8(noteFor(t, r.reason), NOTE_LIMIT_BYTES);
  return { reason: r.reason, type: r.type, action: EVENT_ACTION, note };
}

export function shortDigest(digest: string): string {
  const m = /^(sha256|sha512):([0-9a-f]+)$/i.exec(digest);
  if (!m) return digest;
  const hex = m[2] as string;
  return hex.length > 12 ? `${m[1]}:${hex.slice(0, 12)}…` : digest;
}

function progress(done: number, total: number | null): string {
  return total !== null && total > 0 ? `${formatBytes(done)} of ${formatBytes(total)}` : formatBytes(done);
}

function context(p: PullRecord): string {
  const parts: string[] = [];
  if (p.registry) parts.push(p.registry);
  parts.push(p.runtime.version ? `${p.runtime.name} ${p.runtime.version}` : p.runtime.name);
  if (p.runtimeDeadlineMs === null) parts.push('no runtime deadline');
  else if (p.runtimeDeadlineMs === 0) parts.push('runtime deadline disabled');
  else if (typeof p.runtimeDeadlineMs === 'number') parts.push(`runtime deadline ${formatDuration(p.runtimeDeadlineMs)}`);
  return `(${parts.join(', ')})`;
}

/** The layer the note names: one in the transition's state with the most bytes still missing. */
function focusLayer(p: PullRecord, state: LayerRecord['state']): LayerRecord | undefined {
  const candidates = p.layers.filter((l) => l.state === state);
  const pool = candidates.length ? candidates : p.layers.filter((l) => l.state !== 'committed' && l.state !== 'aborted');
  let best: LayerRecord | undefined;
  let bestMissing = -1;
  for (const l of pool) {
    const missing = l.bytesTotal !== null ? l.bytesTotal - l.bytesDone : 0;
    if (missing > bestMissing) { best = l; bestMissing = missing; }
  }
  return best;
}

function noteFor(t: Transition, reason: PullEventReason): string {
  const p = t.pull;
  const image = `image ${p.image}`;
  const ctx = context(p);
  switch (reason) {
    case 'PullStalled': {
      const l = focusLayer(p, 'stalled');
      const idle = formatDuration(Math.round((l ? l.idleSeconds : p.idleSeconds) * 1000));
      const what = l ? `layer ${shortDigest(l.digest)} stalled at ${progress(l.bytesDone, l.bytesTotal)}` : `pull stalled at ${progress(p.bytesDone, p.bytesTotal)}`;
      return `${image}: ${what} for ${idle} ${ctx}`;
    }
    case 'PullSlow': {
      const l = focusLayer(p, 'slow');
      const rate = `${formatBytes(Math.round(l ? l.rateBytesPerSecond : p.rateBytesPerSecond))}/s`;
      const what = l ? `layer ${shortDigest(l.digest)} crawling at ${rate}, ${progress(l.bytesDone, l.bytesTotal)}` : `pull crawling at ${rate}, ${progress(p.bytesDone, p.bytesTotal)}`;
      const elapsed = elapsedMs(p.startedAt, t.at);
      return `${image}: ${what}${elapsed !== undefined ? ` after ${formatDuration(elapsed)}` : ''} ${ctx}`;
    }
    case 'PullResumed': {
      const gap = p.idleGapsMs.length ? p.idleGapsMs[p.idleGapsMs.length - 1] : undefined;
      return `${image}: pull resumed at ${progress(p.bytesDone, p.bytesTotal)}${gap !== undefined ? ` after ${formatDuration(gap)} without progress` : ''} ${ctx}`;
    }
    case 'PullCancelledByRuntime': {
      const c = p.cancel;
      const by = c ? (c.by === p.runtime.name && p.runtime.version ? `${c.by} ${p.runtime.version}` : c.by) : p.runtime.name;
      const deadline = c?.deadlineMs !== undefined ? ` after no progress for ${formatDuration(c.deadlineMs)}` : '';
      const last = c ? `${progress(c.bytesDone, c.bytesTotal)}${c.lastProgress ? ` (${c.lastProgress})` : ''}` : progress(p.bytesDone, p.bytesTotal);
      return `${image}: ${by} cancelled the pull${deadline}; last progress ${last}; the kubelet will retry with back-off ${ctx}`;
    }
  }
}

function elapsedMs(fromIso: string, toIso: string): number | undefined {
  const a = Date.parse(fromIso);
  const b = Date.parse(toIso);
  return Number.isFinite(a) && Number.isFinite(b) && b >= a ? b - a : undefined;
}

/** Cuts a string to at most `limit` UTF-8 bytes without splitting a character; marks the cut with "…". */
export function truncateUtf8(s: string, limit: number): string {
  if (Buffer.byteLength(s, 'utf8') <= limit) return s;
  let out = '';
  let bytes = 0;
  const ellipsis = Buffer.byteLength('…', 'utf8');
  for (const ch of s) {
    const b = Buffer.byteLength(ch, 'utf8');
    if (bytes + b + ellipsis > limit) break;
    out += ch;
    bytes += b;
  }
  return `${out}…`;
}
