import type { SourceContext } from '../source.js';
import { LogCorrelator } from './correlate.js';
import type { ParsedLogLine } from './parse/types.js';

/** Turns parsed lines into `log` observations for one source; never throws into the reader. */
export class LogEmitter {
  private readonly correlator = new LogCorrelator();
  /** Observations emitted so far (tests, benches, /metrics). */
  emitted = 0;

  constructor(private readonly source: string, private readonly ctx: SourceContext) {}

  emit(parsed: ParsedLogLine | null): void {
    if (!parsed) return;
    const p = this.correlator.apply(parsed);
    if (!p) {
      this.ctx.health.report(this.source, 'unattributed-line', `${parsed.component} ${parsed.event.type} line names no image and matches no pull in flight`);
      return;
    }
    try {
      this.ctx.emit({ kind: 'log', at: p.at, source: this.source, event: p.event });
      this.emitted++;
    } catch (err) {
      this.ctx.health.report(this.source, 'emit-failed', err);
    }
  }
}
