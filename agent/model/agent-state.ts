import type { RuntimeInfo } from './observations.js';
import type { PullRecord } from './pulls.js';

/** Read-only view of a running agent, for sinks that report periodically (collector heartbeats, capture). */
export interface AgentState {
  readonly nodeName: string;
  readonly agentVersion: string;
  /** Pulls in flight and recently finished, newest first. */
  pulls(): PullRecord[];
  runtime(): RuntimeInfo | undefined;
  /** Total source errors counted so far (all causes). */
  sourceErrors(): number;
}
