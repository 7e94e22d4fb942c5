/**
 * End to end through real sockets: agent-shaped HTTP posts → collector → real HTTP receivers for
 * Slack, a signed webhook and Alertmanager. Faults: receiver down then up, 4xx dead-letter, secrets
 * kept out of logs.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger, silentLogger } from '../../../common/log.js';
import { startCollector, type CollectorOptions, type RunningCollector } from '../../../collector/run.js';
import { verifyWebhook, type WebhookPayload } from '../../../collector/notifiers/webhook.js';
import type { SlackMessage } from '../../../collector/notifiers/slack.js';
import type { PostableAlert } from '../../../collector/notifiers/alertmanager.js';
import type { AgentEvent, Heartbeat } from '../../../common/wire.js';
import { Receiver } from './receiver.js';
import { agentEvent, heartbeat, waitFor } from './fixtures.js';

const TOKEN = 'tok-0123456789abcdef';
const SECRET = 'whsec-abcdef0123456789';
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => { while (cleanups.length) await cleanups.pop()?.(); });

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'pullwatch-notify-'));
  cleanups.push(() => rmSync(d, { recursive: true, force: true }));
  return d;
}
async function receiver(): Promise<Receiver> {
  const r = await new Receiver().start();
  cleanups.push(() => r.stop());
  return r;
}
async function collector(opts: CollectorOptions, logger = silentLogger()): Promise<RunningCollector> {
  const c = await startCollector({
    listen: '127.0.0.1:0', tokens: [TOKEN], flapWindowMs: 0, updateThrottleMs: 0, tickMs: 100, dashboard: false,
    outbox: { pollMs: 100, baseBackoffMs: 50, maxBackoffMs: 300 }, ...opts,
  }, logger);
  cleanups.push(() => c.stop());
  return c;
}
async function postEvents(url: string, node: string, events: AgentEvent[]): Promise<Response> {
  return fetch(`${url}/v1/events`, {
    method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ node, agentVersion: '0.1.0', events }),
  });
}
async function postHeartbeat(url: string, hb: Heartbeat): Promise<Response> {
  return fetch(`${url}/v1/heartbeat`, {
    method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(hb),
  });
}

describe('notifications through real receivers', () => {
  it('sends one firing and one resolved message to Slack, a signed webhook and Alertmanager', async () => {
    const slack = await receiver();
    const hook = await receiver();
    const am = await receiver();
    const dir = tempDir();
    writeFileSync(join(dir, 'secret'), `${SECRET}\n`);
    const c = await collector({
      db: join(dir, 'c.db'), slackWebhook: slack.url('/services/T000/B000/XXXX'), webhooks: [hook.url('/hooks/pullwatch')],
      webhookSecretFile: join(dir, 'secret'), alertmanager: am.url('/'), publicUrl: 'https://pullwatch.example.com/',
    });
    const t = Date.now();
    const stall = agentEvent('stalled', {
      image: 'registry.example.com:5000/team/app:1.2.3', runtimeDeadlineMs: null, bytesDone: 40_000_000, bytesTotal: 88_270_000,
    }, t, { capture: { recommendedDeadlineMs: 150_000 } });
    const r = await postEvents(c.url, 'node-a', [stall]);
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ wireVersion: 1, accepted: 1, duplicates: 0 });
    await waitFor('firing at all three', () => slack.requests.length === 1 && hook.requests.length === 1 && am.requests.length === 1);

    // Slack: Block Kit with the facts
    const s = slack.requests[0]!;
    expect(s.url).toBe('/services/T000/B000/XXXX');
    expect(s.headers['content-type']).toBe('application/json');
    const msg = s.json as SlackMessage;
    expect(msg.text).toBe('[Firing] Pull of registry.example.com:5000/team/app:1.2.3 stalled on node-a');
    expect(msg.blocks[0]).toEqual({ type: 'header', text: { type: 'plain_text', text: msg.text } });
    const fields = (msg.blocks[1] as { fields: { text: string }[] }).fields.map((f) => f.text);
    expect(fields).toEqual([
      '*Image*\n`registry.example.com:5000/team/app:1.2.3`',
      '*Registry*\n`registry.example.com:5000`',
      '*Node*\n`node-a`',
      '*Bytes done / total*\n40.0 MB / 88.3 MB (45%)',
      expect.stringMatching(/^\*Stalled for\*\n1m(1[5-9]|[2-5]\d)(\.\d+)?s$/), // 75 s before the event, plus processing time
      '*Waiting pods*\n`default/web-7d9f`',
      '*Runtime deadline (containerd 1.6.20)*\nnone: the runtime never cancels a stalled pull',
      "*Recommended*\nset the runtime's pull progress deadline to 2m30s",
    ]);
    expect(JSON.stringify(msg.blocks[2])).toContain('<https://pullwatch.example.com/|dashboard>');

    // webhook: versioned JSON, HMAC over timestamp.body
    const h = hook.requests[0]!;
    const ts = String(h.headers['x-pullwatch-timestamp']);
    expect(verifyWebhook(SECRET, ts, h.body, String(h.headers['x-pullwatch-signature']))).toBe(true);
    expect(verifyWebhook('wrong-secret', ts, h.body, String(h.headers['x-pullwatch-signature']))).toBe(false);
    expect(h.headers['x-pullwatch-event']).toBe('firing');
    const p = h.json as WebhookPayload;
    expect(p.schema).toBe('pullwatch.webhook/v1');
    expect(p.type).toBe('firing');
    expect(h.headers['x-pullwatch-delivery']).toBe(p.deliveryId);
    expect(p.incident).toMatchObject({ kind: 'pull-stall', state: 'open', node: 'node-a', registry: 'registry.example.com:5000', nodes: ['node-a'] });
    expect(p.facts).toMatchObject({ bytesDone: 40_000_000, bytesTotal: 88_270_000, deadlineMs: null, pods: ['default/web-7d9f'] });

    // Alertmanager v2
    const a = am.requests[0]!;
    expect(a.url).toBe('/api/v2/alerts');
    const alerts = a.json as PostableAlert[];
    expect(alerts).toHaveLength(1);
    expect(alerts[0]!.labels).toEqual({
      alertname: 'PullwatchPullStalled', severity: 'warning', source: 'pullwatch', incident_id: p.incident.id,
      registry: 'registry.example.com:5000', node: 'node-a', image: 'registry.example.com:5000/team/app:1.2.3',
    });
    expect(alerts[0]!.startsAt).toBe(p.incident.openedAt);
    expect(Date.parse(alerts[0]!.endsAt)).toBeGreaterThan(Date.now() + 3_600_000);
    expect(alerts[0]!.generatorURL).toBe('https://pullwatch.example.com/');

    // repeats of the same event are ignored: no second alert
    expect(await (await postEvents(c.url, 'node-a', [stall])).json()).toEqual({ wireVersion: 1, accepted: 0, duplicates: 1 });

    await postEvents(c.url, 'node-a', [agentEvent('completed', { image: 'registry.example.com:5000/team/app:1.2.3' }, Date.now())]);
    await waitFor('resolved at all three', () => slack.requests.length === 2 && hook.requests.length === 2 && am.requests.length === 2);
    expect((slack.requests[1]!.json as SlackMessage).text).toBe('[Resolved] Pull of registry.example.com:5000/team/app:1.2.3 stalled on node-a');
    expect((hook.requests[1]!.json as WebhookPayload).incident).toMatchObject({ state: 'resolved', resolution: 'pull completed' });
    const resolvedAlert = (am.requests[1]!.json as PostableAlert[])[0]!;
    expect(resolvedAlert.labels).toEqual(alerts[0]!.labels);
    expect(resolvedAlert.endsAt).toBe((hook.requests[1]!.json as WebhookPayload).incident.resolvedAt);

    await waitFor('all recorded as sent', async () => (await c.store.outboxStats()).sent === 6);
    await new Promise((r) => setTimeout(r, 300));
    expect([slack.requests.length, hook.requests.length, am.requests.length]).toEqual([2, 2, 2]);
    const metrics = await (await fetch(`${c.url}/metrics`)).text();
    expect(metrics).toMatch(/pullwatch_collector_notifications_sent_total\{notifier="slack"\} 2/);
    expect(metrics).toMatch(/pullwatch_collector_events_duplicate_total 1/);
  });

  it('receiver down then up: each notification is delivered exactly once, in order', async () => {
    const hook = await receiver();
    const port = hook.port;
    await hook.stop(); // connection refused from now on
    const dir = tempDir();
    const c = await collector({ db: join(dir, 'c.db'), webhooks: [`http://127.0.0.1:${port}/hook`], webhookSecret: SECRET });
    const t = Date.now();
    for (let i = 0; i < 5; i++) await postEvents(c.url, `node-${i}`, [agentEvent('stalled', { image: `r${i}.example.com/app:1` }, t)]);
    await postEvents(c.url, 'node-0', [agentEvent('resumed', { image: 'r0.example.com/app:1' }, t + 1)]);
    await waitFor('retries while down', async () => (await c.metrics.notificationsFailed.get()).values.some((v) => v.value >= 6));
    await waitFor('six pending', async () => (await c.store.outboxStats()).pending === 6);
    await hook.start(port);
    await waitFor('six deliveries', () => hook.requests.length >= 6);
    await waitFor('six recorded as sent', async () => (await c.store.outboxStats()).sent === 6);
    await new Promise((r) => setTimeout(r, 500));
    const ids = hook.requests.map((r) => (r.json as WebhookPayload).deliveryId);
    expect(ids.length).toBe(6);
    expect(new Set(ids).size).toBe(6);
    const n0 = hook.requests.filter((r) => (r.json as WebhookPayload).incident.node === 'node-0').map((r) => (r.json as WebhookPayload).type);
    expect(n0).toEqual(['firing', 'resolved']);
    expect(await c.store.outboxStats()).toEqual({ pending: 0, sent: 6, dead: 0 });
  });

  it('a 4xx answer dead-letters the notification (not retried); 5xx is retried', async () => {
    const gone = await receiver();
    gone.status = () => 404;
    const flaky = await receiver();
    flaky.status = (i) => (i < 2 ? 503 : 200);
    let hits503 = 0;
    const orig = flaky.status;
    flaky.status = (_i) => { const s = orig(hits503); if (s === 503) hits503++; return s; };
    const dir = tempDir();
    const c = await collector({ db: join(dir, 'c.db'), webhooks: [gone.url('/x'), flaky.url('/y')] });
    await postEvents(c.url, 'n1', [agentEvent('stalled', {}, Date.now())]);
    await waitFor('delivered to the flaky one', () => flaky.requests.length === 1);
    await waitFor('one sent, one dead-lettered', async () => { const st = await c.store.outboxStats(); return st.dead === 1 && st.sent === 1; });
    expect(hits503).toBe(2);
    expect(await c.store.outboxStats()).toEqual({ pending: 0, sent: 1, dead: 1 });
    const metrics = await (await fetch(`${c.url}/metrics`)).text();
    expect(metrics).toMatch(/pullwatch_collector_notifications_failed_total\{notifier="webhook-1",outcome="dead"\} 1/);
    expect(metrics).toMatch(/pullwatch_collector_notifications_failed_total\{notifier="webhook-2",outcome="retry"\} 2/);
  });

  it('agent-down fires after 3 missed heartbeats and resolves when they return', async () => {
    const hook = await receiver();
    const dir = tempDir();
    const c = await collector({ db: join(dir, 'c.db'), webhooks: [hook.url('/h')] });
    expect((await postHeartbeat(c.url, heartbeat('quiet-node', { intervalSeconds: 0.2 }))).status).toBe(200);
    await waitFor('agent-down firing', () => hook.requests.length === 1, 10_000);
    const p = hook.requests[0]!.json as WebhookPayload;
    expect(p.incident).toMatchObject({ kind: 'agent-down', node: 'quiet-node' });
    const nodes = await (await fetch(`${c.url}/v1/nodes`)).json() as { nodes: { node: string; status: string }[] };
    expect(nodes.nodes).toEqual([expect.objectContaining({ node: 'quiet-node', status: 'down' })]);
    await postHeartbeat(c.url, heartbeat('quiet-node', { intervalSeconds: 30 }));
    await waitFor('agent-down resolved', () => hook.requests.length === 2, 10_000);
    expect((hook.requests[1]!.json as WebhookPayload).incident).toMatchObject({ state: 'resolved', resolution: 'heartbeats resumed' });
  });

  it('never writes webhook URLs, secrets or tokens to the log', async () => {
    const slack = await receiver();
    slack.status = () => 500;
    const lines: string[] = [];
    const sink = new Writable({ write(chunk, _enc, cb) { lines.push(String(chunk)); cb(); } });
    const dir = tempDir();
    const c = await collector({
      db: join(dir, 'c.db'), slackWebhook: slack.url('/services/T0SECRET/B0SECRET/ZZSECRETZZ'), webhooks: [slack.url('/hook?token=QQSECRETQQ')], webhookSecret: SECRET,
    }, createLogger({ level: 'debug', destination: sink }));
    await postEvents(c.url, 'n1', [agentEvent('stalled', {}, Date.now())]);
    await fetch(`${c.url}/v1/events`, { method: 'POST', headers: { authorization: 'Bearer WRONG-TOKEN-SECRET', 'content-type': 'application/json' }, body: '{}' });
    await waitFor('failed attempts logged', () => lines.some((l) => l.includes('notification failed')));
    await c.stop();
    const log = lines.join('');
    expect(log).toContain('"notifier":"slack"');
    for (const secret of ['ZZSECRETZZ', 'T0SECRET', 'QQSECRETQQ', SECRET, TOKEN, 'WRONG-TOKEN-SECRET', '/services/']) expect(log).not.toContain(secret);
  });
});
