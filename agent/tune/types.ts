/**
 * Shapes of `pullwatch tune`: the plan (what `tune plan --json`, the agent's /v1/tune and the
 * bundle show) and the inputs it is computed from. The JSON shape is versioned by `schemaVersion`;
 * fields are only ever added.
 */
import { z } from 'zod';
import type { PullRecord } from '../model/pulls.js';

/** Which containerd deadline semantics apply (REFERENCE.md: containerd). */
export type ContainerdFamily =
  | 'no-deadline'   // ≤ 1.6: no image_pull_progress_timeout at all
  | '1.7.0-1.7.9'   // exists, default 1m0s
  | '1.7.10+'       // default 5m0s
  | '2.0'           // config v3 key under io.containerd.cri.v1.images, default 5m0s
  | '2.1+'          // transfer service: 0s hangs forever (containerd#14158)
  | 'unknown';

export type RuntimeName = 'containerd' | 'cri-o' | 'docker' | 'unknown';

export interface RuntimeDetection {
  name: RuntimeName;
  /** Semver-ish "1.7.24" as the binary reported it, null when it could not be read. */
  version: string | null;
  /** For containerd: the deadline family; for others the same field names the known behaviour. */
  family: ContainerdFamily | CrioFamily | 'cri-dockerd' | 'unknown';
  /** Host path of the binary that answered `--version`. */
  binary?: string;
  /** The raw first line of `--version`, for the record. */
  versionOutput?: string;
  /** Why this runtime was chosen (kubelet endpoint, binary present, …). */
  detectedBy: string;
  /** Why the version is unknown, when it is. */
  versionError?: string;
}

export type CrioFamily =
  | 'crio-no-timeout'      // pull_progress_timeout does not exist in this version
  | 'crio-default-10s'     // exists, default 10s
  | 'crio-default-0s';     // exists, default 0s (disabled)

export interface KubeletDetection {
  version: string | null;
  versionError?: string;
  binary?: string;
  /** Host path of the unit file and its drop-ins that were read, in systemd order. */
  unitFiles: string[];
  /** Effective `--config` (host path) and `--config-dir`. */
  configFile?: string;
  configDir?: string;
  /** Container runtime endpoint (flag or config). */
  runtimeEndpoint?: string;
}

export type SettingId =
  | 'runtime.pullProgressTimeout'
  | 'kubelet.imagePullProgressDeadline'
  | 'kubelet.serializeImagePulls'
  | 'kubelet.maxParallelImagePulls'
  | 'kubelet.registryPullQPS'
  | 'kubelet.registryBurst';

export type SettingSource =
  | { kind: 'file'; path: string; line: number | null; key: string }
  | { kind: 'flag'; path: string; line: number | null; flag: string }
  | { kind: 'default' }
  | { kind: 'absent' };

export type RiskLevel = 'ok' | 'info' | 'warn' | 'danger' | 'unknown';

export interface TuneSetting {
  id: SettingId;
  component: 'containerd' | 'cri-o' | 'cri-dockerd' | 'kubelet';
  /** Human name of the key, e.g. `plugins."io.containerd.grpc.v1.cri".image_pull_progress_timeout`. */
  key: string;
  /** Whether this setting exists on the detected version. */
  supported: boolean;
  source: SettingSource;
  /** Effective value: raw text as written, parsed value (ms for durations), and a display string. */
  effective: { raw: string | null; value: number | boolean | null; display: string };
  risk: { level: RiskLevel; text: string };
  recommendation: {
    /** The value to set (ms for durations); null = leave/remove (see reason). */
    value: number | boolean | null;
    display: string;
    /** True when `tune apply` would write this setting. */
    apply: boolean;
    /** True when a person has to act (e.g. remove a dead flag, upgrade the runtime). */
    manual: boolean;
    reason: string;
  };
}

export interface RegistryEvidence {
  registry: string;
  completedPulls: number;
  idleGaps: number;
  p99IdleGapMs: number;
  maxIdleGapMs: number;
  medianRateBytesPerSecond: number | null;
  largestLayerBytes: number | null;
  cancelledByRuntime: number;
}

export interface DeadlineRecommendation {
  valueMs: number;
  basis: 'evidence' | 'default' | 'override';
  rule: string;
  k: number;
  minMs: number;
  maxMs: number;
  minCompletedPulls: number;
  completedPulls: number;
  p99IdleGapMs: number | null;
  perRegistry: RegistryEvidence[];
  reason: string;
  notes: string[];
}

export interface HistoryInfo {
  source: 'agent' | 'file' | 'none';
  /** e.g. "no history (agent unreachable)". */
  note: string;
  pulls: number;
}

export interface FileRead {
  /** Host path (as on the node, without --host-root). */
  path: string;
  role: string;
  status: 'read' | 'missing' | 'error';
  /** Host path after following symlinks, when it differs. */
  realPath?: string;
  error?: string;
}

export interface TunePlan {
  schemaVersion: 1;
  generatedAt: string;
  hostRoot: string;
  runtime: RuntimeDetection;
  kubelet: KubeletDetection;
  history: HistoryInfo;
  deadline: DeadlineRecommendation;
  settings: TuneSetting[];
  files: FileRead[];
  filesRead: number;
  /** Problems that make some values unknown (malformed files, unknown versions). Plan still returns. */
  errors: string[];
  warnings: string[];
}

/** What `/v1/pulls?all=1` returns (and `--history FILE` holds). Validated loosely: tune needs few fields. */
export const historySchema = z.object({
  pulls: z.array(z.looseObject({
    id: z.string(),
    registry: z.string(),
    state: z.string(),
    bytesDone: z.number().nonnegative().optional(),
    rateBytesPerSecond: z.number().nonnegative().optional(),
    idleGapsMs: z.array(z.number().nonnegative()).default([]),
    layers: z.array(z.looseObject({ bytesTotal: z.number().nullable().optional(), bytesDone: z.number().optional() })).default([]),
    durationMs: z.number().optional(),
  })),
});

/** The subset of PullRecord the recommendation reads. */
export type HistoryPull = Pick<PullRecord, 'id' | 'registry' | 'state' | 'idleGapsMs'> & Partial<Pick<PullRecord, 'bytesDone' | 'rateBytesPerSecond' | 'durationMs'>> & {
  layers: Array<{ bytesTotal?: number | null; bytesDone?: number }>;
};

export class TuneError extends Error {
  constructor(message: string, readonly code: string = 'tune') { super(message); }
}
