/**
 * Slack incoming webhook (https://api.slack.com/messaging/webhooks): POST {text, blocks} with Block
 * Kit. `text` is the notification fallback. The webhook URL is the secret: never logged.
 */
import type { Notice } from '../model.js';
import { incidentFacts } from './facts.js';
import { post, type DeliveryOutcome, type HttpTarget, type Notifier } from './notifier.js';

type Text = { type: 'mrkdwn' | 'plain_text'; text: string };
export type SlackBlock =
  | { type: 'header'; text: Text }
  | { type: 'section'; text?: Text; fields?: Text[] }
  | { type: 'context'; elements: Text[] };
export interface SlackMessage { text: string; blocks: SlackBlock[] }

const clip = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);
const code = (s: string) => `\`${s.replace(/`/g, "'")}\``;
const field = (label: string, value: string): Text => ({ type: 'mrkdwn', text: clip(`*${label}*\n${value}`, 1900) });

export function slackMessage(notice: Notice, dashboardUrl?: string): SlackMessage {
  const f = incidentFacts(notice);
  const inc = notice.incident;
  const fields: Text[] = [];
  if (f.images.length) fields.push(field('Image', f.images.slice(0, 5).map(code).join('\n') + (f.images.length > 5 ? `\n+${f.images.length - 5} more` : '')));
  if (f.registry) fields.push(field('Registry', code(f.registry)));
  fields.push(field(f.nodeCount === 1 ? 'Node' : `Nodes (${f.nodeCount})`, f.nodes.map(code).join(', ') + (f.nodeCount > f.nodes.length ? ` +${f.nodeCount - f.nodes.length} more` : '')));
  if (inc.kind !== 'agent-down') {
    fields.push(field('Bytes done / total', f.bytesText));
    fields.push(field('Stalled for', f.stalledForText));
    fields.push(field('Waiting pods', f.pods.length ? f.pods.map(code).join(', ') : 'none known'));
    fields.push(field(`Runtime deadline${f.runtime ? ` (${f.runtime})` : ''}`, f.deadlineText));
    if (f.recommendation) fields.push(field('Recommended', f.recommendation));
  } else if (f.recommendation) {
    fields.push(field('Recommended', f.recommendation));
  }
  const blocks: SlackBlock[] = [
    { type: 'header', text: { type: 'plain_text', text: clip(f.title, 150) } },
    { type: 'section', fields: fields.slice(0, 10) },
  ];
  const ctx = [`incident ${code(inc.id)}`, `opened ${inc.openedAt}`];
  if (notice.type === 'resolved') ctx.push(`resolved ${inc.resolvedAt ?? notice.at}${inc.resolution ? ` (${inc.resolution})` : ''}`);
  if (dashboardUrl) ctx.push(`<${dashboardUrl}|dashboard>`);
  blocks.push({ type: 'context', elements: [{ type: 'mrkdwn', text: clip(ctx.join(' · '), 1900) }] });
  return { text: clip(f.title, 3000), blocks };
}

export class SlackNotifier implements Notifier {
  readonly kind = 'slack' as const;
  constructor(readonly name: string, private readonly target: HttpTarget, private readonly dashboardUrl?: string) {}
  send(notice: Notice, signal?: AbortSignal): Promise<DeliveryOutcome> {
    return post(this.target, JSON.stringify(slackMessage(notice, this.dashboardUrl)), {}, signal);
  }
}
