import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { PullTracker } from '../detector/pull-tracker.js';
import type { Transition } from '../model/pulls.js';
import type { SourceHealth } from '../sources/health.js';
import type { Sink } from './sink.js';

/**
 * Prometheus metrics of the agent. Gauges are computed from the tracker at scrape time; counters
 * and the duration histogram are fed by transitions.
 */
export function createMetrics(tracker: PullTracker, health: SourceHealth, nodeName: string): { registry: Registry; sink: Sink } {
  const registry = new Registry();
  registry.setDefaultLabels({ node: nodeName });
  collectDefaultMetrics({ register: registry, prefix: 'pullwatch_agent_' });

  new Gauge({
    name: 'pullwatch_pulls_in_flight', help: 'Image pulls in flight on this node, by state.', labelNames: ['state'], registers: [registry],
    collect() {
      this.reset();
      for (const r of tracker.records()) this.inc({ state: r.state });
    },
  });
  new Gauge({
    name: 'pullwatch_stalled_pulls', help: 'Pulls with no byte progress for --stall-after, by registry.', labelNames: ['registry'], registers: [registry],
    collect() {
      this.reset();
      for (const r of tracker.records()) if (r.state === 'stalled') this.inc({ registry: r.registry || 'unknown' });
    },
  });
  const lastBytes = new Map<string, number>();
  const bytes = new Counter({
    name: 'pullwatch_bytes_received_total', help: 'Blob bytes seen arriving in pulls on this node.', labelNames: ['registry'], registers: [registry],
    collect() {
      const live = new Set<string>();
      for (const r of tracker.records()) {
        live.add(r.id);
        const prev = lastBytes.get(r.id) ?? 0;
        if (r.bytesDone > prev) this.inc({ registry: r.registry || 'unknown' }, r.bytesDone - prev);
        lastBytes.set(r.id, r.bytesDone);
      }
      for (const id of lastBytes.keys()) if (!live.has(id)) lastBytes.delete(id);
    },
  });
  void bytes;
  const transitions = new Counter({
    name: 'pullwatch_pull_transitions_total', help: 'Pull state transitions, by kind (stalled, slow, resumed, cancelled, …).',
    labelNames: ['kind', 'registry'], registers: [registry],
  });
  const stalls = new Counter({ name: 'pullwatch_stalls_total', help: 'Pulls that stalled.', labelNames: ['registry'], registers: [registry] });
  const cancels = new Counter({
    name: 'pullwatch_runtime_cancels_total', help: 'Pulls cancelled by the runtime for lack of progress.', labelNames: ['runtime'], registers: [registry],
  });
  const duration = new Histogram({
    name: 'pullwatch_pull_duration_seconds', help: 'Duration of finished pulls, by outcome.', labelNames: ['outcome'],
    buckets: [1, 5, 15, 30, 60, 120, 300, 600, 1200, 3600], registers: [registry],
  });
  const sourceErrors = new Counter({
    name: 'pullwatch_source_errors_total', help: 'Bad or unreadable input met by sources, by source and cause.',
    labelNames: ['source', 'cause'], registers: [registry],
  });
  health.onReport((source, cause) => sourceErrors.inc({ source, cause }));

  const sink: Sink = {
    name: 'metrics',
    handle(t: Transition): void {
      if (t.from === t.to) return; // a state announced again for newly waiting pods
      const registryLabel = t.pull.registry || 'unknown';
      transitions.inc({ kind: t.kind, registry: registryLabel });
      if (t.kind === 'stalled') stalls.inc({ registry: registryLabel });
      if (t.kind === 'cancelled') cancels.inc({ runtime: t.pull.runtime.name });
      if (t.pull.finishedAt && t.pull.durationMs !== undefined) duration.observe({ outcome: t.pull.state }, t.pull.durationMs / 1000);
    },
  };
  return { registry, sink };
}
