/** One behavioural suite, run against real SQLite and real PostgreSQL. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteStore } from '../../../collector/store/sqlite.js';
import { PostgresStore } from '../../../collector/store/postgres.js';
import type { Store } from '../../../collector/store/store.js';
import { processStep } from '../../../collector/processor.js';
import { startPostgres, createDatabase, type PgServer } from '../../harness/postgres.js';
import { agentEvent, heartbeat, pullRecord } from './fixtures.js';

let pgServer: PgServer | undefined;
const tmp = mkdtempSync(join(tmpdir(), 'pullwatch-store-'));
let dbSeq = 0;

beforeAll(async () => { pgServer = await startPostgres(); });
afterAll(async () => {
  await pgServer?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

type Factory = () => Promise<{ a: Store; b: () => Store }>;
const factories: Array<[string, Factory]> = [
  ['sqlite', async () => {
    const path = join(tmp, `s${dbSeq++}.db`);
    const a = new SqliteStore(path);
    await a.migrate();
    return { a, b: () => new SqliteStore(path) };
  }],
  ['postgres', async () => {
    if (!pgServer) throw new Error('PostgreSQL did not start');
    const url = await createDatabase(pgServer.url, `t${dbSeq++}`);
    const a = new PostgresStore(url);
    await a.migrate();
    return { a, b: () => new PostgresStore(url) };
  }],
];

const ENGINE = { registryNodes: 3, registryWindowMs: 300_000, flapWindowMs: 0, updateThrottleMs: 0 };

describe.each(factories)('store: %s', (_name, make) => {
  it('migrations are idempotent and safe to run from two instances at once', async () => {
    const { a, b } = await make();
    const x = b();
    const y = b();
    await Promise.all([x.migrate(), y.migrate(), a.migrate()]);
    await a.ping();
    await x.close(); await y.close(); await a.close();
  });

  it('stores each (node, event id) exactly once', async () => {
    const { a } = await make();
    const e1 = agentEvent('stalled');
    const e2 = agentEvent('resumed');
    expect(await a.insertEvents('n1', '0.1.0', [e1, e2, e1], Date.now())).toEqual({ accepted: 2, duplicates: 1 });
    expect(await a.insertEvents('n1', '0.1.0', [e1, e2], Date.now())).toEqual({ accepted: 0, duplicates: 2 });
    expect(await a.insertEvents('n2', '0.1.0', [e1], Date.now())).toEqual({ accepted: 1, duplicates: 0 });
    expect(await a.eventIds('n1')).toEqual([e1.id, e2.id]);
    expect(await a.countEvents()).toBe(3);
    await a.close();
  });

  it('keeps nodes and in-flight pulls from heartbeats and events', async () => {
    const { a } = await make();
    const now = Date.now();
    const p1 = pullRecord({ id: 'pull-1', state: 'stalled' }, now - 1000);
    await a.recordHeartbeat(heartbeat('n1', { pullsInFlight: [p1], runtime: { name: 'containerd', version: '1.7.24', pullDeadlineMs: 300_000 } }), now);
    await a.recordHeartbeat(heartbeat('n2'), now - 200_000);
    const nodes = await a.listNodes(now, 3);
    expect(nodes.map((n) => [n.node, n.status, n.runtimeHasDeadline, n.pullsInFlight])).toEqual([
      ['n1', 'up', true, 1], ['n2', 'down', false, 0],
    ]);
    expect((await a.listPulls()).map((p) => p.pull.id)).toEqual(['pull-1']);
    await a.insertEvents('n2', '0.1.0', [agentEvent('started', { id: 'pull-2' }, now)], now);
    expect((await a.listPulls()).map((p) => `${p.node}/${p.pull.id}`).sort()).toEqual(['n1/pull-1', 'n2/pull-2']);
    // pull-1 finished: the next heartbeat no longer lists it
    await a.recordHeartbeat(heartbeat('n1', { pullsInFlight: [] }, now + 1000), now + 1000);
    expect((await a.listPulls()).map((p) => p.pull.id)).toEqual(['pull-2']);
    await a.insertEvents('n2', '0.1.0', [agentEvent('completed', { id: 'pull-2' }, now + 2000)], now + 2000);
    expect(await a.listPulls()).toEqual([]);
    await a.close();
  });

  it('turns events into incidents and outbox rows, marks them processed once', async () => {
    const { a } = await make();
    const now = Date.now();
    await a.insertEvents('n1', '0.1.0', [agentEvent('stalled', {}, now)], now);
    expect(await a.processIncidents({ nowMs: now, missedHeartbeats: 3, limit: 100 }, processStep(ENGINE, ['slack', 'webhook-1'], now))).toBe(1);
    expect(await a.processIncidents({ nowMs: now, missedHeartbeats: 3, limit: 100 }, processStep(ENGINE, ['slack', 'webhook-1'], now))).toBe(0);
    const open = await a.listIncidents({ state: 'open' });
    expect(open).toHaveLength(1);
    expect(open[0]?.kind).toBe('pull-stall');
    expect(await a.outboxStats()).toEqual({ pending: 2, sent: 0, dead: 0 });
    await a.insertEvents('n1', '0.1.0', [agentEvent('resumed', {}, now + 1)], now + 1);
    await a.processIncidents({ nowMs: now + 1, missedHeartbeats: 3, limit: 100 }, processStep(ENGINE, ['slack', 'webhook-1'], now + 1));
    expect(await a.listIncidents({ state: 'open' })).toEqual([]);
    expect((await a.listIncidents({ state: 'resolved' }))[0]?.resolution).toBe('bytes flowing again');
    expect(await a.outboxStats()).toEqual({ pending: 4, sent: 0, dead: 0 });
    await a.close();
  });

  it('leases outbox rows in order per incident, once across claimers, and re-leases expired ones', async () => {
    const { a, b } = await make();
    const other = b();
    await other.migrate();
    const now = Date.now();
    await a.insertEvents('n1', '0.1.0', [agentEvent('stalled', {}, now), agentEvent('resumed', {}, now)], now);
    await a.insertEvents('n2', '0.1.0', [agentEvent('stalled', {}, now)], now);
    await a.processIncidents({ nowMs: now, missedHeartbeats: 3, limit: 100 }, processStep(ENGINE, ['hook'], now));
    // 3 rows: n1 firing, n1 resolved, n2 firing. Only the oldest per incident is claimable.
    const [c1, c2] = await Promise.all([a.claimOutbox('A', now, 60_000, 10), other.claimOutbox('B', now, 60_000, 10)]);
    const claimed = [...c1, ...c2];
    expect(claimed.map((r) => r.notice.type).sort()).toEqual(['firing', 'firing']);
    expect(new Set(claimed.map((r) => r.id)).size).toBe(2);
    // nothing more until they complete
    expect(await a.claimOutbox('A', now, 60_000, 10)).toEqual([]);
    const n1 = claimed.find((r) => r.notice.incident.node === 'n1');
    const n2 = claimed.find((r) => r.notice.incident.node === 'n2');
    if (!n1 || !n2) throw new Error('missing claims');
    const owner1 = c1.includes(n1) ? 'A' : 'B';
    await a.completeOutbox(n1.id, owner1, { status: 'sent' }, now);
    // a completion by a non-owner is ignored
    await a.completeOutbox(n2.id, 'nobody', { status: 'sent' }, now);
    const next = await a.claimOutbox('A', now, 60_000, 10);
    expect(next.map((r) => r.notice.type)).toEqual(['resolved']);
    await a.completeOutbox(next[0]!.id, 'A', { status: 'retry', nextAttemptMs: now + 5000, error: 'HTTP 503' }, now);
    expect(await a.claimOutbox('A', now + 1000, 60_000, 10)).toEqual([]);
    // n2's lease expires: another claimer takes it over
    const re = await a.claimOutbox('C', now + 61_000, 60_000, 10);
    expect(re.map((r) => [r.id, r.attempts]).sort()).toEqual([[n2.id, 2], [next[0]!.id, 2]].sort());
    for (const r of re) await a.completeOutbox(r.id, 'C', r.id === n2.id ? { status: 'dead', error: 'HTTP 404' } : { status: 'sent' }, now);
    expect(await a.outboxStats()).toEqual({ pending: 0, sent: 2, dead: 1 });
    await other.close();
    await a.close();
  });

  it('only one instance processes at a time and every event is processed once', async () => {
    const { a, b } = await make();
    const other = b();
    await other.migrate();
    const now = Date.now();
    const evs = Array.from({ length: 50 }, (_, i) => agentEvent(i % 2 ? 'resumed' : 'stalled', { image: `r.example/x/img${i >> 1}:1` }, now));
    await a.insertEvents('n1', '0.1.0', evs, now);
    let total = 0;
    for (let round = 0; round < 20 && total < 50; round++) {
      const [x, y] = await Promise.all([
        a.processIncidents({ nowMs: now, missedHeartbeats: 3, limit: 7 }, processStep(ENGINE, ['hook'], now)),
        other.processIncidents({ nowMs: now, missedHeartbeats: 3, limit: 7 }, processStep(ENGINE, ['hook'], now)),
      ]);
      total += (x ?? 0) + (y ?? 0);
    }
    expect(total).toBe(50);
    expect(await a.listIncidents({ state: 'open' })).toEqual([]);
    expect((await a.listIncidents({ state: 'resolved' })).length).toBe(25);
    expect(await a.outboxStats()).toEqual({ pending: 50, sent: 0, dead: 0 });
    await other.close();
    await a.close();
  });

  it('agent-down for overdue nodes, stall stats by hour and registry, retention', async () => {
    const { a } = await make();
    const now = Date.now();
    await a.recordHeartbeat(heartbeat('quiet', { intervalSeconds: 10 }), now - 31_000);
    await a.recordHeartbeat(heartbeat('fine', { intervalSeconds: 10 }), now - 5_000);
    await a.processIncidents({ nowMs: now, missedHeartbeats: 3, limit: 100 }, processStep(ENGINE, ['hook'], now));
    const open = await a.listIncidents({ state: 'open' });
    expect(open.map((i) => [i.kind, i.node])).toEqual([['agent-down', 'quiet']]);
    const hour = Math.floor(now / 3_600_000) * 3_600_000;
    await a.insertEvents('n1', '0.1.0', [
      agentEvent('stalled', { image: 'docker.io/library/nginx:1' }, hour + 10),
      agentEvent('cancelled', { image: 'docker.io/library/nginx:2' }, hour + 20),
      agentEvent('stalled', { image: 'ghcr.io/o/r:1' }, hour - 3_600_000 + 5),
      agentEvent('resumed', { image: 'ghcr.io/o/r:1' }, hour - 3_600_000 + 6),
    ], now);
    const stats = await a.stallStats(hour - 3_600_000);
    expect(stats).toEqual([
      { hour: new Date(hour - 3_600_000).toISOString(), registry: 'ghcr.io', stalls: 1 },
      { hour: new Date(hour).toISOString(), registry: 'docker.io', stalls: 2 },
    ]);
    await a.processIncidents({ nowMs: now, missedHeartbeats: 3, limit: 100 }, processStep(ENGINE, ['hook'], now));
    const r = await a.retention(now + 15 * 86_400_000, 14 * 86_400_000);
    expect(r.events).toBe(4);
    expect(r.nodes).toBe(2);
    expect(await a.countEvents()).toBe(0);
    await a.close();
  });
});
