import type { Observation } from '../model/observations.js';
import type { SourceHealth } from './health.js';
import type { Logger } from '../../common/log.js';

export type Emit = (observation: Observation) => void;

/** Everything a source gets from the agent: where to send observations, how to report trouble. */
export interface SourceContext {
  emit: Emit;
  health: SourceHealth;
  logger: Logger;
  /** Injected clock (epoch ms); tests and benches may replace it. */
  now: () => number;
}

/**
 * A source turns one kind of evidence (ingest dirs, temp files, log lines, the pod list) into
 * observations. It never throws out of start()/stop() for bad input: it reports through
 * ctx.health and keeps going.
 */
export interface Source {
  readonly name: string;
  start(ctx: SourceContext): Promise<void>;
  stop(): Promise<void>;
}
