/**
 * The agent → collector wire format (HTTP JSON). Runtime validators (zod) and the types inferred
 * from them; the agent's collector client builds these bodies, the collector validates them at the
 * boundary. Compile-time checks below keep the schemas identical to agent/model/pulls.ts.
 *
 *   POST /v1/events     body EventBatch      → 200 IngestResponse
 *   POST /v1/heartbeat  body Heartbeat       → 200 HeartbeatResponse
 *   Authorization: Bearer <token>   Content-Type: application/json
 *
 * Errors are JSON `{ error, reason }` (ErrorResponse). Retry semantics for clients:
 *   400 (schema / junk JSON), 401, 413, 415 → permanent for that body: do not resend it unchanged.
 *   429 (per-node rate limit, with Retry-After seconds), 5xx, network errors → retry with backoff.
 * Event ids are unique per event: the collector ignores repeats, so resending a batch is safe.
 */
import { z } from 'zod';
import type { PullRecord, TransitionKind } from '../agent/model/pulls.js';
import type { RuntimeName } from '../agent/model/observations.js';

/** Bumped on incompatible changes; sent by the collector in responses as `wireVersion`. */
export const WIRE_VERSION = 1;

export const WIRE_LIMITS = {
  /** Events per POST /v1/events. */
  maxEventsPerBatch: 1000,
  /** Pulls in one heartbeat. */
  maxPullsInFlight: 500,
  maxLayersPerPull: 512,
  maxPodsPerPull: 256,
  maxIdleGaps: 1000,
  maxIdLength: 256,
  maxImageLength: 1024,
  maxNodeLength: 253,
  maxTextLength: 4096,
  /** JSON.stringify(capture).length */
  maxCaptureBytes: 64 * 1024,
  maxCaptureDepth: 16,
  /** Default request body limit of the collector (bytes); larger → 413. */
  defaultBodyLimitBytes: 8 * 1024 * 1024,
} as const;

const L = WIRE_LIMITS;

const isoTime = z.iso.datetime({ offset: true });
const shortText = z.string().max(L.maxIdLength);
const text = z.string().max(L.maxTextLength);
const count = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
const nonNeg = z.number().finite().nonnegative();

export const RuntimeNameSchema = z.enum(['containerd', 'docker', 'cri-o']);
export const BlobKindSchema = z.enum(['layer', 'manifest', 'index', 'config', 'attestation', 'unknown']);
export const PullStateSchema = z.enum([
  'downloading', 'slow', 'stalled', 'unpacking', 'completed', 'failed', 'cancelled-by-runtime',
]);
export const LayerStateSchema = z.enum(['downloading', 'slow', 'stalled', 'committed', 'aborted']);
export const TransitionKindSchema = z.enum([
  'started', 'slow', 'stalled', 'resumed', 'unpacking', 'completed', 'failed', 'cancelled',
]);

export const LayerRecordSchema = z.object({
  digest: shortText,
  kind: BlobKindSchema,
  state: LayerStateSchema,
  bytesDone: count,
  bytesTotal: count.nullable(),
  idleSeconds: nonNeg,
  rateBytesPerSecond: nonNeg,
  startedAt: isoTime,
});

export const PodRefSchema = z.object({
  namespace: shortText,
  name: shortText,
  container: shortText.optional(),
  reason: shortText.optional(),
});

export const CancelInfoSchema = z.object({
  by: z.enum(['containerd', 'docker', 'cri-o', 'kubelet']),
  at: isoTime,
  deadlineMs: nonNeg.optional(),
  lastProgress: text,
  bytesDone: count,
  bytesTotal: count.nullable(),
});

export const PullRecordSchema = z.object({
  id: z.string().min(1).max(L.maxIdLength + L.maxImageLength),
  image: z.string().min(1).max(L.maxImageLength),
  registry: z.string().max(L.maxIdLength),
  repository: z.string().max(L.maxImageLength),
  state: PullStateSchema,
  startedAt: isoTime,
  updatedAt: isoTime,
  lastProgressAt: isoTime,
  finishedAt: isoTime.optional(),
  idleSeconds: nonNeg,
  rateBytesPerSecond: nonNeg,
  bytesDone: count,
  bytesTotal: count.nullable(),
  layers: z.array(LayerRecordSchema).max(L.maxLayersPerPull),
  runtime: z.object({ name: RuntimeNameSchema, version: shortText.optional() }),
  runtimeDeadlineMs: nonNeg.nullable().optional(),
  pods: z.array(PodRefSchema).max(L.maxPodsPerPull),
  cancel: CancelInfoSchema.optional(),
  error: text.optional(),
  durationMs: nonNeg.optional(),
  idleGapsMs: z.array(nonNeg).max(L.maxIdleGaps),
});

/** Iterative depth of a JSON value (no recursion: safe on hostile nesting). */
export function jsonDepth(value: unknown): number {
  let max = 0;
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length) {
    const [v, d] = stack.pop() as [unknown, number];
    if (v === null || typeof v !== 'object') continue;
    if (d > max) max = d;
    if (max > 1000) return max;
    for (const child of Object.values(v as Record<string, unknown>)) stack.push([child, d + 1]);
  }
  return max;
}

/** Opaque, small JSON object (e.g. a stall capture); bounded in depth and size. */
export const CaptureSchema = z.record(z.string(), z.unknown()).superRefine((v, ctx) => {
  if (jsonDepth(v) > L.maxCaptureDepth) {
    ctx.addIssue({ code: 'custom', message: `nested deeper than ${L.maxCaptureDepth} levels` });
    return;
  }
  let size: number;
  try { size = JSON.stringify(v).length; } catch { size = Infinity; }
  if (size > L.maxCaptureBytes) {
    ctx.addIssue({ code: 'custom', message: `larger than ${L.maxCaptureBytes} bytes as JSON` });
  }
});

export const AgentEventSchema = z.object({
  /** Unique per event (uuid/ulid); repeats are ignored by the collector. */
  id: z.string().min(1).max(L.maxIdLength),
  at: isoTime,
  kind: TransitionKindSchema,
  pull: PullRecordSchema,
  capture: CaptureSchema.optional(),
});

/** Kubernetes node names (DNS subdomains) and host names; no spaces or control characters. */
const nodeName = z.string().min(1).max(L.maxNodeLength).regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'must be a node/host name ([A-Za-z0-9._-], starting alphanumeric)');
const agentVersion = z.string().min(1).max(64).regex(/^[A-Za-z0-9][A-Za-z0-9.+_-]*$/, 'must be a version string');

export const EventBatchSchema = z.object({
  node: nodeName,
  agentVersion,
  events: z.array(AgentEventSchema).max(L.maxEventsPerBatch),
});

export const HeartbeatRuntimeSchema = z.object({
  name: RuntimeNameSchema,
  version: shortText.optional(),
  pullDeadlineMs: nonNeg.nullable().optional(),
});

export const HeartbeatSchema = z.object({
  node: nodeName,
  agentVersion,
  runtime: HeartbeatRuntimeSchema.optional(),
  pullsInFlight: z.array(PullRecordSchema).max(L.maxPullsInFlight),
  eventsDropped: count,
  queueDepth: count,
  sourceErrors: count,
  /** Seconds between heartbeats; the collector declares the agent down after 3 missed intervals. */
  intervalSeconds: z.number().finite().positive().max(3600),
  at: isoTime,
});

export type WireLayerRecord = z.infer<typeof LayerRecordSchema>;
export type WirePullRecord = z.infer<typeof PullRecordSchema>;
export type AgentEvent = z.infer<typeof AgentEventSchema>;
export type EventBatch = z.infer<typeof EventBatchSchema>;
export type HeartbeatRuntime = z.infer<typeof HeartbeatRuntimeSchema>;
export type Heartbeat = z.infer<typeof HeartbeatSchema>;

export interface IngestResponse { wireVersion: number; accepted: number; duplicates: number }
/** intervalSeconds: the heartbeat interval the collector asks agents to use (its --heartbeat-interval). */
export interface HeartbeatResponse { wireVersion: number; ok: true; intervalSeconds?: number }
export interface ErrorResponse { error: string; reason: string }

// Compile-time: the wire types and the model types are the same shapes.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const pullRecordMatches: Same<WirePullRecord, PullRecord> = true;
const transitionKindMatches: Same<AgentEvent['kind'], TransitionKind> = true;
const runtimeNameMatches: Same<z.infer<typeof RuntimeNameSchema>, RuntimeName> = true;
void pullRecordMatches; void transitionKindMatches; void runtimeNameMatches;

/** First issue of a zod error as "path.to.field: message" — the 400 reason. */
export function describeZodError(err: z.ZodError): string {
  const issue = err.issues[0];
  if (!issue) return 'invalid body';
  const path = issue.path.length ? issue.path.map(String).join('.') : '(body)';
  const more = err.issues.length > 1 ? ` (+${err.issues.length - 1} more)` : '';
  return `${path}: ${issue.message}${more}`;
}
