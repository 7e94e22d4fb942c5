/**
 * What the detector tells sinks: one record per pull (image) with its layers, and the
 * transitions between states. These shapes are also what `/v1/pulls` and `status --json` show.
 */
import type { BlobKind, RuntimeName } from './observations.js';

export type PullState =
  | 'downloading' | 'slow' | 'stalled' | 'unpacking' | 'completed' | 'failed' | 'cancelled-by-runtime';

export type LayerState = 'downloading' | 'slow' | 'stalled' | 'committed' | 'aborted';

export interface LayerRecord {
  digest: string;
  kind: BlobKind;
  state: LayerState;
  bytesDone: number;
  bytesTotal: number | null;
  /** Seconds since the last byte arrived for this layer. */
  idleSeconds: number;
  /** Bytes/s over the last stall window. */
  rateBytesPerSecond: number;
  startedAt: string;
}

export interface PodRef { namespace: string; name: string; container?: string; reason?: string }

export interface CancelInfo {
  by: RuntimeName | 'kubelet';
  at: string;
  /** The runtime's deadline that fired (ms), when known from its log or config. */
  deadlineMs?: number;
  /** Last progress seen before the cancel: bytes done/total when we watched them, or the runtime's words. */
  lastProgress: string;
  bytesDone: number;
  bytesTotal: number | null;
}

export interface PullRecord {
  /** Stable id of this pull attempt (image + start time). */
  id: string;
  /** Image as the pod spec names it (or the runtime logged it). */
  image: string;
  registry: string;
  repository: string;
  state: PullState;
  startedAt: string;
  updatedAt: string;
  lastProgressAt: string;
  finishedAt?: string;
  /** Seconds without byte progress on any layer of this pull. */
  idleSeconds: number;
  rateBytesPerSecond: number;
  bytesDone: number;
  bytesTotal: number | null;
  layers: LayerRecord[];
  runtime: { name: RuntimeName; version?: string };
  /** The runtime's own pull-progress deadline (ms); null = none; undefined = unknown. */
  runtimeDeadlineMs?: number | null;
  pods: PodRef[];
  cancel?: CancelInfo;
  error?: string;
  durationMs?: number;
  /** Idle gaps (ms) longer than 1s seen inside this pull: what tune uses. */
  idleGapsMs: number[];
}

export type TransitionKind =
  | 'started' | 'slow' | 'stalled' | 'resumed' | 'unpacking' | 'completed' | 'failed' | 'cancelled';

export interface Transition {
  kind: TransitionKind;
  from: PullState | null;
  to: PullState;
  at: string;
  pull: PullRecord;
}
