/**
 * Alertmanager API v2: POST <base>/api/v2/alerts with a list of postable alerts
 * ({labels, annotations, startsAt, endsAt, generatorURL}). Labels identify the alert and stay the
 * same for its whole life; resolve sends endsAt = resolve time. Firing alerts carry endsAt 24h
 * ahead so Alertmanager does not auto-resolve them after resolve_timeout while the stall lasts.
 */
import type { Notice } from '../model.js';
import { incidentFacts } from './facts.js';
import { post, type DeliveryOutcome, type HttpTarget, type Notifier } from './notifier.js';

export interface PostableAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  startsAt: string;
  endsAt: string;
  generatorURL?: string;
}

const ALERTNAME = { 'pull-stall': 'PullwatchPullStalled', registry: 'PullwatchRegistryStalled', 'agent-down': 'PullwatchAgentDown' } as const;
const FIRING_HOLD_MS = 24 * 3_600_000;

export function alertmanagerAlerts(notice: Notice, generatorURL?: string): PostableAlert[] {
  const inc = notice.incident;
  const f = incidentFacts(notice);
  const labels: Record<string, string> = {
    alertname: ALERTNAME[inc.kind], severity: inc.kind === 'pull-stall' ? 'warning' : 'critical',
    source: 'pullwatch', incident_id: inc.id,
  };
  if (inc.registry) labels.registry = inc.registry;
  if (inc.node) labels.node = inc.node;
  if (inc.image) labels.image = inc.image;
  const annotations: Record<string, string> = {
    summary: inc.summary,
    description: [
      f.images.length ? `image: ${f.images.slice(0, 5).join(', ')}` : '',
      `nodes (${f.nodeCount}): ${f.nodes.join(', ')}`,
      inc.kind !== 'agent-down' ? `bytes: ${f.bytesText}; stalled for ${f.stalledForText}` : '',
      f.pods.length ? `waiting pods: ${f.pods.join(', ')}` : '',
      inc.kind !== 'agent-down' ? `runtime deadline: ${f.deadlineText}` : '',
      f.recommendation ? `recommended: ${f.recommendation}` : '',
    ].filter(Boolean).join('\n'),
  };
  if (inc.resolution && notice.type === 'resolved') annotations.resolution = inc.resolution;
  const endsAt = notice.type === 'resolved' ? (inc.resolvedAt ?? notice.at) : new Date(Date.parse(notice.at) + FIRING_HOLD_MS).toISOString();
  return [{ labels, annotations, startsAt: inc.openedAt, endsAt, ...(generatorURL ? { generatorURL } : {}) }];
}

export class AlertmanagerNotifier implements Notifier {
  readonly kind = 'alertmanager' as const;
  private readonly target: HttpTarget;
  constructor(readonly name: string, base: HttpTarget, private readonly generatorURL?: string) {
    const url = base.url.replace(/\/+$/, '');
    this.target = { ...base, url: url.endsWith('/api/v2/alerts') ? url : `${url}/api/v2/alerts` };
  }
  send(notice: Notice, signal?: AbortSignal): Promise<DeliveryOutcome> {
    return post(this.target, JSON.stringify(alertmanagerAlerts(notice, this.generatorURL)), {}, signal);
  }
}
