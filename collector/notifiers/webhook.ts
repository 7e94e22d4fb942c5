/**
 * Generic webhook: versioned JSON, signed.
 *   X-Pullwatch-Timestamp: <unix seconds>
 *   X-Pullwatch-Signature: sha256=<hex HMAC-SHA256(secret, body)>   (DESIGN.md: the HMAC of the body)
 *   X-Pullwatch-Delivery: <notice id>   (stable across retries: dedupe on it)
 *   X-Pullwatch-Event: firing | update | resolved
 * The body carries the same `timestamp` (unix seconds) as the header, so the signature covers it:
 * receivers recompute the HMAC over the raw body bytes, check the body's timestamp equals the
 * header's, and reject timestamps older than ~5 minutes (no replay).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Incident, Notice } from '../model.js';
import { incidentFacts, type IncidentFacts } from './facts.js';
import { post, type DeliveryOutcome, type HttpTarget, type Notifier } from './notifier.js';

export const WEBHOOK_SCHEMA = 'pullwatch.webhook/v1';

export interface WebhookPayload {
  schema: typeof WEBHOOK_SCHEMA;
  version: 1;
  deliveryId: string;
  /** Unix seconds when sent; equals X-Pullwatch-Timestamp and is covered by the signature. */
  timestamp: number;
  type: Notice['type'];
  at: string;
  incident: Incident;
  facts: IncidentFacts;
}

export function webhookPayload(notice: Notice, timestamp = Math.floor(Date.now() / 1000)): WebhookPayload {
  return { schema: WEBHOOK_SCHEMA, version: 1, deliveryId: notice.id, timestamp, type: notice.type, at: notice.at, incident: notice.incident, facts: incidentFacts(notice) };
}

export function signWebhook(secret: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/** Receiver-side check (used by the tests; receivers in other languages do the same). */
export function verifyWebhook(secret: string, timestamp: string, body: string, signature: string, nowMs = Date.now(), toleranceSeconds = 300): boolean {
  const ts = Number(timestamp);
  if (!Number.isFinite(ts) || Math.abs(nowMs / 1000 - ts) > toleranceSeconds) return false;
  let bodyTs: unknown;
  try { bodyTs = (JSON.parse(body) as { timestamp?: unknown }).timestamp; } catch { return false; }
  if (bodyTs !== ts) return false;
  const want = Buffer.from(signWebhook(secret, body));
  const got = Buffer.from(signature);
  return want.length === got.length && timingSafeEqual(want, got);
}

export class WebhookNotifier implements Notifier {
  readonly kind = 'webhook' as const;
  constructor(readonly name: string, private readonly target: HttpTarget, private readonly secret?: string, private readonly userAgent = 'pullwatch') {}
  send(notice: Notice, signal?: AbortSignal): Promise<DeliveryOutcome> {
    const now = Math.floor(Date.now() / 1000);
    const body = JSON.stringify(webhookPayload(notice, now));
    const ts = String(now);
    const headers: Record<string, string> = {
      'user-agent': this.userAgent, 'x-pullwatch-event': notice.type, 'x-pullwatch-delivery': notice.id, 'x-pullwatch-timestamp': ts,
    };
    if (this.secret) headers['x-pullwatch-signature'] = signWebhook(this.secret, body);
    return post({ ...this.target, secrets: [...(this.target.secrets ?? []), ...(this.secret ? [this.secret] : [])] }, body, headers, signal);
  }
}
