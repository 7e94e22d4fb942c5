import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createServer, type AddressInfo } from 'node:net';
import { backoffMs } from '../../../collector/outbox.js';
import { scrub, safeHost, post } from '../../../collector/notifiers/notifier.js';
import { signWebhook, verifyWebhook } from '../../../collector/notifiers/webhook.js';
import { alertmanagerAlerts, AlertmanagerNotifier } from '../../../collector/notifiers/alertmanager.js';
import { slackMessage } from '../../../collector/notifiers/slack.js';
import { incidentFacts } from '../../../collector/notifiers/facts.js';
import { RateLimiter } from '../../../collector/ratelimit.js';
import { IncidentEngine } from '../../../collector/incidents.js';
import type { Notice } from '../../../collector/model.js';
import { agentEvent } from '../../integration/collector/fixtures.js';

const T0 = Date.parse('2026-11-21T09:00:00.000Z');

function registryNotice(): Notice {
  let n = 0;
  const e = new IncidentEngine({ registryNodes: 2, flapWindowMs: 0, newId: () => `inc-${++n}` });
  e.applyEvent('n1', agentEvent('stalled', { image: 'docker.io/library/nginx:1.27', bytesDone: 10, bytesTotal: 100, runtimeDeadlineMs: 300_000 }, T0), T0);
  e.applyEvent('n2', agentEvent('stalled', { image: 'docker.io/library/redis:7', bytesDone: 20, bytesTotal: null, runtimeDeadlineMs: 300_000 }, T0), T0);
  const notices = e.takeOutput().notices;
  return notices[notices.length - 1]!;
}

describe('notifier helpers', () => {
  it('backs off exponentially with jitter, capped', () => {
    expect(backoffMs(1, 1000, 300_000, () => 0)).toBe(500);
    expect(backoffMs(1, 1000, 300_000, () => 1)).toBe(1000);
    expect(backoffMs(4, 1000, 300_000, () => 1)).toBe(8000);
    expect(backoffMs(40, 1000, 300_000, () => 1)).toBe(300_000);
    expect(backoffMs(40, 1000, 300_000, () => 0)).toBe(150_000);
  });

  it('scrubs URLs, their paths and secrets from error text', () => {
    const t = { url: 'https://hooks.slack.com/services/T1/B2/abcdef', secrets: ['tok123456'] };
    expect(scrub('failed https://hooks.slack.com/services/T1/B2/abcdef and /services/T1/B2/abcdef tok123456', t)).toBe('failed [redacted] and [redacted] [redacted]');
    expect(safeHost(t.url)).toBe('hooks.slack.com');
  });

  it('signs timestamp.body with HMAC-SHA256 and rejects stale or altered deliveries', () => {
    const body = '{"a":1,"timestamp":1700000000}';
    const sig = signWebhook('k', body);
    expect(sig).toBe(`sha256=${createHmac('sha256', 'k').update(body).digest('hex')}`);
    expect(sig).toMatch(/^sha256=[0-9a-f]{64}$/);
    expect(verifyWebhook('k', '1700000000', body, sig, 1700000000_000)).toBe(true);
    expect(verifyWebhook('k', '1700000000', '{"a":2,"timestamp":1700000000}', sig, 1700000000_000)).toBe(false);
    expect(verifyWebhook('k', '1700000000', body, sig, 1700000000_000 + 301_000)).toBe(false);
    // a replay with a fresh header timestamp does not match the signed one in the body
    expect(verifyWebhook('k', '1700000300', body, sig, 1700000300_000)).toBe(false);
  });

  it('formats a registry incident for Alertmanager and Slack', () => {
    const notice = registryNotice();
    expect(notice.incident.kind).toBe('registry');
    const [alert] = alertmanagerAlerts(notice);
    expect(alert?.labels).toEqual({ alertname: 'PullwatchRegistryStalled', severity: 'critical', source: 'pullwatch', incident_id: notice.incident.id, registry: 'docker.io' });
    expect(alert?.annotations.summary).toBe('2 nodes stalled pulling from docker.io');
    const f = incidentFacts(notice);
    expect(f.bytesText).toBe('30 B / unknown');
    expect(f.deadlineText).toBe('5m0s');
    expect(f.images).toEqual(['docker.io/library/nginx:1.27', 'docker.io/library/redis:7']);
    const msg = slackMessage(notice);
    expect(msg.text).toBe('[Firing] 2 nodes stalled pulling from docker.io');
    expect(JSON.stringify(msg.blocks)).toContain('*Nodes (2)*\\n`n1`, `n2`');
  });

  it('posts to <base>/api/v2/alerts; network errors are retryable and carry no URL', async () => {
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
    const port = (srv.address() as AddressInfo).port;
    await new Promise<void>((r) => srv.close(() => r())); // nothing listens there now
    const n = new AlertmanagerNotifier('am', { url: `http://127.0.0.1:${port}/secret-path/`, timeoutMs: 2000 });
    const out = await n.send(registryNotice());
    expect(out.ok).toBe(false);
    if (!out.ok) {
      expect(out.retry).toBe(true);
      expect(out.error).not.toContain('secret-path');
    }
    const direct = await post({ url: `http://127.0.0.1:${port}/x/y/z`, timeoutMs: 2000 }, '{}', {});
    expect(direct).toMatchObject({ ok: false, retry: true, error: 'request failed: ECONNREFUSED' });
  });

  it('rate limiter: burst, then refill per second, per key', () => {
    let now = 0;
    const rl = new RateLimiter(2, 3, () => now);
    expect([rl.take('a'), rl.take('a'), rl.take('a'), rl.take('a')]).toEqual([0, 0, 0, 1]);
    expect(rl.take('b')).toBe(0);
    now = 500;
    expect(rl.take('a')).toBe(0);
    expect(rl.take('a')).toBe(1);
  });
});
