import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FakeKubeApi } from '../../harness/kube-api/server.js';
import { waitFor } from '../../harness/wait.js';
import { createKubeEventsSink, type KubeEventsSink, type KubeEventsSinkOptions } from '../../../agent/kube/events-sink.js';
import { PodWatchSource } from '../../../agent/kube/pod-watch.js';
import { SourceHealth } from '../../../agent/sources/health.js';
import { silentLogger } from '../../../common/log.js';
import { stalledPull, transition } from '../../unit/kube/pull-fixture.js';
import type { PodRef, Transition } from '../../../agent/model/pulls.js';

const NODE = 'node-a';
const IMAGE = 'registry.example.com/team/web:1.4.2';
type Json = Record<string, unknown>;

let api: FakeKubeApi;
let dir: string;
let sink: KubeEventsSink | undefined;
let source: PodWatchSource | undefined;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pw-kube-ev-'));
  api = await FakeKubeApi.start({ nodeName: NODE, bookmarkIntervalMs: 500 });
});

afterEach(async () => {
  await sink?.close();
  sink = undefined;
  await source?.stop();
  source = undefined;
  await api.close();
  rmSync(dir, { recursive: true, force: true });
});

function makeSink(over: Partial<KubeEventsSinkOptions> = {}): KubeEventsSink {
  sink = createKubeEventsSink({ nodeName: NODE, kubeConfig: api.writeKubeconfig(dir), logger: silentLogger(), retryBaseMs: 50, ...over });
  return sink;
}

function events(): Json[] {
  return [...api.events.values()];
}

function eventRequests(): typeof api.requests {
  return api.requests.filter((r) => r.path.includes('/events'));
}

describe('Kubernetes Events sink against the in-test API server', () => {
  it('creates a PullStalled Warning on the waiting pod that `kubectl describe pod` finds (uid, fieldPath, note)', async () => {
    const pod = api.addPod({ namespace: 'shop', name: 'web-1', nodeName: NODE, containers: [{ name: 'web', image: IMAGE, waiting: 'ContainerCreating' }] });
    source = new PodWatchSource({ nodeName: NODE, kubeConfig: api.writeKubeconfig(dir), coalesceMs: 10 });
    await source.start({ emit: () => undefined, health: new SourceHealth(silentLogger()), logger: silentLogger(), now: Date.now });
    await waitFor(() => source?.waits().length === 1, { what: 'pod view' });
    const s = makeSink({ podLookup: (ns, name) => source?.lookup(ns, name) ?? [] });
    s.handle(transition('stalled', stalledPull([{ namespace: 'shop', name: 'web-1', container: 'web' }])));
    await s.idle();
    expect(events()).toHaveLength(1);
    const ev = events()[0] as Json;
    expect(ev).toMatchObject({
      apiVersion: 'events.k8s.io/v1',
      kind: 'Event',
      reason: 'PullStalled',
      type: 'Warning',
      action: 'ObserveImagePull',
      reportingController: 'pullwatch.io/agent',
      reportingInstance: NODE,
      regarding: {
        apiVersion: 'v1', kind: 'Pod', namespace: 'shop', name: 'web-1',
        uid: (pod.metadata as Json).uid, fieldPath: 'spec.containers{web}',
      },
      note: 'image registry.example.com/team/web:1.4.2: layer sha256:ab12cd34ef56… stalled at 4.2 MB of 40.0 MB for 1m15s (registry.example.com, containerd 1.7.24, runtime deadline 5m0s)',
    });
    expect(ev.eventTime).toBe('2024-11-07T14:03:26.000000Z');
    expect(ev.series).toBeUndefined();
    expect(((ev.metadata as Json).name as string).startsWith('web-1.')).toBe(true);
    expect(s.stats()).toMatchObject({ created: 1, patched: 0, failed: 0, pending: 0 });
  });

  it('repeats update one event series (count, lastObservedTime) instead of creating new events', async () => {
    const s = makeSink();
    const pods: PodRef[] = [{ namespace: 'shop', name: 'web-1', container: 'web' }];
    s.handle(transition('stalled', stalledPull(pods), '2024-11-07T14:03:26.000Z'));
    await s.idle();
    s.handle(transition('stalled', stalledPull(pods), '2024-11-07T14:06:00.250Z'));
    await s.idle();
    s.handle(transition('stalled', stalledPull(pods), '2024-11-07T14:09:41.100Z'));
    await s.idle();
    expect(events()).toHaveLength(1);
    const ev = events()[0] as Json;
    expect(ev.series).toEqual({ count: 3, lastObservedTime: '2024-11-07T14:09:41.100000Z' });
    expect(ev.eventTime).toBe('2024-11-07T14:03:26.000000Z');
    expect(eventRequests().map((r) => `${r.method} ${r.status}`)).toEqual(['POST 201', 'PATCH 200', 'PATCH 200']);

    // Another reason on the same pod is its own series; resumed is a Normal event.
    s.handle(transition('resumed', stalledPull(pods, { idleGapsMs: [95_000], bytesDone: 9_000_000 }), '2024-11-07T14:10:00.000Z'));
    await s.idle();
    expect(events()).toHaveLength(2);
    const resumed = events().find((e) => e.reason === 'PullResumed') as Json;
    expect(resumed.type).toBe('Normal');
    expect(resumed.note).toBe('image registry.example.com/team/web:1.4.2: pull resumed at 9.0 MB of 40.0 MB after 1m35s without progress (registry.example.com, containerd 1.7.24, runtime deadline 5m0s)');
  });

  it('a new series starts after the series window; started/completed transitions make no event', async () => {
    const s = makeSink({ seriesWindowMs: 60_000 });
    const pods: PodRef[] = [{ namespace: 'shop', name: 'web-1' }];
    s.handle(transition('started', stalledPull(pods)));
    s.handle(transition('completed', stalledPull(pods)));
    s.handle(transition('slow', stalledPull(pods), '2024-11-07T14:03:00.000Z'));
    await s.idle();
    s.handle(transition('slow', stalledPull(pods), '2024-11-07T14:30:00.000Z'));
    await s.idle();
    expect(events()).toHaveLength(2);
    expect(events().every((e) => e.reason === 'PullSlow' && e.series === undefined)).toBe(true);
  });

  it('1,000 waiting pods: every pod gets its event, never faster than the token bucket allows', async () => {
    const qps = 200;
    const burst = 20;
    const s = makeSink({ qps, burst, concurrency: 8 });
    const pods: PodRef[] = Array.from({ length: 1000 }, (_, i) => ({ namespace: `ns${i % 7}`, name: `job-${i}`, container: 'main' }));
    const t0 = Date.now();
    s.handle(transition('stalled', stalledPull(pods), '2024-11-07T14:03:26.000Z'));
    // The stall repeats while the first wave is still being delivered: folded into pending work.
    s.handle(transition('stalled', stalledPull(pods), '2024-11-07T14:04:26.000Z'));
    await waitFor(async () => { await s.idle(); return true; }, { timeoutMs: 60_000 });
    const elapsed = Date.now() - t0;
    expect(events()).toHaveLength(1000);
    const reqs = eventRequests();
    // 1,000 creates + at most one series patch per pod: repeats never multiply requests.
    expect(reqs.length).toBeLessThanOrEqual(2000);
    expect(s.stats().coalesced).toBeGreaterThan(0);
    // Rate: within any one-second window no more than qps + burst requests.
    const times = reqs.map((r) => r.at).sort((a, b) => a - b);
    let maxInWindow = 0;
    for (let i = 0, j = 0; i < times.length; i++) {
      while ((times[i] as number) - (times[j] as number) >= 1000) j++;
      maxInWindow = Math.max(maxInWindow, i - j + 1);
    }
    // (Server-side arrival times jitter by up to the requests in flight.)
    expect(maxInWindow).toBeLessThanOrEqual(qps + burst + 8);
    expect(elapsed).toBeGreaterThanOrEqual(((reqs.length - burst) / qps) * 1000 * 0.9);
    // Series counts add up: every pod saw the stall twice.
    const counts = events().map((e) => ((e.series as Json | undefined)?.count as number | undefined) ?? 1);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(2000);
  });

  it('a bounded backlog: beyond maxPending work is dropped and counted, not queued forever', async () => {
    const s = makeSink({ qps: 1000, burst: 50, maxPending: 100 });
    const pods: PodRef[] = Array.from({ length: 1000 }, (_, i) => ({ namespace: 'batch', name: `p-${i}` }));
    s.handle(transition('stalled', stalledPull(pods)));
    await s.idle();
    expect(s.stats().dropped).toBeGreaterThanOrEqual(850);
    expect(events().length + s.stats().dropped).toBe(1000);
  });

  it('retries transient failures and lost responses without duplicating the event', async () => {
    const s = makeSink();
    const pods: PodRef[] = [{ namespace: 'shop', name: 'web-1' }];
    api.failEvents(2, 503);
    s.handle(transition('stalled', stalledPull(pods)));
    await s.idle();
    expect(events()).toHaveLength(1);
    expect(s.stats()).toMatchObject({ created: 1, retries: 2, failed: 0 });

    // The API server stores the create but the response is lost: the retry gets 409 and the
    // event is not created twice.
    api.loseEventResponses(1);
    s.handle(transition('cancelled', stalledPull(pods, {
      cancel: { by: 'containerd', at: '2024-11-07T14:08:11.000Z', deadlineMs: 300_000, lastProgress: '', bytesDone: 4_200_000, bytesTotal: 40_000_000 },
    })));
    await s.idle();
    expect(events()).toHaveLength(2);
    expect(s.stats().alreadyExisted).toBe(1);
    const cancelled = events().find((e) => e.reason === 'PullCancelledByRuntime') as Json;
    expect(cancelled.type).toBe('Warning');
    expect(cancelled.note).toBe('image registry.example.com/team/web:1.4.2: containerd 1.7.24 cancelled the pull after no progress for 5m0s; last progress 4.2 MB of 40.0 MB; the kubelet will retry with back-off (registry.example.com, containerd 1.7.24, runtime deadline 5m0s)');

    // Rejected requests (422) are counted and logged, never thrown.
    api.failEvents(1, 422);
    expect(() => s.handle(transition('slow', stalledPull(pods)))).not.toThrow();
    await s.idle();
    expect(s.stats().failed).toBe(1);
  });

  it('watch disruptions in between do not duplicate events: the same stall again is one series', async () => {
    api.addPod({ namespace: 'shop', name: 'web-1', nodeName: NODE, containers: [{ name: 'web', image: IMAGE, waiting: 'ContainerCreating' }] });
    source = new PodWatchSource({ nodeName: NODE, kubeConfig: api.writeKubeconfig(dir), coalesceMs: 10, idleTimeoutMs: 1000, backoffInitialMs: 50, backoffMaxMs: 200 });
    await source.start({ emit: () => undefined, health: new SourceHealth(silentLogger()), logger: silentLogger(), now: Date.now });
    await waitFor(() => source?.waits().length === 1, { what: 'pod view' });
    const s = makeSink({ podLookup: (ns, name) => source?.lookup(ns, name) ?? [] });
    const t = (at: string): Transition => transition('stalled', stalledPull([{ namespace: 'shop', name: 'web-1', container: 'web' }]), at);
    s.handle(t('2024-11-07T14:03:26.000Z'));
    await s.idle();
    api.resetWatches();
    api.compact();
    await waitFor(() => (source?.stats().relistsAfterGone ?? 0) >= 1, { what: 'relist after 410' });
    s.handle(t('2024-11-07T14:04:26.000Z'));
    await s.idle();
    expect(events()).toHaveLength(1);
    expect((events()[0] as Json).series).toMatchObject({ count: 2 });
  });

  it('the API server down: events wait and are delivered once it is back', async () => {
    const s = makeSink({ maxAttempts: 30, retryBaseMs: 100, retryMaxMs: 400 });
    await api.down();
    s.handle(transition('stalled', stalledPull([{ namespace: 'shop', name: 'web-1' }])));
    await new Promise((r) => setTimeout(r, 1500));
    expect(s.stats().retries).toBeGreaterThan(0);
    expect(s.stats().pending).toBe(1);
    await api.up();
    await waitFor(() => events().length === 1, { timeoutMs: 20_000, what: 'event after the API came back' });
    await s.idle();
    expect(s.stats()).toMatchObject({ created: 1, failed: 0 });
  });
});
