/**
 * Faults: the collector stopped mid-stream and restarted on the same database (SQLite and
 * PostgreSQL) loses and duplicates nothing; two collector replicas on one PostgreSQL send each
 * notification exactly once.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { silentLogger } from '../../../common/log.js';
import { startCollector, type CollectorOptions, type RunningCollector } from '../../../collector/run.js';
import type { WebhookPayload } from '../../../collector/notifiers/webhook.js';
import { openStore } from '../../../collector/store/open.js';
import type { AgentEvent } from '../../../common/wire.js';
import { startPostgres, createDatabase, type PgServer } from '../../harness/postgres.js';
import { Receiver } from './receiver.js';
import { agentEvent, waitFor } from './fixtures.js';

const TOKEN = 'fault-token';
let pgServer: PgServer | undefined;
let dir: string;
let dbN = 0;
const cleanups: Array<() => Promise<void> | void> = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pullwatch-faults-'));
  pgServer = await startPostgres();
});
afterEach(async () => { while (cleanups.length) await cleanups.pop()?.(); });
afterAll(async () => {
  await pgServer?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function freshDb(kind: 'sqlite' | 'postgres'): Promise<string> {
  if (kind === 'sqlite') return join(dir, `f${dbN++}.db`);
  if (!pgServer) throw new Error('PostgreSQL did not start');
  return createDatabase(pgServer.url, `f${dbN++}`);
}
async function collector(opts: CollectorOptions): Promise<RunningCollector> {
  const c = await startCollector({
    listen: '127.0.0.1:0', tokens: [TOKEN], flapWindowMs: 0, updateThrottleMs: 0, tickMs: 100, dashboard: false,
    rateLimit: { perSecond: 10_000, burst: 10_000 }, outbox: { pollMs: 50, baseBackoffMs: 50, maxBackoffMs: 200 }, ...opts,
  }, silentLogger());
  cleanups.push(() => c.stop());
  return c;
}
async function post(url: string, node: string, events: AgentEvent[]): Promise<number> {
  try {
    const r = await fetch(`${url}/v1/events`, {
      method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ node, agentVersion: '0.1.0', events }), signal: AbortSignal.timeout(5000),
    });
    await r.arrayBuffer();
    return r.status;
  } catch {
    return 0;
  }
}

describe.each(['sqlite', 'postgres'] as const)('collector restart mid-stream (%s)', (kind) => {
  it('every event is stored exactly once', async () => {
    const db = await freshDb(kind);
    let current = await collector({ db });
    const batches: AgentEvent[][] = Array.from({ length: 120 }, (_, b) =>
      Array.from({ length: 25 }, (_, i) => agentEvent(i % 3 ? 'started' : 'stalled', { image: `r${b % 4}.example.com/app:${i}` })));
    const allIds = batches.flat().map((e) => e.id);
    let next = 0;
    let retries = 0;
    const worker = async (w: number) => {
      for (;;) {
        const b = next++;
        if (b >= batches.length) return;
        // an agent resends a batch until it is acknowledged
        while ((await post(current.url, `node-${w}`, batches[b]!)) !== 200) { retries++; await new Promise((r) => setTimeout(r, 20)); }
        await new Promise((r) => setTimeout(r, 10)); // a stream, not a burst: the stop lands mid-way
      }
    };
    const senders = Promise.all([0, 1, 2, 3].map(worker));
    await waitFor('a third of the stream', async () => (await current.store.countEvents()) >= 500);
    const old = current;
    const stopping = old.stop();
    await stopping;
    await new Promise((r) => setTimeout(r, 300)); // down for a while, as in a real restart: agents get refused
    current = await collector({ db });
    await senders;
    const store = current.store;
    const ids = await store.eventIds();
    expect(ids.length).toBe(allIds.length);
    expect([...ids].sort()).toEqual([...allIds].sort());
    expect(retries).toBeGreaterThan(0); // the stop really interrupted the stream
    await current.processNow();
    const again = await openStore(db);
    try { expect(await again.countEvents()).toBe(3000); } finally { await again.close(); }
  });
});

interface Child { url: string; pid: number; exited: Promise<void> }
const children = new Set<number>();
afterEach(() => { for (const pid of children) { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } } children.clear(); });

/** The collector in its own process (so it can be killed -9). */
async function spawnCollector(opts: CollectorOptions): Promise<Child> {
  const file = fileURLToPath(new URL('./collector-process.ts', import.meta.url));
  const child = spawn(process.execPath, ['--import', 'tsx', file, JSON.stringify(opts)], { stdio: ['ignore', 'pipe', 'pipe'] });
  if (!child.pid) throw new Error('could not spawn the collector process');
  children.add(child.pid);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  let err = '';
  child.stderr.on('data', (d: Buffer) => { err = (err + d.toString()).slice(-2000); });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const t = setTimeout(() => reject(new Error(`collector process did not start in 60s: ${err}`)), 60_000);
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /LISTENING (\S+)/.exec(out);
      if (m?.[1]) { clearTimeout(t); resolve(m[1]); }
    });
    child.once('exit', (code) => { clearTimeout(t); reject(new Error(`collector process exited (${code}): ${err}`)); });
  });
  return { url, pid: child.pid, exited };
}

describe.each(['sqlite', 'postgres'] as const)('collector killed -9 mid-stream (%s)', (kind) => {
  it('restarted on the same database: every event exactly once, every notification delivered', async () => {
    const hook = await new Receiver().start();
    cleanups.push(() => hook.stop());
    const db = await freshDb(kind);
    const opts: CollectorOptions = {
      listen: '127.0.0.1:0', db, tokens: [TOKEN], flapWindowMs: 0, dashboard: false, webhooks: [hook.url('/h')],
      rateLimit: { perSecond: 10_000, burst: 10_000 }, outbox: { pollMs: 50, leaseMs: 2000, baseBackoffMs: 50, maxBackoffMs: 200 },
    };
    let current = await spawnCollector(opts);
    // 80 batches; every 4th event a stall on its own registry (its own incident and notification)
    const batches: AgentEvent[][] = Array.from({ length: 80 }, (_, b) => Array.from({ length: 20 }, (_, i) =>
      i % 4 === 0 ? agentEvent('stalled', { image: `k${b}-${i}.example.com/app:1` }) : agentEvent('started', { image: `k.example.com/app:${b}-${i}` })));
    let next = 0;
    let refused = 0;
    const worker = async (w: number) => {
      for (;;) {
        const b = next++;
        if (b >= batches.length) return;
        while ((await post(current.url, `node-${w}`, batches[b]!)) !== 200) { refused++; await new Promise((r) => setTimeout(r, 20)); }
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    const senders = Promise.all([0, 1, 2, 3].map(worker));
    const reader = await openStore(db);
    cleanups.push(() => reader.close());
    await waitFor('a quarter of the stream', async () => (await reader.countEvents()) >= 400, 60_000);
    process.kill(current.pid, 'SIGKILL');
    await current.exited;
    children.delete(current.pid);
    await new Promise((r) => setTimeout(r, 300));
    current = await spawnCollector(opts);
    await senders;
    const all = batches.flat();
    const ids = await reader.eventIds();
    expect(ids.length).toBe(all.length);
    expect([...ids].sort()).toEqual(all.map((e) => e.id).sort());
    expect(refused).toBeGreaterThan(0);
    // one firing notice per stalled image; none lost (a kill between send and mark may repeat one: same delivery id)
    const expected = all.filter((e) => e.kind === 'stalled').length;
    await waitFor('all notifications', () => new Set(hook.requests.map((r) => (r.json as WebhookPayload).deliveryId)).size >= expected, 60_000);
    const images = new Set(hook.requests.map((r) => (r.json as WebhookPayload).incident.image));
    expect(images.size).toBe(expected);
    process.kill(current.pid, 'SIGTERM');
    await current.exited;
    children.delete(current.pid);
  });
});

describe('two collector replicas on one PostgreSQL', () => {
  it('each notification is sent exactly once', async () => {
    const hook = await new Receiver().start();
    cleanups.push(() => hook.stop());
    const db = await freshDb('postgres');
    const a = await collector({ db, webhooks: [hook.url('/h')] });
    const b = await collector({ db, webhooks: [hook.url('/h')] });
    const t = Date.now();
    const N = 20;
    await Promise.all(Array.from({ length: N }, (_, i) => post((i % 2 ? a : b).url, `node-${i}`, [agentEvent('stalled', { image: `reg${i}.example.com/app:1` }, t)])));
    await waitFor('all firing', () => hook.requests.length >= N);
    await Promise.all(Array.from({ length: N }, (_, i) => post((i % 2 ? b : a).url, `node-${i}`, [agentEvent('completed', { image: `reg${i}.example.com/app:1` }, t + 1)])));
    await waitFor('all resolved', () => hook.requests.length >= 2 * N);
    await waitFor('all recorded as sent', async () => (await a.store.outboxStats()).sent === 2 * N);
    await new Promise((r) => setTimeout(r, 1000));
    const payloads = hook.requests.map((r) => r.json as WebhookPayload);
    expect(payloads.length).toBe(2 * N);
    expect(new Set(payloads.map((p) => p.deliveryId)).size).toBe(2 * N);
    for (let i = 0; i < N; i++) {
      expect(payloads.filter((p) => p.incident.node === `node-${i}`).map((p) => p.type)).toEqual(['firing', 'resolved']);
    }
    const sentA = (await a.metrics.notificationsSent.get()).values.reduce((s, v) => s + v.value, 0);
    const sentB = (await b.metrics.notificationsSent.get()).values.reduce((s, v) => s + v.value, 0);
    expect(sentA + sentB).toBe(2 * N);
    expect(await a.store.outboxStats()).toEqual({ pending: 0, sent: 2 * N, dead: 0 });
  });
});
