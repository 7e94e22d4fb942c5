/** The collector's Prometheus metrics (one registry per collector instance). */
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { Store } from './store/store.js';

export type RejectReason =
  | 'unauthenticated' | 'invalid_json' | 'invalid_body' | 'too_large' | 'unsupported_media_type' | 'rate_limited' | 'store_unavailable';

export interface CollectorMetrics {
  registry: Registry;
  eventsIngested: Counter<string>;
  eventsDuplicate: Counter<string>;
  heartbeats: Counter<string>;
  rejected: Counter<'reason'>;
  incidentsOpened: Counter<'kind'>;
  notificationsSent: Counter<'notifier'>;
  notificationsFailed: Counter<'notifier' | 'outcome'>;
}

export function createMetrics(store: Store, opts: { defaultMetrics?: boolean } = {}): CollectorMetrics {
  const registry = new Registry();
  if (opts.defaultMetrics !== false) collectDefaultMetrics({ register: registry, prefix: 'pullwatch_collector_' });
  const m: CollectorMetrics = {
    registry,
    eventsIngested: new Counter({ name: 'pullwatch_collector_events_ingested_total', help: 'Agent events stored (first time seen).', registers: [registry] }),
    eventsDuplicate: new Counter({ name: 'pullwatch_collector_events_duplicate_total', help: 'Agent events ignored because their id was already stored.', registers: [registry] }),
    heartbeats: new Counter({ name: 'pullwatch_collector_heartbeats_total', help: 'Agent heartbeats received.', registers: [registry] }),
    rejected: new Counter({ name: 'pullwatch_collector_requests_rejected_total', help: 'Ingest requests rejected, by reason.', labelNames: ['reason'], registers: [registry] }),
    incidentsOpened: new Counter({ name: 'pullwatch_collector_incidents_opened_total', help: 'Incidents opened, by kind.', labelNames: ['kind'], registers: [registry] }),
    notificationsSent: new Counter({ name: 'pullwatch_collector_notifications_sent_total', help: 'Notifications delivered, by notifier.', labelNames: ['notifier'], registers: [registry] }),
    notificationsFailed: new Counter({ name: 'pullwatch_collector_notifications_failed_total', help: 'Failed delivery attempts, by notifier and outcome (retry|dead).', labelNames: ['notifier', 'outcome'], registers: [registry] }),
  };
  for (const r of ['unauthenticated', 'invalid_json', 'invalid_body', 'too_large', 'unsupported_media_type', 'rate_limited', 'store_unavailable']) m.rejected.inc({ reason: r }, 0);
  new Gauge({
    name: 'pullwatch_collector_incidents_open', help: 'Open incidents, by kind.', labelNames: ['kind'], registers: [registry],
    async collect() {
      const open = await store.listIncidents({ state: 'open', limit: 1000 }).catch(() => null);
      if (!open) return;
      for (const k of ['pull-stall', 'registry', 'agent-down']) this.set({ kind: k }, open.filter((i) => i.kind === k).length);
    },
  });
  new Gauge({
    name: 'pullwatch_collector_outbox_depth', help: 'Notifications waiting in the outbox (pending), and dead-lettered.', labelNames: ['status'], registers: [registry],
    async collect() {
      const s = await store.outboxStats().catch(() => null);
      if (!s) return;
      this.set({ status: 'pending' }, s.pending);
      this.set({ status: 'dead' }, s.dead);
    },
  });
  return m;
}
