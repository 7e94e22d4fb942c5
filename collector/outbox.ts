/**
 * Delivers outbox rows: lease a batch (FOR UPDATE SKIP LOCKED on PostgreSQL), send each through its
 * notifier, then mark it sent, schedule a retry (exponential backoff with full jitter; 5xx, 408,
 * 429, network) or dead-letter it (other 4xx, unknown notifier, too many attempts). Rows survive
 * restarts: an unfinished lease simply expires and the row is sent by whoever leases it next.
 */
import { setMaxListeners } from 'node:events';
import type { Logger } from '../common/log.js';
import type { CollectorMetrics } from './metrics.js';
import type { Notifier } from './notifiers/notifier.js';
import type { OutboxRow, Store } from './store/store.js';

export interface OutboxOptions {
  owner: string;
  pollMs: number;
  leaseMs: number;
  batch: number;
  baseBackoffMs: number;
  maxBackoffMs: number;
  maxAttempts: number;
  random?: () => number;
}

export const DEFAULT_OUTBOX: Omit<OutboxOptions, 'owner'> = {
  pollMs: 500, leaseMs: 60_000, batch: 32, baseBackoffMs: 1000, maxBackoffMs: 5 * 60_000, maxAttempts: 60,
};

/** Full-jitter backoff: uniformly between half and all of min(max, base·2^(attempt-1)). */
export function backoffMs(attempt: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.max(0, Math.min(attempt - 1, 30)));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

export class OutboxWorker {
  private timer: NodeJS.Timeout | null = null;
  private pumping = false;
  private again = false;
  /** Rows may be waiting that we have not tried to lease (new rows, or the last lease was full). */
  private more = true;
  private stopped = false;
  private readonly inflight = new Set<Promise<void>>();
  private readonly abort = new AbortController();

  constructor(
    private readonly store: Store,
    private readonly notifiers: Map<string, Notifier>,
    private readonly opts: OutboxOptions,
    private readonly metrics: CollectorMetrics,
    private readonly log: Logger,
  ) {
    // every in-flight request listens on the shutdown signal
    setMaxListeners(opts.batch * 2 + 16, this.abort.signal);
  }

  start(): void { this.tickSoon(0); }

  /** New rows were written: look now instead of at the next poll. */
  wake(): void { this.more = true; void this.pump(); }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.soon) clearTimeout(this.soon);
    this.abort.abort();
    await Promise.allSettled([...this.inflight]);
  }

  private soon: NodeJS.Timeout | null = null;
  /** Coalesces the re-leases after deliveries finish (one store query for many completions). */
  private pumpSoon(): void {
    if (this.soon || this.stopped) return;
    this.soon = setTimeout(() => { this.soon = null; void this.pump(); }, 5);
  }

  private tickSoon(ms: number): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => { this.timer = null; this.more = true; void this.pump().finally(() => this.tickSoon(this.opts.pollMs)); }, ms);
    this.timer.unref?.();
  }

  /**
   * Leases due rows while there is room for more deliveries in flight; deliveries run concurrently
   * (a slow receiver does not hold back the others). Per (notifier, incident) order is kept by the
   * store: a later row is not leasable while an earlier one is pending.
   */
  private async pump(): Promise<void> {
    if (this.stopped) return;
    if (this.pumping) { this.again = true; return; }
    this.pumping = true;
    try {
      for (;;) {
        this.again = false;
        const room = this.opts.batch - this.inflight.size;
        if (room <= 0 || this.stopped || !this.more) break;
        this.more = false;
        const rows = await this.store.claimOutbox(this.opts.owner, Date.now(), this.opts.leaseMs, room);
        // a full lease may have left rows behind; a delivery finishing may unblock the incident's next row
        if (rows.length === room) this.more = true;
        for (const r of rows) {
          const p: Promise<void> = this.deliver(r)
            .catch((e) => { this.log.warn({ err: (e as Error).message, notifier: r.notifier }, 'outbox: could not record a delivery result'); })
            .finally(() => { this.inflight.delete(p); this.more = true; this.pumpSoon(); });
          this.inflight.add(p);
        }
        if (!rows.length && !this.again) break;
      }
    } catch (e) {
      this.log.warn({ err: (e as Error).message }, 'outbox: store error; will retry');
    } finally {
      this.pumping = false;
    }
  }

  /** Leases and sends one batch and waits for it; returns how many rows it handled (tests). */
  async drainOnce(): Promise<number> {
    const rows = await this.store.claimOutbox(this.opts.owner, Date.now(), this.opts.leaseMs, this.opts.batch);
    await Promise.all(rows.map((r) => this.deliver(r)));
    return rows.length;
  }

  private async deliver(row: OutboxRow): Promise<void> {
    const n = this.notifiers.get(row.notifier);
    const ctx = { notifier: row.notifier, incident: row.incidentId, notice: row.notice.id, type: row.notice.type, attempt: row.attempts };
    if (!n) {
      this.metrics.notificationsFailed.inc({ notifier: row.notifier, outcome: 'dead' });
      this.log.error(ctx, 'outbox: notifier no longer configured; dead-lettered');
      await this.store.completeOutbox(row.id, this.opts.owner, { status: 'dead', error: 'notifier not configured' }, Date.now());
      return;
    }
    const out = await n.send(row.notice, this.abort.signal);
    if (this.stopped && !out.ok) return; // shutting down: the lease expires and someone retries
    const now = Date.now();
    if (out.ok) {
      this.metrics.notificationsSent.inc({ notifier: row.notifier });
      this.log.info({ ...ctx, status: out.status }, 'notification delivered');
      await this.store.completeOutbox(row.id, this.opts.owner, { status: 'sent' }, now);
    } else if (out.retry && row.attempts < this.opts.maxAttempts) {
      const delay = Math.max(out.retryAfterMs ?? 0, backoffMs(row.attempts, this.opts.baseBackoffMs, this.opts.maxBackoffMs, this.opts.random));
      this.metrics.notificationsFailed.inc({ notifier: row.notifier, outcome: 'retry' });
      this.log.warn({ ...ctx, error: out.error, retryInMs: delay }, 'notification failed; will retry');
      await this.store.completeOutbox(row.id, this.opts.owner, { status: 'retry', nextAttemptMs: now + delay, error: out.error }, now);
    } else {
      this.metrics.notificationsFailed.inc({ notifier: row.notifier, outcome: 'dead' });
      this.log.error({ ...ctx, error: out.error }, 'notification rejected; dead-lettered');
      await this.store.completeOutbox(row.id, this.opts.owner, { status: 'dead', error: out.error }, now);
    }
  }
}
