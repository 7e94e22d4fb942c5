/**
 * The collector client: a Sink that turns every pull transition into an AgentEvent, keeps it in the
 * durable on-disk queue (queue.ts) and delivers it to the collector in order, in batches, retrying
 * with exponential backoff and jitter until the collector has it. A heartbeat with the pulls in
 * flight and the agent's counters goes out every interval.
 *
 * Delivery rules (see common/wire.ts):
 *   2xx                      → batch acked (removed from the queue).
 *   network error, 408, 429, 5xx, and 401/403/404 (a token or URL being fixed: nothing is lost
 *   while it is) → retry the same batch after a backoff (429: at least Retry-After).
 *   other 4xx (400 bad event, 413 too large, 415, 422) → permanent for that body: the batch is split
 *   in halves until the offending event is alone, and that event is dropped with a logged error and
 *   counted (so one bad event never blocks or takes down the events around it).
 * Event ids are random UUIDs; the collector ignores repeats, so a batch re-sent after a lost
 * response is delivered exactly once.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../../../common/log.js';
import {
  AgentEventSchema, HeartbeatSchema, WIRE_LIMITS, describeZodError,
  type AgentEvent, type EventBatch, type Heartbeat,
} from '../../../common/wire.js';
import type { AgentState } from '../../model/agent-state.js';
import type { PullRecord, Transition } from '../../model/pulls.js';
import type { Sink } from '../sink.js';
import { DurableQueue, type QueueRecord } from './queue.js';

export interface CollectorSinkOptions {
  /** Base URL of the collector, e.g. http://pullwatch-collector:8080 */
  url: string;
  /** File holding the bearer token; re-read whenever it changes (Secret rotation). */
  tokenFile?: string;
  queueDir: string;
  state: AgentState;
  logger: Logger;
  /** Default 30 s. */
  heartbeatIntervalMs?: number;
  /** Events per POST /v1/events (default 500, at most WIRE_LIMITS.maxEventsPerBatch). */
  batchSize?: number;
  fetchImpl?: typeof fetch;
  /** Bound of the on-disk queue (default 64 MiB); oldest unsent events are dropped beyond it. */
  queueMaxBytes?: number;
  /** Retry backoff: first delay and cap (defaults 500 ms, 30 s); full jitter between half and all of it. */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** Per-request timeout (default 10 s). */
  requestTimeoutMs?: number;
}

export interface CollectorSinkStats {
  queueDepth: number;
  queueBytes: number;
  /** All events that will never reach the collector: queue overflow + rejected + invalid + unwritable. */
  eventsDropped: number;
  droppedQueueFull: number;
  droppedRejected: number;
  droppedInvalid: number;
  droppedEnqueueFailed: number;
  tornRecords: number;
  corruptRegions: number;
  eventsSent: number;
  batchesSent: number;
  sendFailures: number;
  heartbeatsSent: number;
  heartbeatFailures: number;
  lastError?: string;
  lastDeliveryAt?: string;
}

export interface CollectorSink extends Sink {
  /** Queues the transition's event with a stall capture attached (sent as a repeat of the stall). */
  handleCapture(transition: Transition, capture: Record<string, unknown>): void;
  /** Starts the sender and heartbeat loops (events handled before start() are queued). */
  start(): void;
  stats(): CollectorSinkStats;
  /** Stops the loops, lets an in-flight request finish (≤ 2 s) and closes the queue. */
  close(): Promise<void>;
}

const IN_FLIGHT_STATES = new Set<PullRecord['state']>(['downloading', 'slow', 'stalled', 'unpacking']);
const RETRY_STATUSES = new Set([401, 403, 404, 408, 429]);

type SendResult =
  | { kind: 'ok' }
  | { kind: 'retry'; reason: string; retryAfterMs?: number }
  | { kind: 'permanent'; status: number; reason: string };

/** Clips the arrays and texts of a pull record to the wire limits (newest idle gaps kept). */
function clipPull(p: PullRecord): PullRecord {
  const L = WIRE_LIMITS;
  const out: PullRecord = { ...p };
  if (p.layers.length > L.maxLayersPerPull) out.layers = p.layers.slice(0, L.maxLayersPerPull);
  if (p.pods.length > L.maxPodsPerPull) out.pods = p.pods.slice(0, L.maxPodsPerPull);
  if (p.idleGapsMs.length > L.maxIdleGaps) out.idleGapsMs = p.idleGapsMs.slice(-L.maxIdleGaps);
  if (p.error !== undefined && p.error.length > L.maxTextLength) out.error = p.error.slice(0, L.maxTextLength);
  if (p.cancel && p.cancel.lastProgress.length > L.maxTextLength) {
    out.cancel = { ...p.cancel, lastProgress: p.cancel.lastProgress.slice(0, L.maxTextLength) };
  }
  return out;
}

/** The wire event of a transition (a fresh unique id each time). */
export function transitionToEvent(t: Transition): AgentEvent {
  return { id: randomUUID(), at: t.at, kind: t.kind, pull: clipPull(t.pull) };
}

function parseRetryAfter(value: string | null): number | undefined {
  if (!value) return undefined;
  const secs = Number(value);
  if (Number.isFinite(secs) && secs >= 0) return Math.min(secs * 1000, 300_000);
  const at = Date.parse(value);
  return Number.isFinite(at) ? Math.min(Math.max(0, at - Date.now()), 300_000) : undefined;
}

export function createCollectorSink(opts: CollectorSinkOptions): CollectorSink {
  let base: URL;
  try { base = new URL(opts.url); } catch { throw new Error(`invalid collector URL "${opts.url}"`); }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') throw new Error(`collector URL must be http(s): "${opts.url}"`);
  const baseUrl = base.href.replace(/\/+$/, '');
  const logger = opts.logger.child({ sink: 'collector' });
  const fetchImpl = opts.fetchImpl ?? fetch;
  const heartbeatIntervalMs = Math.max(100, opts.heartbeatIntervalMs ?? 30_000);
  const maxBatch = Math.max(1, Math.min(opts.batchSize ?? 500, WIRE_LIMITS.maxEventsPerBatch));
  const backoffInitialMs = Math.max(1, opts.backoffInitialMs ?? 500);
  const backoffMaxMs = Math.max(backoffInitialMs, opts.backoffMaxMs ?? 30_000);
  const requestTimeoutMs = opts.requestTimeoutMs ?? 10_000;
  // A batch body stays well under the collector's default body limit.
  const maxBatchPayloadBytes = Math.floor(WIRE_LIMITS.defaultBodyLimitBytes / 2);
  const queue = DurableQueue.open({ dir: opts.queueDir, maxBytes: opts.queueMaxBytes, logger });

  const counters = {
    droppedRejected: 0, droppedInvalid: 0, droppedEnqueueFailed: 0,
    eventsSent: 0, batchesSent: 0, sendFailures: 0, heartbeatsSent: 0, heartbeatFailures: 0,
  };
  let lastError: string | undefined;
  let lastDeliveryAt: string | undefined;
  let started = false;
  let closing = false;
  /** Aborted by close(): loops stop and backoff sleeps end. */
  const stop = new AbortController();
  /** Aborted 2 s after close(): a request still in flight is cut (its events stay queued). */
  const hardStop = new AbortController();
  let wakeSender: (() => void) | undefined;
  let senderDone: Promise<void> = Promise.resolve();
  let heartbeatDone: Promise<void> = Promise.resolve();

  // ------------------------------------------------------------- token
  let tokenKey = '';
  let token: string | undefined;
  function currentToken(): string | undefined {
    if (!opts.tokenFile) return undefined;
    try {
      const st = statSync(opts.tokenFile);
      const key = `${st.ino}:${st.size}:${st.mtimeMs}`;
      if (key !== tokenKey) {
        token = readFileSync(opts.tokenFile, 'utf8').trim() || undefined;
        tokenKey = key;
        logger.info({ tokenFile: opts.tokenFile }, token ? 'collector token (re)loaded' : 'collector token file is empty');
      }
    } catch (e) {
      if (tokenKey !== 'error') logger.error({ tokenFile: opts.tokenFile, err: (e as Error).message }, 'cannot read collector token file');
      tokenKey = 'error';
      token = undefined;
    }
    return token;
  }

  // ------------------------------------------------------------- HTTP
  async function post(path: string, body: unknown): Promise<SendResult> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    const t = currentToken();
    if (t) headers.authorization = `Bearer ${t}`;
    let res: Response;
    try {
      res = await fetchImpl(`${baseUrl}${path}`, {
        method: 'POST', headers, body: JSON.stringify(body),
        signal: AbortSignal.any([hardStop.signal, AbortSignal.timeout(requestTimeoutMs)]),
      });
    } catch (e) {
      const err = e as Error & { cause?: { code?: string; message?: string } };
      return { kind: 'retry', reason: err.cause?.code ?? err.cause?.message ?? err.message };
    }
    if (res.ok) {
      await res.arrayBuffer().catch(() => undefined);
      return { kind: 'ok' };
    }
    let reason = `HTTP ${res.status}`;
    try {
      const text = (await res.text()).slice(0, 1000);
      try {
        const j = JSON.parse(text) as { reason?: unknown; error?: unknown };
        if (typeof j.reason === 'string' || typeof j.error === 'string') reason += `: ${String(j.reason ?? j.error)}`;
        else if (text) reason += `: ${text.slice(0, 200)}`;
      } catch { if (text) reason += `: ${text.slice(0, 200)}`; }
    } catch { /* body unreadable */ }
    if (res.status >= 500 || RETRY_STATUSES.has(res.status)) {
      const retryAfterMs = parseRetryAfter(res.headers.get('retry-after'));
      return retryAfterMs === undefined ? { kind: 'retry', reason } : { kind: 'retry', reason, retryAfterMs };
    }
    return { kind: 'permanent', status: res.status, reason };
  }

  async function pause(ms: number): Promise<void> {
    try { await sleep(ms, undefined, { signal: stop.signal }); } catch { /* stopped */ }
  }

  // ------------------------------------------------------------- sender
  const rejectLog = { windowStart: 0, logged: 0, suppressed: 0 };

  async function senderLoop(): Promise<void> {
    let attempt = 0;
    let limit = maxBatch;
    let failingSince: number | undefined;
    while (!stop.signal.aborted) {
      const records: QueueRecord[] = queue.peek(limit, maxBatchPayloadBytes);
      if (records.length === 0) {
        await new Promise<void>((resolve) => { wakeSender = resolve; });
        wakeSender = undefined;
        continue;
      }
      const events: AgentEvent[] = [];
      for (const r of records) {
        try {
          events.push(JSON.parse(r.payload.toString('utf8')) as AgentEvent);
        } catch {
          counters.droppedInvalid++; // cannot happen unless the disk lies past the CRC
        }
      }
      const last = records[records.length - 1] as QueueRecord;
      if (events.length === 0) { queue.ack(last.pos); continue; }
      const batch: EventBatch = { node: opts.state.nodeName, agentVersion: opts.state.agentVersion, events };
      const result = await post('/v1/events', batch);
      if (stop.signal.aborted && result.kind !== 'ok') break;
      if (result.kind === 'ok') {
        queue.ack(last.pos);
        counters.eventsSent += events.length;
        counters.batchesSent++;
        lastDeliveryAt = new Date().toISOString();
        if (failingSince !== undefined) {
          logger.info({ downForMs: Date.now() - failingSince, queueDepth: queue.depth() }, 'collector reachable again; delivering queued events');
        }
        failingSince = undefined;
        attempt = 0;
        limit = Math.min(maxBatch, limit * 2);
        continue;
      }
      if (result.kind === 'permanent') {
        if (events.length > 1) {
          limit = Math.ceil(events.length / 2);
          logger.debug({ status: result.status, reason: result.reason, batch: events.length }, 'collector refused a batch; splitting it to find the bad event');
          continue;
        }
        queue.ack(last.pos);
        counters.droppedRejected++;
        lastError = result.reason;
        // At most 10 of these lines a minute (a collector refusing everything must not flood the log).
        const nowMs = Date.now();
        if (nowMs - rejectLog.windowStart > 60_000) {
          if (rejectLog.suppressed) logger.error({ suppressed: rejectLog.suppressed }, 'more events were rejected by the collector and dropped');
          rejectLog.windowStart = nowMs; rejectLog.logged = 0; rejectLog.suppressed = 0;
        }
        if (rejectLog.logged++ < 10) {
          logger.error({ status: result.status, reason: result.reason, eventId: events[0]?.id, kind: events[0]?.kind, image: events[0]?.pull.image },
            'collector rejected an event; dropped it');
        } else {
          rejectLog.suppressed++;
        }
        limit = maxBatch;
        continue;
      }
      counters.sendFailures++;
      lastError = result.reason;
      if (failingSince === undefined) {
        failingSince = Date.now();
        logger.warn({ reason: result.reason, queueDepth: queue.depth() }, 'cannot deliver events to the collector; queueing on disk and retrying');
      } else {
        logger.debug({ reason: result.reason, attempt }, 'collector still unreachable');
      }
      const cap = Math.min(backoffMaxMs, backoffInitialMs * 2 ** Math.min(attempt, 30));
      const delay = Math.max(cap / 2 + Math.random() * (cap / 2), result.retryAfterMs ?? 0);
      attempt++;
      await pause(delay);
    }
  }

  // ------------------------------------------------------------- heartbeat
  function heartbeatBody(): Heartbeat {
    const rt = opts.state.runtime();
    const pulls = opts.state.pulls().filter((p) => IN_FLIGHT_STATES.has(p.state)).slice(0, WIRE_LIMITS.maxPullsInFlight).map(clipPull);
    const s = stats();
    const hb: Heartbeat = {
      node: opts.state.nodeName,
      agentVersion: opts.state.agentVersion,
      pullsInFlight: pulls,
      eventsDropped: s.eventsDropped,
      queueDepth: s.queueDepth,
      sourceErrors: opts.state.sourceErrors(),
      intervalSeconds: heartbeatIntervalMs / 1000,
      at: new Date().toISOString(),
    };
    if (rt) {
      hb.runtime = { name: rt.name };
      if (rt.version !== undefined) hb.runtime.version = rt.version;
      if (rt.pullDeadlineMs !== undefined) hb.runtime.pullDeadlineMs = rt.pullDeadlineMs;
    }
    return hb;
  }

  async function heartbeatLoop(): Promise<void> {
    let failing = false;
    while (!stop.signal.aborted) {
      const body = heartbeatBody();
      const check = HeartbeatSchema.safeParse(body);
      if (!check.success) {
        counters.heartbeatFailures++;
        logger.error({ reason: describeZodError(check.error) }, 'heartbeat does not match the wire schema; not sent');
      } else {
        const r = await post('/v1/heartbeat', check.data);
        if (r.kind === 'ok') {
          counters.heartbeatsSent++;
          if (failing) logger.info('heartbeat delivered again');
          failing = false;
        } else if (!stop.signal.aborted) {
          counters.heartbeatFailures++;
          if (!failing || r.kind === 'permanent') logger.warn({ reason: r.reason }, 'heartbeat not delivered');
          failing = true;
        }
      }
      await pause(heartbeatIntervalMs);
    }
  }

  // ------------------------------------------------------------- sink
  function stats(): CollectorSinkStats {
    const q = queue.stats();
    const s: CollectorSinkStats = {
      queueDepth: q.depth,
      queueBytes: q.bytes,
      eventsDropped: q.dropped + counters.droppedRejected + counters.droppedInvalid + counters.droppedEnqueueFailed,
      droppedQueueFull: q.dropped,
      droppedRejected: counters.droppedRejected,
      droppedInvalid: counters.droppedInvalid,
      droppedEnqueueFailed: counters.droppedEnqueueFailed,
      tornRecords: q.torn,
      corruptRegions: q.corrupt,
      eventsSent: counters.eventsSent,
      batchesSent: counters.batchesSent,
      sendFailures: counters.sendFailures,
      heartbeatsSent: counters.heartbeatsSent,
      heartbeatFailures: counters.heartbeatFailures,
    };
    if (lastError !== undefined) s.lastError = lastError;
    if (lastDeliveryAt !== undefined) s.lastDeliveryAt = lastDeliveryAt;
    return s;
  }

  return {
    name: 'collector',
    handle(transition: Transition): void {
      enqueue(transition);
    },
    handleCapture(transition: Transition, capture: Record<string, unknown>): void {
      enqueue(transition, capture);
    },
    start(): void {
      if (started || closing) return;
      started = true;
      logger.info({ queueDir: opts.queueDir, queued: queue.depth() }, 'collector client started');
      senderDone = senderLoop().catch((e: unknown) => { logger.error({ err: (e as Error).message }, 'collector sender stopped by an error'); });
      heartbeatDone = heartbeatLoop().catch((e: unknown) => { logger.error({ err: (e as Error).message }, 'heartbeat loop stopped by an error'); });
    },
    stats,
    close,
  };

  function enqueue(transition: Transition, capture?: Record<string, unknown>): void {
    if (closing) return;
    try {
      const event = transitionToEvent(transition);
      const parsed = AgentEventSchema.safeParse(capture ? { ...event, capture } : event);
      if (!parsed.success) {
        counters.droppedInvalid++;
        logger.error({ reason: describeZodError(parsed.error), image: transition.pull.image, kind: transition.kind },
          'pull transition does not match the wire schema; not queued');
        return;
      }
      queue.append(JSON.stringify(parsed.data));
    } catch (e) {
      counters.droppedEnqueueFailed++;
      logger.error({ err: (e as Error).message, image: transition.pull.image }, 'cannot queue event for the collector');
      return;
    }
    wakeSender?.();
  }

  async function close(): Promise<void> {
    if (closing) return;
    closing = true;
    // Let a request in flight finish (so its ack is recorded), then stop; cut it after 2 s.
    stop.abort();
    wakeSender?.();
    const grace = setTimeout(() => hardStop.abort(), 2000);
    await Promise.race([Promise.all([senderDone, heartbeatDone]), sleep(3000, undefined, { ref: false })]);
    clearTimeout(grace);
    hardStop.abort();
    await queue.close();
  }
}
