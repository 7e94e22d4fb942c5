import type { Logger } from '../common/log.js';
import type { PullTracker } from './detector/pull-tracker.js';
import type { Observation } from './model/observations.js';
import type { Transition } from './model/pulls.js';
import type { SourceHealth } from './sources/health.js';
import type { Source } from './sources/source.js';
import type { Sink } from './sinks/sink.js';

export interface PipelineOptions {
  tracker: PullTracker;
  sources: Source[];
  sinks: Sink[];
  health: SourceHealth;
  logger: Logger;
  /** How often time-based states (stalled, slow) are re-evaluated. */
  tickMs: number;
  now: () => number;
}

/**
 * sources → detector → sinks. Observations go through the tracker; each transition goes to every
 * sink. A throwing sink or source is logged and counted, never allowed to stop the others.
 */
export class AgentPipeline {
  private timer: NodeJS.Timeout | undefined;
  private readonly started: Source[] = [];
  private observed = 0;

  constructor(private readonly o: PipelineOptions) {}

  get observations(): number { return this.observed; }

  async start(): Promise<void> {
    for (const source of this.o.sources) {
      try {
        await source.start({
          emit: (obs) => this.observe(obs),
          health: this.o.health,
          logger: this.o.logger.child({ source: source.name }),
          now: this.o.now,
        });
        this.started.push(source);
      } catch (err) {
        this.o.health.report(source.name, 'start-failed', err);
      }
    }
    this.timer = setInterval(() => this.dispatch(this.o.tracker.tick()), this.o.tickMs);
    this.timer.unref();
  }

  observe(obs: Observation): void {
    this.observed++;
    let transitions: Transition[];
    try {
      transitions = this.o.tracker.observe(obs);
    } catch (err) {
      this.o.health.report('detector', 'observation-rejected', err);
      return;
    }
    this.dispatch(transitions);
  }

  private dispatch(transitions: Transition[]): void {
    for (const t of transitions) {
      for (const sink of this.o.sinks) {
        try {
          sink.handle(t);
        } catch (err) {
          this.o.health.report(`sink:${sink.name}`, 'handle-failed', err);
        }
      }
    }
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    for (const source of this.started.reverse()) {
      try { await source.stop(); } catch (err) { this.o.logger.warn({ err, source: source.name }, 'source stop failed'); }
    }
    for (const sink of this.o.sinks) {
      try { await sink.close?.(); } catch (err) { this.o.logger.warn({ err, sink: sink.name }, 'sink close failed'); }
    }
  }
}
