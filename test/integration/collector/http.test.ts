/**
 * The ingest boundary: auth, validation, limits, idempotency, and hostile input (fastify inject and
 * real sockets). Every bad body gets a 4xx with a reason, is counted, and the process keeps serving.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request as httpRequest } from 'node:http';
import fc from 'fast-check';
import { silentLogger } from '../../../common/log.js';
import { startCollector, parseListen, type RunningCollector } from '../../../collector/run.js';
import { agentEvent, heartbeat, pullRecord } from './fixtures.js';
import { EventBatchSchema, HeartbeatSchema } from '../../../common/wire.js';

const TOKEN = 's3cret-token-value';
let c: RunningCollector;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pullwatch-http-'));
  writeFileSync(join(dir, 'token'), `${TOKEN}\nrotated-token-2\n`);
  c = await startCollector({
    listen: '127.0.0.1:0', db: join(dir, 'c.db'), tokenFile: join(dir, 'token'), bodyLimitBytes: 256 * 1024,
    rateLimit: { perSecond: 1000, burst: 1000 }, flapWindowMs: 0, tickMs: 200, dashboard: false,
  }, silentLogger());
});
afterAll(async () => {
  await c?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const auth = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
const batch = (events = [agentEvent('stalled')], node = 'node-1') => ({ node, agentVersion: '0.1.0', events });
async function inject(path: string, payload: string | object, headers: Record<string, string> = auth) {
  const r = await c.app.inject({ method: 'POST', url: path, payload: typeof payload === 'string' ? payload : JSON.stringify(payload), headers });
  return { status: r.statusCode, body: r.json() as { error?: string; reason?: string; accepted?: number; duplicates?: number }, headers: r.headers };
}
async function rejected(reason: string): Promise<number> {
  const v = (await c.metrics.rejected.get()).values.find((x) => x.labels.reason === reason);
  return v?.value ?? 0;
}

describe('ingest boundary', () => {
  it('requires a valid bearer token (401), accepts any line of the token file', async () => {
    const before = await rejected('unauthenticated');
    expect((await inject('/v1/events', batch(), { 'content-type': 'application/json' })).status).toBe(401);
    const wrong = await inject('/v1/events', batch(), { ...auth, authorization: 'Bearer nope' });
    expect(wrong).toMatchObject({ status: 401, body: { error: 'unauthenticated', reason: 'invalid bearer token' } });
    expect((await inject('/v1/events', batch(), { ...auth, authorization: 'Basic abc' })).status).toBe(401);
    expect((await inject('/v1/heartbeat', heartbeat('n'), { 'content-type': 'application/json' })).status).toBe(401);
    expect((await inject('/v1/events', batch(), { ...auth, authorization: 'Bearer rotated-token-2' })).status).toBe(200);
    expect(await rejected('unauthenticated')).toBe(before + 4);
  });

  it('names the bad field (400), rejects junk JSON (400), wrong content type (415), too large (413)', async () => {
    const bad = batch([agentEvent('stalled')]);
    (bad.events[0]!.pull as unknown as Record<string, unknown>).bytesDone = 'lots';
    const r = await inject('/v1/events', bad);
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error: 'invalid_body', reason: expect.stringMatching(/^events\.0\.pull\.bytesDone: /) });
    expect((await inject('/v1/events', { node: 'n', agentVersion: '1', events: [{ id: 'x' }] })).body.reason).toMatch(/^events\.0\.at: /);
    expect(await inject('/v1/events', '{"node": "n", ')).toMatchObject({ status: 400, body: { error: 'invalid_json', reason: 'body is not valid JSON' } });
    expect(await inject('/v1/events', '')).toMatchObject({ status: 400, body: { error: 'invalid_json' } });
    expect(await inject('/v1/events', '{"__proto__": {"x": 1}}')).toMatchObject({ status: 400, body: { error: 'invalid_json' } });
    expect(await inject('/v1/events', '[1,2,3]')).toMatchObject({ status: 400, body: { error: 'invalid_body', reason: expect.stringContaining('(body)') } });
    expect(await inject('/v1/events', 'node=n', { ...auth, 'content-type': 'application/x-www-form-urlencoded' }))
      .toMatchObject({ status: 415, body: { error: 'unsupported_media_type' } });
    const huge = batch(Array.from({ length: 200 }, () => agentEvent('stalled', { error: 'x'.repeat(2000) })));
    expect(await inject('/v1/events', huge)).toMatchObject({ status: 413, body: { error: 'too_large', reason: 'request body larger than 262144 bytes' } });
    expect(await rejected('too_large')).toBeGreaterThanOrEqual(1);
    expect(await rejected('unsupported_media_type')).toBeGreaterThanOrEqual(1);
  });

  it('survives deep nesting: in the capture, in unknown fields, and as the whole body', async () => {
    const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
    expect((await inject('/v1/events', deep(50_000))).status).toBe(400);
    const ev = agentEvent('stalled');
    const inCapture = JSON.stringify(batch([ev])).replace('"pull":', `"capture":{"a":${deep(20_000)}},"pull":`);
    expect(await inject('/v1/events', inCapture)).toMatchObject({ status: 400, body: { reason: expect.stringMatching(/^events\.0\.capture/) } });
    const inUnknown = JSON.stringify(batch([agentEvent('stalled')])).replace('"node":', `"extra":${deep(20_000)},"node":`);
    expect((await inject('/v1/events', inUnknown)).status).toBe(200); // unknown fields are ignored, not walked
    expect((await inject('/v1/heartbeat', heartbeat('deep', { pullsInFlight: [pullRecord()] }))).status).toBe(200);
  });

  it('ignores repeats of an event id (idempotent retries)', async () => {
    const events = [agentEvent('started'), agentEvent('slow'), agentEvent('stalled')];
    expect((await inject('/v1/events', batch(events, 'idem'))).body).toEqual({ wireVersion: 1, accepted: 3, duplicates: 0 });
    expect((await inject('/v1/events', batch(events, 'idem'))).body).toEqual({ wireVersion: 1, accepted: 0, duplicates: 3 });
    expect((await inject('/v1/events', batch([events[0]!, agentEvent('resumed')], 'idem'))).body).toEqual({ wireVersion: 1, accepted: 1, duplicates: 1 });
    expect(await c.store.eventIds('idem')).toHaveLength(4);
  });

  it('random bodies (fast-check) always get a 4xx with a reason, never a 5xx', async () => {
    const before = await rejected('invalid_body') + await rejected('invalid_json');
    let count = 0;
    await fc.assert(fc.asyncProperty(
      fc.oneof(
        fc.json(),
        fc.string(),
        fc.jsonValue().map((v) => JSON.stringify({ node: 'fc', agentVersion: '1', events: [v] })),
        fc.record({ node: fc.string(), agentVersion: fc.string(), events: fc.array(fc.anything(), { maxLength: 3 }) }).map((v) => JSON.stringify(v)),
        fc.jsonValue().map((v) => JSON.stringify(batch([{ ...agentEvent('stalled'), pull: v } as never]))),
      ),
      fc.constantFrom('/v1/events', '/v1/heartbeat'),
      async (body, path) => {
        const r = await c.app.inject({ method: 'POST', url: path, payload: body, headers: auth });
        if (r.statusCode === 200) {
          // only a body that really is valid may pass
          const schema = path === '/v1/events' ? EventBatchSchema : HeartbeatSchema;
          expect(schema.safeParse(JSON.parse(body)).success).toBe(true);
          return;
        }
        count++;
        expect(r.statusCode).toBeGreaterThanOrEqual(400);
        expect(r.statusCode).toBeLessThan(500);
        const j = r.json() as { error: string; reason: string };
        expect(typeof j.reason).toBe('string');
        expect(j.reason.length).toBeGreaterThan(0);
      },
    ), { numRuns: 300 });
    expect(await rejected('invalid_body') + await rejected('invalid_json')).toBe(before + count);
    expect((await c.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
  });

  it('serves the read API', async () => {
    const now = Date.now();
    await inject('/v1/heartbeat', heartbeat('read-node', { pullsInFlight: [pullRecord({ id: 'p-read', state: 'stalled' }, now)], runtime: { name: 'containerd', version: '1.7.24', pullDeadlineMs: 300_000 } }));
    await inject('/v1/events', batch([agentEvent('stalled', { image: 'ghcr.io/org/thing:2' }, now)], 'read-node'));
    await c.processNow();
    const get = async (url: string) => { const r = await c.app.inject({ method: 'GET', url }); return { status: r.statusCode, body: r.json() as Record<string, unknown> }; };
    const nodes = (await get('/v1/nodes')).body.nodes as { node: string; runtimeHasDeadline: boolean | null; runtime?: unknown }[];
    expect(nodes.find((n) => n.node === 'read-node')).toMatchObject({ runtimeHasDeadline: true, runtime: { name: 'containerd', version: '1.7.24', pullDeadlineMs: 300_000 }, status: 'up' });
    const pulls = (await get('/v1/pulls')).body.pulls as { node: string; pull: { id: string } }[];
    expect(pulls.filter((p) => p.node === 'read-node').length).toBe(2);
    const open = (await get('/v1/incidents?state=open')).body.incidents as { kind: string; image?: string }[];
    expect(open.some((i) => i.image === 'ghcr.io/org/thing:2')).toBe(true);
    expect((await get('/v1/incidents?state=bogus')).status).toBe(400);
    const stalls = (await get('/v1/stats/stalls?hours=24')).body as { hours: number; buckets: { registry: string; stalls: number }[] };
    expect(stalls.hours).toBe(24);
    expect(stalls.buckets.find((b) => b.registry === 'ghcr.io')?.stalls).toBe(1);
    expect((await get('/v1/stats/stalls?hours=-1')).status).toBe(400);
    expect(await get('/readyz')).toEqual({ status: 200, body: { ok: true, store: 'sqlite' } });
    expect((await get('/nope')).status).toBe(404);
    const m = await c.app.inject({ method: 'GET', url: '/metrics' });
    for (const name of ['pullwatch_collector_events_ingested_total', 'pullwatch_collector_events_duplicate_total', 'pullwatch_collector_requests_rejected_total{reason="invalid_body"}',
      'pullwatch_collector_incidents_open{kind="pull-stall"}', 'pullwatch_collector_outbox_depth{status="pending"}', 'pullwatch_collector_heartbeats_total']) {
      expect(m.body).toContain(name);
    }
  });

  it('rate-limits per node (429 with Retry-After) on a real socket', async () => {
    const rl = await startCollector({ listen: '127.0.0.1:0', db: join(dir, 'rl.db'), tokens: [TOKEN], rateLimit: { perSecond: 0.05, burst: 2 }, dashboard: false }, silentLogger());
    try {
      const post = (node: string) => fetch(`${rl.url}/v1/heartbeat`, { method: 'POST', headers: auth, body: JSON.stringify(heartbeat(node)) });
      expect((await post('a')).status).toBe(200);
      expect((await post('a')).status).toBe(200);
      const third = await post('a');
      expect(third.status).toBe(429);
      expect(third.headers.get('retry-after')).toBe('20');
      expect(await third.json()).toEqual({ error: 'rate_limited', reason: 'node a is over 0.05 requests/s' });
      expect((await post('b')).status).toBe(200); // another node has its own bucket
    } finally {
      await rl.stop();
    }
  });

  it('real socket: oversized streamed body → 413, unauthenticated → 401, good → 200', async () => {
    const { port } = parseListen(c.url.replace('http://', ''));
    const send = (headers: Record<string, string>, body: Buffer | string) => new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, path: '/v1/events', method: 'POST', headers }, (res) => {
        let b = '';
        res.on('data', (d: Buffer) => { b += d.toString(); });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: b }));
      });
      req.on('error', reject);
      req.end(body);
    });
    const big = Buffer.alloc(1024 * 1024, 0x20);
    expect((await send({ ...auth, 'content-length': String(big.length) }, big)).status).toBe(413);
    expect((await send({ 'content-type': 'application/json' }, JSON.stringify(batch()))).status).toBe(401);
    const ok = await send(auth, JSON.stringify(batch([agentEvent('started')], 'sock')));
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.body)).toEqual({ wireVersion: 1, accepted: 1, duplicates: 0 });
  });
});
