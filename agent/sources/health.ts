import type { Logger } from '../../common/log.js';

export interface SourceErrorCount { source: string; cause: string; count: number; lastMessage: string }

/**
 * Bad input is reported here, never thrown: a warning is logged once per (source, cause) and every
 * occurrence is counted (exported as pullwatch_source_errors_total{source,cause}).
 */
export class SourceHealth {
  private readonly counts = new Map<string, SourceErrorCount>();
  private listeners: Array<(source: string, cause: string) => void> = [];

  constructor(private readonly logger: Logger) {}

  report(source: string, cause: string, err: unknown): void {
    const key = `${source}\u0000${cause}`;
    const message = err instanceof Error ? err.message : String(err);
    const entry = this.counts.get(key);
    if (entry) {
      entry.count++;
      entry.lastMessage = message;
    } else {
      this.counts.set(key, { source, cause, count: 1, lastMessage: message });
      this.logger.warn({ source, cause, err: message }, 'source problem (further ones of this cause are counted, not logged)');
    }
    for (const l of this.listeners) l(source, cause);
  }

  onReport(listener: (source: string, cause: string) => void): void {
    this.listeners.push(listener);
  }

  snapshot(): SourceErrorCount[] {
    return [...this.counts.values()].map((e) => ({ ...e }));
  }
}
