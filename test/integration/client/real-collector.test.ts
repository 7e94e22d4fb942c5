/**
 * The collector client against the REAL collector (startCollector, SQLite on disk): outages,
 * collector restarts mid-stream and agent restarts lose nothing and store every event exactly once,
 * in the order the agent produced them.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../../../common/log.js';
import { startCollector, type RunningCollector } from '../../../collector/run.js';
import { createCollectorSink, type CollectorSink } from '../../../agent/sinks/collector/sink.js';
import { fakeState, makeTransition, waitFor } from './helpers.js';

const TOKEN = 'e2e-token-0123456789abcdef0123456789abcdef';
const dirs: string[] = [];
const collectors: RunningCollector[] = [];
const sinks: CollectorSink[] = [];

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'pw-real-'));
  dirs.push(d);
  return d;
}
async function collector(db: string, port = 0): Promise<RunningCollector> {
  const c = await startCollector({ listen: `127.0.0.1:${port}`, db, tokens: [TOKEN], dashboard: false }, silentLogger());
  collectors.push(c);
  return c;
}
/** A fetch that remembers every event id it sent, first-send order (shared across agent restarts). */
const seenBy = new WeakMap<string[], Set<string>>();
function recordingFetch(sent: string[]): typeof fetch {
  const seen = seenBy.get(sent) ?? new Set<string>();
  seenBy.set(sent, seen);
  return async (input, init) => {
    if (String(input).endsWith('/v1/events') && typeof init?.body === 'string') {
      for (const e of (JSON.parse(init.body) as { events: Array<{ id: string }> }).events) {
        if (!seen.has(e.id)) { seen.add(e.id); sent.push(e.id); }
      }
    }
    return fetch(input, init);
  };
}
function sink(url: string, dir: string, sent: string[], node: string): CollectorSink {
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, TOKEN);
  const s = createCollectorSink({
    url, tokenFile, queueDir: join(dir, 'queue'), state: fakeState(node), logger: silentLogger(),
    heartbeatIntervalMs: 60_000, batchSize: 50, backoffInitialMs: 20, backoffMaxMs: 200, fetchImpl: recordingFetch(sent),
  });
  sinks.push(s);
  return s;
}

afterEach(async () => {
  for (const s of sinks.splice(0)) await s.close();
  for (const c of collectors.splice(0)) await c.stop();
});
afterAll(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });

describe('collector client ↔ real collector', () => {
  it('collector killed mid-stream and restarted → every event stored exactly once, in order', async () => {
    const dir = tempDir();
    const db = join(dir, 'collector.db');
    let col = await collector(db);
    const port = col.port;
    const sent: string[] = [];
    const s = sink(col.url, dir, sent, 'node-mid');
    for (let i = 0; i < 1500; i++) s.handle(makeTransition(i));
    s.start();
    await waitFor(async () => (await col.store.countEvents()) >= 200, 'some events stored');
    await col.stop(); // mid-stream: batches in flight fail or succeed without their response
    collectors.splice(collectors.indexOf(col), 1);
    for (let i = 1500; i < 1600; i++) s.handle(makeTransition(i)); // more while it is down
    await waitFor(() => s.stats().sendFailures >= 2, 'failed attempts while down');

    col = await collector(db, port);
    await waitFor(() => s.stats().queueDepth === 0, 'queue drained after the restart', 60_000);
    expect(await col.store.countEvents()).toBe(1600);
    const stored = await col.store.eventIds('node-mid');
    expect(stored.length).toBe(1600);
    expect(new Set(stored).size).toBe(1600);
    expect(stored).toEqual(sent);
    expect(s.stats().eventsDropped).toBe(0);
  });

  it('agent restarted with a full queue while the collector is down → nothing lost', async () => {
    const dir = tempDir();
    const db = join(dir, 'collector.db');
    let col = await collector(db);
    const port = col.port;
    await col.stop();
    collectors.splice(collectors.indexOf(col), 1);

    const sent: string[] = [];
    const first = sink(`http://127.0.0.1:${port}`, dir, sent, 'node-restart');
    first.start();
    for (let i = 0; i < 800; i++) first.handle(makeTransition(i));
    await waitFor(() => first.stats().sendFailures >= 1, 'first sink failing');
    const queued = first.stats().queueDepth;
    await first.close();
    sinks.splice(sinks.indexOf(first), 1);
    expect(queued).toBe(800);

    col = await collector(db, port);
    const second = sink(col.url, dir, sent, 'node-restart');
    second.start();
    await waitFor(async () => (await col.store.countEvents()) === 800, 'all 800 events after the agent restart', 60_000);
    const stored = await col.store.eventIds('node-restart');
    expect(new Set(stored).size).toBe(800);
    expect(stored).toEqual(sent);
  });
});
