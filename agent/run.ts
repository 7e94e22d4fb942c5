import type { Logger } from '../common/log.js';
import type { PullRecord } from './model/pulls.js';

/** Options of `pullwatch agent` (and of the agent inside `pullwatch start`). Durations in ms. */
export interface AgentOptions {
  hostRoot: string;
  containerdRoot?: string;
  containerdSocket?: string;
  dockerRoot?: string;
  dockerSocket?: string;
  /** "journal", "journal:DIR" or "file:PATH" entries. */
  logSources: string[];
  stallAfterMs: number;
  slowBelowBytesPerSecond: number;
  pollMs: number;
  collector?: string;
  tokenFile?: string;
  queueDir?: string;
  /** host:port; port 0 picks a free one. */
  listen: string;
  nodeName: string;
  kube: 'auto' | 'off';
}

export interface RunningAgent {
  /** http://host:port of /healthz, /metrics, /v1/pulls. */
  readonly url: string;
  readonly nodeName: string;
  pulls(): PullRecord[];
  stop(): Promise<void>;
}

/** Starts sources → detector → sinks. (Being built by the lead; signature is stable.) */
export async function startAgent(_opts: AgentOptions, _logger: Logger): Promise<RunningAgent> {
  throw new Error('agent not built yet');
}
