import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { FakeKubeApi } from '../../harness/kube-api/server.js';
import { waitFor } from '../../harness/wait.js';
import { PodWatchSource, type PodWatchOptions } from '../../../agent/kube/pod-watch.js';
import { parsePod, sortWaits } from '../../../agent/kube/pods.js';
import { SourceHealth } from '../../../agent/sources/health.js';
import { silentLogger } from '../../../common/log.js';
import type { Observation, PodImageWait } from '../../../agent/model/observations.js';

const NODE = 'node-a';
const IDLE_MS = 1500;

let api: FakeKubeApi;
let dir: string;
let source: PodWatchSource | undefined;
let observed: Observation[];

function truth(): PodImageWait[] {
  const out: PodImageWait[] = [];
  for (const p of api.podsOn(NODE)) {
    const r = parsePod(p);
    if (!r.ok) throw new Error(r.error);
    out.push(...r.waits);
  }
  return sortWaits(out);
}

function lastPods(): PodImageWait[] | undefined {
  for (let i = observed.length - 1; i >= 0; i--) {
    const o = observed[i];
    if (o?.kind === 'pods') return o.pods;
  }
  return undefined;
}

/** Both the source's view and the last observation it emitted equal the server's state. */
async function converged(what: string, timeoutMs = 20_000): Promise<void> {
  await waitFor(() => {
    const want = JSON.stringify(truth());
    return JSON.stringify(source?.waits()) === want && JSON.stringify(lastPods()) === want;
  }, { timeoutMs, intervalMs: 25, what: `pod view to converge (${what}); truth ${truth().length} waits` });
}

async function startSource(over: Partial<PodWatchOptions> = {}): Promise<PodWatchSource> {
  const s = new PodWatchSource({
    nodeName: NODE,
    kubeConfig: api.writeKubeconfig(dir),
    idleTimeoutMs: IDLE_MS,
    watchTimeoutSeconds: 30,
    backoffInitialMs: 50,
    backoffMaxMs: 400,
    coalesceMs: 10,
    ...over,
  });
  await s.start({ emit: (o) => observed.push(o), health: new SourceHealth(silentLogger()), logger: silentLogger(), now: Date.now });
  source = s;
  return s;
}

function waitingPod(name: string, reason = 'ContainerCreating', image = 'registry.example.com/team/web:1.4.2', node = NODE): void {
  api.addPod({ namespace: 'shop', name, nodeName: node, containers: [{ name: 'app', image, waiting: reason }] });
}

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pw-kube-'));
  api = await FakeKubeApi.start({ nodeName: NODE, bookmarkIntervalMs: 400 });
  observed = [];
});

afterEach(async () => {
  await source?.stop();
  source = undefined;
  await api.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('PodWatchSource against the in-test API server', () => {
  it('lists, then follows the watch: waiting containers of this node only, and the runtime of the Node', async () => {
    waitingPod('a', 'ImagePullBackOff');
    waitingPod('elsewhere', 'ErrImagePull', 'docker.io/library/nginx:1.27', 'node-b');
    api.addPod({ namespace: 'shop', name: 'running', nodeName: NODE, containers: [{ name: 'app', image: 'nginx:1.27' }] });
    const s = await startSource();
    await converged('initial list');
    expect(s.waits().map((w) => [w.name, w.reason, w.image])).toEqual([['a', 'ImagePullBackOff', 'registry.example.com/team/web:1.4.2']]);
    await waitFor(() => observed.find((o) => o.kind === 'runtime'), { what: 'runtime observation' });
    const rt = observed.find((o) => o.kind === 'runtime');
    expect(rt?.kind === 'runtime' && rt.info).toEqual({ name: 'containerd', version: '1.7.24' });
    expect(s.nodeInfo()?.kubeletVersion).toBe('v1.31.4');

    waitingPod('b');
    await converged('pod added');
    api.setWaiting('shop', 'a', 'app', undefined);
    await converged('pod a started');
    api.deletePod('shop', 'b');
    await converged('pod b deleted');
    expect(s.waits()).toEqual([]);
    expect(s.stats().lists).toBe(1);
    // Bookmarks keep advancing the resourceVersion on a quiet watch.
    const bm = s.stats().bookmarks;
    await waitFor(() => s.stats().bookmarks > bm, { what: 'a bookmark' });
  });

  it('resumes from the last resourceVersion after a TCP reset mid-stream (no relist)', async () => {
    waitingPod('a');
    const s = await startSource();
    await converged('initial');
    await waitFor(() => api.openWatches() === 1, { what: 'watch open' });
    for (let round = 0; round < 3; round++) {
      expect(api.resetWatches()).toBe(1);
      waitingPod(`r${round}`, 'ErrImagePull');
      api.setWaiting('shop', 'a', 'app', round % 2 ? 'ContainerCreating' : 'ImagePullBackOff');
      await converged(`after reset ${round}`);
      await waitFor(() => api.openWatches() === 1, { what: 'watch re-opened' });
    }
    expect(s.stats().lists).toBe(1);
    expect(s.stats().watchesStarted).toBeGreaterThanOrEqual(4);
  });

  it('reconnects a watch that goes silent past the idle limit and catches up', async () => {
    waitingPod('a');
    const s = await startSource();
    await converged('initial');
    await waitFor(() => api.openWatches() === 1, { what: 'watch open' });
    const silencedAt = Date.now();
    expect(api.silenceWatches()).toBe(1);
    waitingPod('during-silence', 'ImagePullBackOff');
    api.deletePod('shop', 'a');
    await converged('after silent stall', IDLE_MS * 10);
    const took = Date.now() - silencedAt;
    // Not before the idle limit counted from the last bookmark (every 400 ms), not much after it.
    expect(took).toBeGreaterThanOrEqual(IDLE_MS - 450);
    expect(took).toBeLessThan(IDLE_MS * 6);
    expect(s.stats().idleReconnects).toBeGreaterThanOrEqual(1);
    expect(s.stats().lists).toBe(1);
  });

  it('relists on 410 Gone: ERROR event with a 410 Status, and HTTP 410', async () => {
    waitingPod('a');
    const s = await startSource();
    await converged('initial');
    await waitFor(() => api.openWatches() === 1, { what: 'watch open' });

    // History compacted while the watch was cut: resuming gets an ERROR 410 event.
    api.resetWatches();
    waitingPod('b');
    api.deletePod('shop', 'a');
    api.compact();
    await converged('after ERROR 410');
    expect(s.stats().relistsAfterGone).toBe(1);
    expect(s.stats().lists).toBe(2);

    // The watch request itself answered 410.
    await waitFor(() => api.openWatches() === 1, { what: 'watch open' });
    api.failNextWatches(1, 410);
    api.resetWatches();
    waitingPod('c', 'ErrImagePull');
    await converged('after HTTP 410');
    expect(s.stats().relistsAfterGone).toBe(2);
    expect(s.stats().lists).toBe(3);
  });

  it('rides out an API server that is down for a while (connection refused), then converges', async () => {
    waitingPod('a');
    const s = await startSource();
    await converged('initial');
    await api.down();
    // State changes while the agent cannot see them; history is compacted meanwhile too.
    waitingPod('b', 'ImagePullBackOff');
    api.deletePod('shop', 'a');
    api.compact();
    await sleep(3000);
    const errorsWhileDown = s.stats().errors;
    expect(errorsWhileDown).toBeGreaterThanOrEqual(2);
    // Backoff keeps the retry rate bounded: at most one try per backoffInitial… doubling to 400 ms.
    expect(errorsWhileDown).toBeLessThan(3000 / 50);
    await api.up();
    await converged('after the API came back');
    expect(s.stats().relistsAfterGone).toBeGreaterThanOrEqual(1);
    // And it keeps following changes afterwards.
    waitingPod('c');
    await converged('after recovery');
  });

  it('a 1,000-pod node: one list, and a view that matches the server', async () => {
    for (let i = 0; i < 1000; i++) waitingPod(`p${String(i).padStart(4, '0')}`, i % 3 ? 'ContainerCreating' : 'ImagePullBackOff');
    const s = await startSource();
    await converged('1,000 pods');
    expect(s.waits()).toHaveLength(1000);
    // Changes are coalesced into few observations, never one per pod.
    for (let i = 0; i < 200; i++) api.setWaiting('shop', `p${String(i).padStart(4, '0')}`, 'app', undefined);
    await converged('200 pods started');
    expect(s.waits()).toHaveLength(800);
    expect(observed.filter((o) => o.kind === 'pods').length).toBeLessThan(60);
  });

  it('reports a missing kubeconfig through health instead of throwing', async () => {
    const health = new SourceHealth(silentLogger());
    const s = new PodWatchSource({ nodeName: NODE, kubeConfig: join(dir, 'nope.yaml') });
    await s.start({ emit: () => undefined, health, logger: silentLogger(), now: Date.now });
    await s.stop();
    expect(health.snapshot().map((e) => e.cause)).toEqual(['config']);
  });
});
