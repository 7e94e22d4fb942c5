/**
 * What every notifier is: a name (the outbox routes by it) and send(), which turns one notice into
 * one HTTP request and says whether it was delivered, should be retried, or can never succeed.
 * Secrets (webhook URLs, tokens) are never put into outcomes or errors: scrub() masks them.
 */
import http from 'node:http';
import https from 'node:https';
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

const agents = { http: new http.Agent({ keepAlive: true, maxSockets: 16 }), https: new https.Agent({ keepAlive: true, maxSockets: 16 }) };

/** POSTs a body and classifies the result (never throws). node:http rather than fetch: cheaper per request. */
export function post(target: HttpTarget, body: string, headers: Record<string, string>, signal?: AbortSignal): Promise<DeliveryOutcome> {
  return new Promise((resolve) => {
    let u: URL;
    try { u = new URL(target.url); } catch { resolve({ ok: false, retry: false, error: 'invalid URL' }); return; }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') { resolve({ ok: false, retry: false, error: `unsupported protocol ${u.protocol}` }); return; }
    const mod = u.protocol === 'https:' ? https : http;
    const payload = Buffer.from(body);
    let settled = false;
    const done = (o: DeliveryOutcome) => { if (!settled) { settled = true; clearTimeout(timer); resolve(o); } };
    const req = mod.request(u, {
      method: 'POST', agent: u.protocol === 'https:' ? agents.https : agents.http,
      headers: { 'content-type': 'application/json', 'content-length': String(payload.length), ...headers },
      ...(signal ? { signal } : {}),
    }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => { if (size < 4096) { chunks.push(c); size += c.length; } });
      res.on('error', () => undefined);
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        if (status >= 200 && status < 300) { done({ ok: true, status }); return; }
        const text = Buffer.concat(chunks).toString('utf8').slice(0, 200);
        const detail = scrub(`HTTP ${status}${text ? `: ${text}` : ''}`, target);
        if (status >= 500 || status === 408 || status === 429) {
          const ra = Number(res.headers['retry-after']);
          done({ ok: false, retry: true, error: detail, ...(Number.isFinite(ra) && ra > 0 ? { retryAfterMs: Math.min(ra, 3600) * 1000 } : {}) });
        } else {
          // 3xx included: a webhook that redirects is misconfigured; following it could leak the body elsewhere
          done({ ok: false, retry: false, error: detail });
        }
      });
    });
    const timer = setTimeout(() => { req.destroy(Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' })); }, target.timeoutMs ?? 10_000);
    req.on('error', (e: NodeJS.ErrnoException) => {
      const why = e.name === 'AbortError' ? 'aborted' : e.code ?? e.message;
      done({ ok: false, retry: true, error: scrub(`request failed: ${why}`, target) });
    });
    req.end(payload);
  });
}
