/**
 * The collector's persistence seam. Two implementations share one behaviour (and one test suite):
 * SQLite (embedded, one collector process) and PostgreSQL (several replicas on one database).
 * All times cross this interface as epoch milliseconds or ISO strings in JSON documents.
 */
import type { AgentEvent, Heartbeat } from '../../common/wire.js';
import type { Incident, NodeInfo, Notice, StallBucket } from '../model.js';
import type { EngineState, OverdueNode } from '../incidents.js';
import type { PullRecord } from '../../agent/model/pulls.js';

export interface StoredEvent { seq: number; node: string; receivedMs: number; event: AgentEvent }

export interface InsertResult { accepted: number; duplicates: number }

/** Input to one incident-processing step, inside the store's transaction (and lock on PG). */
export interface ProcessInput {
  events: StoredEvent[];
  state: EngineState | null;
  /** Nodes that missed `missedHeartbeats` intervals. */
  overdue: OverdueNode[];
}

export interface OutboxInsert { notifier: string; notice: Notice }

export interface ProcessOutput {
  state: EngineState;
  incidents: Incident[];
  outbox: OutboxInsert[];
}

export interface OutboxRow {
  id: number;
  notifier: string;
  incidentId: string;
  notice: Notice;
  attempts: number;
  createdMs: number;
}

export type OutboxResult =
  | { status: 'sent' }
  | { status: 'retry'; nextAttemptMs: number; error: string }
  | { status: 'dead'; error: string };

export interface OutboxStats { pending: number; sent: number; dead: number }

export interface PullView { node: string; updatedMs: number; pull: PullRecord }

export interface RetentionResult { events: number; incidents: number; outbox: number; nodes: number; pulls: number }

export interface Store {
  readonly kind: 'sqlite' | 'postgres';
  /** Applies pending schema migrations (safe when several replicas start at once). */
  migrate(): Promise<void>;
  /** Inserts events; repeats of (node, id) are ignored and counted as duplicates. */
  insertEvents(node: string, agentVersion: string, events: AgentEvent[], receivedMs: number): Promise<InsertResult>;
  recordHeartbeat(hb: Heartbeat, receivedMs: number): Promise<void>;
  /**
   * One step of incident processing: the unprocessed events (oldest first, up to `limit`), the saved
   * engine state and the overdue nodes go to `fn`; its state, incidents and outbox rows are saved and
   * the events marked processed, atomically. Returns null when another replica holds the lock,
   * else the number of events processed.
   */
  processIncidents(opts: { nowMs: number; missedHeartbeats: number; limit: number }, fn: (input: ProcessInput) => ProcessOutput): Promise<number | null>;
  /** Leases up to `limit` due outbox rows (per incident and notifier, only the oldest pending one). */
  claimOutbox(owner: string, nowMs: number, leaseMs: number, limit: number): Promise<OutboxRow[]>;
  completeOutbox(id: number, owner: string, result: OutboxResult, nowMs: number): Promise<void>;
  outboxStats(): Promise<OutboxStats>;
  listIncidents(q: { state?: 'open' | 'resolved'; limit?: number }): Promise<Incident[]>;
  listNodes(nowMs: number, missedHeartbeats: number): Promise<NodeInfo[]>;
  /** Pulls in flight (non-terminal), newest first. */
  listPulls(limit?: number): Promise<PullView[]>;
  stallStats(sinceMs: number): Promise<StallBucket[]>;
  countEvents(): Promise<number>;
  eventIds(node?: string): Promise<string[]>;
  retention(nowMs: number, retentionMs: number): Promise<RetentionResult>;
  ping(): Promise<void>;
  close(): Promise<void>;
}

export const TERMINAL_PULL_STATES = ['completed', 'failed', 'cancelled-by-runtime'] as const;
export const STALL_KINDS = ['stalled', 'cancelled'] as const;
