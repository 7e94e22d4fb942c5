/** Row ↔ object mapping shared by both stores (pg returns BIGINT as strings: Number() them). */
import type { AgentEvent, Heartbeat } from '../../common/wire.js';
import { parseImageRef } from '../../common/image-ref.js';
import type { Incident, NodeInfo, NodeRuntime } from '../model.js';
import type { EngineState } from '../incidents.js';
import type { PullRecord } from '../../agent/model/pulls.js';

export interface EventRowIn {
  node: string; event_id: string; at_ms: number; received_ms: number; kind: string; registry: string;
  image: string; pull_id: string; agent_version: string; body: string;
}

export function eventRow(node: string, agentVersion: string, ev: AgentEvent, receivedMs: number): EventRowIn {
  const at = Date.parse(ev.at);
  return {
    node, event_id: ev.id, at_ms: Number.isFinite(at) ? at : receivedMs, received_ms: receivedMs, kind: ev.kind,
    registry: ev.pull.registry || parseImageRef(ev.pull.image).registry, image: ev.pull.image, pull_id: ev.pull.id,
    agent_version: agentVersion, body: JSON.stringify(ev),
  };
}

export interface PullRowIn { node: string; pull_id: string; updated_ms: number; seen_ms: number; state: string; body: string }

export function pullRow(node: string, pull: PullRecord, seenMs: number): PullRowIn {
  const u = Date.parse(pull.updatedAt);
  return { node, pull_id: pull.id, updated_ms: Number.isFinite(u) ? u : seenMs, seen_ms: seenMs, state: pull.state, body: JSON.stringify(pull) };
}

/** Latest pull per id within one batch (an upsert may not touch a row twice in one statement). */
export function latestPulls(node: string, pulls: PullRecord[], seenMs: number): PullRowIn[] {
  const by = new Map<string, PullRowIn>();
  for (const p of pulls) {
    const r = pullRow(node, p, seenMs);
    const prev = by.get(r.pull_id);
    if (!prev || r.updated_ms >= prev.updated_ms) by.set(r.pull_id, r);
  }
  return [...by.values()];
}

export interface NodeRowIn {
  node: string; agent_version: string; last_heartbeat_ms: number; interval_s: number; runtime: string | null;
  pulls_in_flight: number; events_dropped: number; queue_depth: number; source_errors: number;
}

export function nodeRow(hb: Heartbeat, receivedMs: number): NodeRowIn {
  return {
    node: hb.node, agent_version: hb.agentVersion, last_heartbeat_ms: receivedMs, interval_s: hb.intervalSeconds,
    runtime: hb.runtime ? JSON.stringify(hb.runtime) : null,
    pulls_in_flight: hb.pullsInFlight.filter((p) => !['completed', 'failed', 'cancelled-by-runtime'].includes(p.state)).length,
    events_dropped: hb.eventsDropped, queue_depth: hb.queueDepth, source_errors: hb.sourceErrors,
  };
}

export interface NodeRowOut {
  node: string; agent_version: string; last_heartbeat_ms: number | string; interval_s: number | string;
  runtime: string | null; pulls_in_flight: number | string; events_dropped: number | string;
  queue_depth: number | string; source_errors: number | string;
}

export function nodeInfo(r: NodeRowOut, nowMs: number, missed: number): NodeInfo {
  const runtime = r.runtime ? (JSON.parse(r.runtime) as NodeRuntime) : undefined;
  const last = Number(r.last_heartbeat_ms);
  const interval = Number(r.interval_s);
  const d = runtime?.pullDeadlineMs;
  const info: NodeInfo = {
    node: r.node, agentVersion: r.agent_version, lastHeartbeatAt: new Date(last).toISOString(), intervalSeconds: interval,
    runtimeHasDeadline: d === undefined ? null : d !== null && d > 0,
    pullsInFlight: Number(r.pulls_in_flight), eventsDropped: Number(r.events_dropped), queueDepth: Number(r.queue_depth),
    sourceErrors: Number(r.source_errors), status: last + interval * 1000 * missed < nowMs ? 'down' : 'up',
  };
  if (runtime) info.runtime = runtime;
  return info;
}

export interface IncidentRowIn { id: string; kind: string; key: string; state: string; opened_ms: number; updated_ms: number; resolved_ms: number | null; body: string }

export function incidentRow(inc: Incident): IncidentRowIn {
  return {
    id: inc.id, kind: inc.kind, key: inc.key, state: inc.state, opened_ms: Date.parse(inc.openedAt),
    updated_ms: Date.parse(inc.updatedAt), resolved_ms: inc.resolvedAt ? Date.parse(inc.resolvedAt) : null,
    body: JSON.stringify(inc),
  };
}

/** Full-jitter-free helper for tests and stores: JSON.parse with a typed result. */
export function parseJson<T>(text: string): T { return JSON.parse(text) as T; }

/** The engine state row: everything but the open incidents, which are rows of their own table. */
export function persistedState(state: EngineState): string {
  return JSON.stringify({ ...state, incidents: [] });
}
