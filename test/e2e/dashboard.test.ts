/**
 * The dashboard in a real headless Chromium (Debian's /usr/bin/chromium through playwright-core),
 * served by a real collector (SQLite): a stalled pull and its incident appear live after load.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserServer, type Page } from 'playwright-core';
import { silentLogger } from '../../common/log.js';
import { startCollector, type RunningCollector } from '../../collector/run.js';
import type { PullRecord } from '../../agent/model/pulls.js';
import type { EventBatch, Heartbeat } from '../../common/wire.js';

const CHROMIUM = '/usr/bin/chromium';
const TOKEN = 'dashboard-e2e-token-5f1c0b8e2a9d4c7b';
const XSS = '<img src=x onerror="window.__pwned=1">';

let dir: string;
let collector: RunningCollector;
let server: BrowserServer;
let browserPid: number | undefined;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];
/** The pull the first test reports stalled (the last test completes it). */
let reported: PullRecord | undefined;

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install Debian's chromium (scripts/ensure-test-deps.sh)`);
  dir = mkdtempSync(join(tmpdir(), 'pw-e2e-'));
  // No flap window: a completed pull resolves its incident at the next tick (1 s).
  collector = await startCollector({ listen: '127.0.0.1:0', db: join(dir, 'collector.db'), tokens: [TOKEN], flapWindowMs: 0 }, silentLogger());
  // launchServer gives the browser's pid (killed in afterAll) and a fresh temporary user-data dir.
  server = await chromium.launchServer({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  browserPid = server.process().pid;
  browser = await chromium.connect(server.wsEndpoint());
  page = await browser.newPage({ viewport: { width: 1400, height: 900 }, colorScheme: 'dark' });
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()); });
});

afterAll(async () => {
  await browser?.close().catch(() => undefined);
  await server?.close().catch(() => undefined);
  if (browserPid) { try { process.kill(browserPid, 'SIGKILL'); } catch { /* already gone */ } }
  await collector?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function stalledPull(): PullRecord {
  const now = Date.now();
  const iso = (msAgo: number): string => new Date(now - msAgo).toISOString();
  return {
    id: `registry.e2e.test/team/api:1.2.3@${iso(400_000)}`,
    image: 'registry.e2e.test/team/api:1.2.3',
    registry: 'registry.e2e.test',
    repository: 'team/api',
    state: 'stalled',
    startedAt: iso(400_000), updatedAt: iso(1000), lastProgressAt: iso(312_000),
    idleSeconds: 312, rateBytesPerSecond: 0,
    bytesDone: 88_270_000, bytesTotal: 141_900_000,
    layers: [
      { digest: `sha256:${'a1'.repeat(32)}`, kind: 'layer', state: 'committed', bytesDone: 31_000_000, bytesTotal: 31_000_000, idleSeconds: 0, rateBytesPerSecond: 0, startedAt: iso(400_000) },
      { digest: `sha256:${'b2'.repeat(32)}`, kind: 'layer', state: 'stalled', bytesDone: 57_270_000, bytesTotal: 88_270_000, idleSeconds: 312, rateBytesPerSecond: 0, startedAt: iso(390_000) },
      { digest: `sha256:${'c3'.repeat(32)}`, kind: 'layer', state: 'stalled', bytesDone: 0, bytesTotal: 22_630_000, idleSeconds: 312, rateBytesPerSecond: 0, startedAt: iso(390_000) },
    ],
    runtime: { name: 'containerd', version: '1.6.20' },
    runtimeDeadlineMs: null,
    pods: [{ namespace: 'payments', name: `api-7d9f8c-${XSS}`, container: 'api', reason: 'ContainerCreating' }],
    idleGapsMs: [312_000],
  };
}

async function post(path: string, body: unknown): Promise<void> {
  const r = await fetch(`${collector.url}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` }, body: JSON.stringify(body),
  });
  expect(r.status, await r.clone().text()).toBe(200);
}

describe('dashboard in headless Chromium', () => {
  it('shows a stalled pull and its incident live, escapes data, and renders a readable page', async () => {
    await page.goto(`${collector.url}/`);
    await page.waitForSelector('#status.live', { timeout: 20_000 });
    expect(await page.textContent('#incidents')).toContain('No open incidents');
    expect(await page.textContent('#pulls')).toContain('No pulls in flight');

    // After load: a node heartbeats and reports a stalled pull (real HTTP, bearer token).
    const pull = stalledPull();
    reported = pull;
    const hb: Heartbeat = {
      node: 'e2e-node-1', agentVersion: '0.1.0', runtime: { name: 'containerd', version: '1.6.20', pullDeadlineMs: null },
      pullsInFlight: [pull], eventsDropped: 0, queueDepth: 0, sourceErrors: 0, intervalSeconds: 30, at: new Date().toISOString(),
    };
    await post('/v1/heartbeat', hb);
    const started = { ...pull, state: 'downloading' as const, idleSeconds: 0 };
    const batch: EventBatch = {
      node: 'e2e-node-1', agentVersion: '0.1.0',
      events: [
        { id: crypto.randomUUID(), at: pull.startedAt, kind: 'started', pull: started },
        { id: crypto.randomUUID(), at: pull.updatedAt, kind: 'stalled', pull },
      ],
    };
    await post('/v1/events', batch);

    // Live: no reload, the 2 s poll brings them in.
    const row = page.locator(`tr[data-pull-id="${pull.id}"]`);
    await row.waitFor({ timeout: 20_000 });
    await expect.poll(async () => row.textContent(), { timeout: 10_000 }).toContain('registry.e2e.test/team/api:1.2.3');
    expect(await row.locator('.badge').first().textContent()).toBe('stalled');
    expect(await row.locator('.layer').count()).toBe(3);
    expect(await row.textContent()).toMatch(/5m[1-5]\ds/); // 312 s without bytes, counted live

    const incident = page.locator('.incident[data-incident-id]');
    await incident.first().waitFor({ timeout: 20_000 });
    const incidentText = (await incident.first().textContent()) ?? '';
    expect(incidentText).toContain('registry.e2e.test/team/api:1.2.3');
    expect(incidentText).toContain('e2e-node-1');

    const node = page.locator('tr[data-node="e2e-node-1"]');
    await node.waitFor({ timeout: 20_000 });
    expect(await node.textContent()).toContain('containerd 1.6.20');
    expect(await node.textContent()).toContain('none'); // no pull deadline on containerd 1.6

    await expect.poll(async () => page.locator('#chart rect').count(), { timeout: 10_000 }).toBeGreaterThan(0);
    expect(await page.textContent('#chart .legend')).toContain('registry.e2e.test');
    expect(await page.textContent('#summary')).toMatch(/1\s*stalled pulls/i);
    expect(await page.title()).toContain('stalled');

    // Data is text, never markup: the pod name's <img onerror> is shown literally and never runs.
    expect(await row.textContent()).toContain(XSS.slice(0, 20));
    expect(await page.locator('img[src="x"]').count()).toBe(0);
    // (runs in the page; globalThis is the page's window there)
    expect(await page.evaluate(() => (globalThis as unknown as { __pwned?: number }).__pwned)).toBeUndefined();

    const shot = join(dir, 'dashboard.png');
    await page.screenshot({ path: shot, fullPage: true });
    const png = readFileSync(shot);
    expect(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))).toBe(true);
    expect(statSync(shot).size).toBeGreaterThan(20_000);
    if (process.env.PULLWATCH_E2E_SCREENSHOT) {
      const { copyFileSync } = await import('node:fs');
      copyFileSync(shot, process.env.PULLWATCH_E2E_SCREENSHOT);
    }
    expect(pageErrors).toEqual([]);
  });

  it('says so when the collector stops answering, keeping the last data on screen', async () => {
    await page.route('**/v1/**', (route) => route.abort('connectionrefused'));
    await page.waitForSelector('#status.down', { timeout: 15_000 });
    expect(await page.textContent('#status')).toContain('collector unreachable');
    expect(await page.locator('tr[data-node="e2e-node-1"]').count()).toBe(1);
    await page.unroute('**/v1/**');
    await page.waitForSelector('#status.live', { timeout: 15_000 });
    // The refused loads were logged by the browser as console errors; only those, nothing thrown.
    expect(pageErrors.every((e) => /Failed to load resource/.test(e))).toBe(true);
    pageErrors.length = 0;
  });

  it('moves the incident to "recently resolved" and the pull out of flight when it completes', async () => {
    const pull = reported!;
    const done: PullRecord = {
      ...pull, state: 'completed', idleSeconds: 0, bytesDone: 141_900_000, finishedAt: new Date().toISOString(), durationMs: 420_000,
      layers: pull.layers.map((l) => ({ ...l, state: 'committed' as const, bytesDone: l.bytesTotal ?? l.bytesDone, idleSeconds: 0 })),
    };
    await post('/v1/events', { node: 'e2e-node-1', agentVersion: '0.1.0', events: [{ id: crypto.randomUUID(), at: done.finishedAt!, kind: 'completed', pull: done }] } satisfies EventBatch);
    await page.locator('.recent li').first().waitFor({ timeout: 20_000 });
    expect(await page.textContent('.recent')).toContain('registry.e2e.test/team/api:1.2.3');
    await expect.poll(async () => page.locator('.incident[data-incident-id]').count(), { timeout: 10_000 }).toBe(0);
    await expect.poll(async () => page.textContent('#pulls'), { timeout: 10_000 }).toContain('No pulls in flight');
    expect(await page.textContent('#incidents')).toContain('No open incidents');
    expect(pageErrors).toEqual([]);
  });
});
