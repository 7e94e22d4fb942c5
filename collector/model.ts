/**
 * Collector-side shapes: incidents, notices (what notifiers are told), nodes and stored rows.
 * Times in these objects are ISO strings (they are what the read API returns).
 */
import type { PodRef, PullState, TransitionKind } from '../agent/model/pulls.js';
import type { RuntimeName } from '../agent/model/observations.js';

export type IncidentKind = 'pull-stall' | 'registry' | 'agent-down';
export type IncidentState = 'open' | 'resolved';

/** One (node, image) pull that is part of an incident. */
export interface IncidentMember {
  node: string;
  image: string;
  pullId: string;
  state: PullState;
  lastEvent: TransitionKind;
  bytesDone: number;
  bytesTotal: number | null;
  /** When bytes last arrived (the agent's lastProgressAt). */
  lastProgressAt: string;
  pods: PodRef[];
  runtime: { name: RuntimeName; version?: string };
  /** The runtime's pull deadline (ms): null = none, undefined = unknown. */
  runtimeDeadlineMs?: number | null;
  /** What the agent recommends (from the event's capture), when known. */
  recommendation?: string;
  /** Still stalled (false once resumed/completed, while the incident waits out flap suppression). */
  active: boolean;
}

export interface Incident {
  id: string;
  kind: IncidentKind;
  /** Grouping key: "pull-stall:<node>|<image>", "registry:<registry>", "agent-down:<node>". */
  key: string;
  state: IncidentState;
  openedAt: string;
  updatedAt: string;
  resolvedAt?: string;
  /** Set while a resolve waits out the flap window; a re-stall before it ends continues the incident. */
  resolvingSince?: string;
  /** Node incidents grouped into a registry incident carry its id (no separate alerts). */
  absorbedBy?: string;
  registry?: string;
  image?: string;
  node?: string;
  nodes: string[];
  members: IncidentMember[];
  /** Human one-liner. */
  summary: string;
  /** Why it resolved (resumed, completed, absorbed into registry incident, heartbeat back…). */
  resolution?: string;
  /** Sequence of notices emitted (1 = firing). */
  noticeSeq: number;
  lastNoticeAt?: string;
  /** Something changed since the last notice (updates are throttled). */
  pendingUpdate?: boolean;
}

export type NoticeType = 'firing' | 'update' | 'resolved';

/** What the engine asks notifiers to say. Stored in the outbox, formatted per notifier at send time. */
export interface Notice {
  type: NoticeType;
  /** Unique per incident: `${incident.id}:${seq}`. */
  id: string;
  at: string;
  incident: Incident;
}

export interface NodeRuntime { name: RuntimeName; version?: string; pullDeadlineMs?: number | null }

export interface NodeInfo {
  node: string;
  agentVersion: string;
  lastHeartbeatAt: string;
  intervalSeconds: number;
  runtime?: NodeRuntime;
  /** true when the runtime has a pull-progress deadline that fires (> 0); null when unknown. */
  runtimeHasDeadline: boolean | null;
  pullsInFlight: number;
  eventsDropped: number;
  queueDepth: number;
  sourceErrors: number;
  /** 'down' when 3 heartbeat intervals were missed. */
  status: 'up' | 'down';
}

export interface StallBucket { hour: string; registry: string; stalls: number }
