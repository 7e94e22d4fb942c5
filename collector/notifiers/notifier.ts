/**
 * What every notifier is: a name (the outbox routes by it) and send(), which turns one notice into
 * one HTTP request and says whether it was delivered, should be retried, or can never succeed.
 * Secrets (webhook URLs, tokens) are never put into outcomes or errors: scrub() masks them.
 */
import type { Notice } from '../model.js';

export type DeliveryOutcome =
  | { ok: true; status: number }
  /** 5xx, 408, 429, network error, timeout: try again later. */
  | { ok: false; retry: true; error: string; retryAfterMs?: number }
  /** Other 4xx: this request will never succeed; dead-letter it. */
  | { ok: false; retry: false; error: string };

export interface Notifier {
  /** Unique per configured target: "slack", "webhook-1", "alertmanager". */
  readonly name: string;
  readonly kind: 'slack' | 'webhook' | 'alertmanager';
  send(notice: Notice, signal?: AbortSignal): Promise<DeliveryOutcome>;
}

export interface HttpTarget {
  url: string;
  /** Extra strings to mask in errors (tokens, secrets). */
  secrets?: string[];
  timeoutMs?: number;
}

/** Replaces every secret (and the URL, its path and query) in text with [redacted]. */
export function scrub(text: string, target: HttpTarget): string {
  let out = text;
  const secrets = [target.url, ...(target.secrets ?? [])];
  try {
    const u = new URL(target.url);
    if (u.pathname.length > 1) secrets.push(u.pathname);
    if (u.search) secrets.push(u.search);
    if (u.password) secrets.push(u.password);
  } catch { /* not a URL */ }
  for (const s of secrets.filter((x) => x && x.length >= 4).sort((a, b) => b.length - a.length)) out = out.split(s).join('[redacted]');
  return out;
}

/** Host of a target for logs (no path, no credentials, no query). */
export function safeHost(url: string): string {
  try { return new URL(url).host; } catch { return '[invalid url]'; }
}

/** POSTs a body and classifies the result (never throws). */
export async function post(target: HttpTarget, body: string, headers: Record<string, string>, signal?: AbortSignal): Promise<DeliveryOutcome> {
  const timeout = AbortSignal.timeout(target.timeoutMs ?? 10_000);
  const sig = signal ? AbortSignal.any([signal, timeout]) : timeout;
  try {
    const res = await fetch(target.url, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers }, signal: sig, redirect: 'error' });
    const text = await res.text().catch(() => '');
    if (res.ok) return { ok: true, status: res.status };
    const detail = scrub(`HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`, target);
    if (res.status >= 500 || res.status === 408 || res.status === 429) {
      const ra = Number(res.headers.get('retry-after'));
      return { ok: false, retry: true, error: detail, ...(Number.isFinite(ra) && ra > 0 ? { retryAfterMs: Math.min(ra, 3600) * 1000 } : {}) };
    }
    return { ok: false, retry: false, error: detail };
  } catch (e) {
    const err = e as Error & { cause?: { code?: string; message?: string } };
    const why = err.name === 'TimeoutError' ? 'timed out' : err.cause?.code ?? err.cause?.message ?? err.message;
    return { ok: false, retry: true, error: scrub(`request failed: ${why}`, target) };
  }
}
