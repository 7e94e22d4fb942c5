import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { appendFileSync, mkdtempSync, readdirSync, rmSync, writeFileSync, renameSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../../../common/log.js';
import { createCollectorSink, type CollectorSink, type CollectorSinkOptions } from '../../../agent/sinks/collector/sink.js';
import { fakeState, makePull, makeTransition, RecordingCollector, waitFor } from './helpers.js';

const dirs: string[] = [];
const sinks: CollectorSink[] = [];
const servers: RecordingCollector[] = [];

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'pw-client-'));
  dirs.push(d);
  return d;
}
async function server(): Promise<RecordingCollector> {
  const s = new RecordingCollector();
  servers.push(s);
  await s.start();
  return s;
}
function sink(o: Partial<CollectorSinkOptions> & { url: string; queueDir: string }): CollectorSink {
  const s = createCollectorSink({
    state: fakeState(), logger: silentLogger(), heartbeatIntervalMs: 60_000,
    backoffInitialMs: 20, backoffMaxMs: 200, ...o,
  });
  sinks.push(s);
  return s;
}
const imageNo = (image: string): number => Number(/app(\d+)/.exec(image)?.[1]);

afterEach(async () => {
  for (const s of sinks.splice(0)) await s.close();
  for (const s of servers.splice(0)) await s.stop();
});
afterAll(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });

describe('collector client (real HTTP on 127.0.0.1)', () => {
  it('posts batches with the bearer token from the file, and re-reads the file when it changes', async () => {
    const col = await server();
    const dir = tempDir();
    const tokenFile = join(dir, 'token');
    writeFileSync(tokenFile, 'first-token\n');
    col.token = 'first-token';
    const s = sink({ url: col.url, queueDir: join(dir, 'q'), tokenFile, batchSize: 10 });
    s.start();
    for (let i = 0; i < 25; i++) s.handle(makeTransition(i));
    await waitFor(() => col.rec.events.length === 25, '25 events');
    expect(col.rec.events.map((e) => imageNo(e.pull.image))).toEqual(Array.from({ length: 25 }, (_, i) => i));
    expect(col.rec.batches).toBeGreaterThanOrEqual(3);
    const first = col.rec.events[0]!;
    expect(first.kind).toBe('stalled');
    expect(first.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(first.pull).toEqual(makePull(0));

    // Secret rotation: collector takes only the new token; the client must pick up the new file (atomic rename, like a kubelet Secret update).
    col.token = 'second-token';
    writeFileSync(`${tokenFile}.new`, 'second-token');
    renameSync(`${tokenFile}.new`, tokenFile);
    for (let i = 25; i < 30; i++) s.handle(makeTransition(i));
    await waitFor(() => col.rec.events.length === 30, '5 more events with the new token');
    expect(col.rec.authHeaders.at(-1)).toBe('Bearer second-token');
    await waitFor(() => s.stats().queueDepth === 0, 'acked'); // the response may still be on its way
    expect(s.stats()).toMatchObject({ eventsSent: 30, queueDepth: 0, eventsDropped: 0 });
  });

  it('collector down for a while → everything delivered after it returns, in order, exactly once', async () => {
    const col = await server();
    const dir = tempDir();
    const s = sink({ url: col.url, queueDir: dir, batchSize: 50 });
    s.start();
    for (let i = 0; i < 20; i++) s.handle(makeTransition(i));
    await waitFor(() => col.rec.events.length === 20, 'first 20 events');

    await col.stop(); // connection refused from now on
    for (let i = 20; i < 320; i++) s.handle(makeTransition(i));
    await waitFor(() => s.stats().sendFailures >= 3, 'a few failed attempts');
    expect(s.stats().queueDepth).toBe(300);

    // A flaky return: the collector answers 503 and 429 (with Retry-After) before accepting.
    let refusals = 0;
    col.intercept = (path) => {
      if (path !== '/v1/events' || refusals >= 2) return undefined;
      refusals++;
      return refusals === 1 ? { status: 503 } : { status: 429, headers: { 'retry-after': '0' } };
    };
    await col.start(); // same port
    await waitFor(() => col.rec.events.length === 320, 'all 320 events after the outage');
    expect(refusals).toBe(2);
    expect(col.rec.events.map((e) => imageNo(e.pull.image))).toEqual(Array.from({ length: 320 }, (_, i) => i));
    expect(new Set(col.rec.events.map((e) => e.id)).size).toBe(320);
    await waitFor(() => s.stats().queueDepth === 0, 'acked');
    expect(s.stats()).toMatchObject({ queueDepth: 0, eventsDropped: 0, eventsSent: 320 });
  });

  it('a lost response makes the client resend; the collector dedups by id (exactly once)', async () => {
    const col = await server();
    const s = sink({ url: col.url, queueDir: tempDir(), batchSize: 100 });
    // Accept the first batch but answer 500 as if the response was lost.
    let lost = false;
    col.intercept = (path, body) => {
      if (path !== '/v1/events' || lost) return undefined;
      lost = true;
      const b = body as { events: Array<{ id: string }> };
      // Record as the real collector would have stored it, then fail the response.
      (col as unknown as { seen: Set<string> }).seen = new Set(b.events.map((e) => e.id));
      col.rec.events.push(...(b.events as never[]));
      return { status: 500 };
    };
    for (let i = 0; i < 10; i++) s.handle(makeTransition(i));
    s.start();
    await waitFor(() => s.stats().eventsSent === 10, 'the resend acked');
    expect(col.rec.duplicates).toBe(10);
    expect(col.rec.events.length).toBe(10);
  });

  it('agent restarted with a full queue → nothing lost', async () => {
    const col = await server();
    await col.stop();
    const dir = tempDir();
    const first = sink({ url: col.url, queueDir: dir, batchSize: 200 });
    first.start();
    for (let i = 0; i < 1000; i++) first.handle(makeTransition(i));
    await waitFor(() => first.stats().sendFailures >= 1, 'first attempt failed');
    await first.close();

    await col.start();
    const second = sink({ url: col.url, queueDir: dir, batchSize: 200 });
    expect(second.stats().queueDepth).toBe(1000);
    second.start();
    await waitFor(() => col.rec.events.length === 1000, 'all 1000 queued events after restart');
    expect(col.rec.events.map((e) => imageNo(e.pull.image))).toEqual(Array.from({ length: 1000 }, (_, i) => i));
    expect(col.rec.duplicates).toBe(0);
    await waitFor(() => second.stats().queueDepth === 0, 'acked');
  });

  it('a torn tail record (crash mid-write) is skipped and counted; every whole event is delivered', async () => {
    const col = await server();
    await col.stop();
    const dir = tempDir();
    const first = sink({ url: col.url, queueDir: dir });
    for (let i = 0; i < 50; i++) first.handle(makeTransition(i));
    await first.close();
    const seg = readdirSync(dir).find((n) => n.endsWith('.pwq'))!;
    const torn = Buffer.alloc(40, 0x7b);
    Buffer.from('PWQ1', 'latin1').copy(torn, 0);
    torn.writeUInt32BE(500, 4);
    appendFileSync(join(dir, seg), torn);

    await col.start();
    const second = sink({ url: col.url, queueDir: dir, heartbeatIntervalMs: 100 });
    second.start();
    await waitFor(() => col.rec.events.length === 50, '50 events');
    await waitFor(() => second.stats().queueDepth === 0, 'acked');
    expect(second.stats()).toMatchObject({ tornRecords: 1, queueDepth: 0, eventsDropped: 0 });
    second.handle(makeTransition(50));
    await waitFor(() => col.rec.events.length === 51, 'new events after the torn tail');
  });

  it('a 4xx for one bad event drops only that event (logged, counted, reported in heartbeats)', async () => {
    const col = await server();
    col.intercept = (path, body) => {
      if (path !== '/v1/events') return undefined;
      const b = body as { events: Array<{ pull: { image: string } }> };
      return b.events.some((e) => e.pull.image.includes('app13:')) ? { status: 400, body: { error: 'invalid_body', reason: 'events.13: test says no' } } : undefined;
    };
    const s = sink({ url: col.url, queueDir: tempDir(), batchSize: 32, heartbeatIntervalMs: 100 });
    for (let i = 0; i < 40; i++) s.handle(makeTransition(i));
    s.start();
    await waitFor(() => s.stats().queueDepth === 0, 'queue drained');
    expect(col.rec.events.map((e) => imageNo(e.pull.image))).toEqual(Array.from({ length: 40 }, (_, i) => i).filter((i) => i !== 13));
    expect(s.stats()).toMatchObject({ droppedRejected: 1, eventsDropped: 1, eventsSent: 39 });
    await waitFor(() => col.rec.heartbeats.some((h) => h.eventsDropped === 1), 'heartbeat reporting eventsDropped=1');
    expect(s.stats().lastError).toContain('test says no');
  });

  it('401 is retried, not dropped: the events wait until the token is fixed', async () => {
    const col = await server();
    col.token = 'right';
    const dir = tempDir();
    const tokenFile = join(dir, 'token');
    writeFileSync(tokenFile, 'wrong');
    const s = sink({ url: col.url, queueDir: join(dir, 'q'), tokenFile });
    s.start();
    for (let i = 0; i < 5; i++) s.handle(makeTransition(i));
    await waitFor(() => s.stats().sendFailures >= 2, 'rejected attempts');
    expect(s.stats().lastError).toMatch(/401/);
    expect(s.stats().queueDepth).toBe(5);
    writeFileSync(tokenFile, 'right!!'); // different size → new stat key
    writeFileSync(tokenFile, 'right');
    await waitFor(() => col.rec.events.length === 5, 'delivered with the fixed token');
    expect(s.stats().eventsDropped).toBe(0);
  });

  it('heartbeats carry pulls in flight, runtime, counters and queue depth', async () => {
    const col = await server();
    const pulls = [makePull(1), makePull(2, { state: 'completed' }), makePull(3, { state: 'downloading' })];
    const state = fakeState('node-hb', pulls);
    state.errors = 4;
    const s = sink({ url: col.url, queueDir: tempDir(), state, heartbeatIntervalMs: 150 });
    s.start();
    await waitFor(() => col.rec.heartbeats.length >= 2, 'two heartbeats');
    const hb = col.rec.heartbeats.at(-1)!;
    expect(hb).toMatchObject({
      node: 'node-hb', agentVersion: '0.1.0-test', eventsDropped: 0, queueDepth: 0, sourceErrors: 4, intervalSeconds: 0.15,
      runtime: { name: 'containerd', version: '1.6.20', pullDeadlineMs: null },
    });
    expect(hb.pullsInFlight.map((p) => p.image)).toEqual([pulls[0]!.image, pulls[2]!.image]);
  });

  it('a full queue drops the oldest unsent events and says how many in the heartbeat', async () => {
    const col = await server();
    await col.stop();
    const s = sink({ url: col.url, queueDir: tempDir(), queueMaxBytes: 64 * 1024, heartbeatIntervalMs: 100 });
    s.start();
    for (let i = 0; i < 300; i++) s.handle(makeTransition(i));
    const st = s.stats();
    expect(st.droppedQueueFull).toBeGreaterThan(0);
    expect(st.droppedQueueFull + st.queueDepth).toBe(300);
    await col.start();
    await waitFor(() => col.rec.events.length === st.queueDepth, 'the kept events');
    await waitFor(() => col.rec.heartbeats.some((h) => h.eventsDropped === st.droppedQueueFull), 'heartbeat with eventsDropped');
    // The newest were kept.
    expect(imageNo(col.rec.events.at(-1)!.pull.image)).toBe(299);
  });

  it('refuses a bad collector URL with a clear error', () => {
    expect(() => createCollectorSink({ url: 'not a url', queueDir: tempDir(), state: fakeState(), logger: silentLogger() })).toThrow(/invalid collector URL/);
    expect(() => createCollectorSink({ url: 'ftp://x', queueDir: tempDir(), state: fakeState(), logger: silentLogger() })).toThrow(/http/);
  });
});
