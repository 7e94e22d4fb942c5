/**
 * The agent no longer uses @kubernetes/client-node (see agent/kube/api-client.ts), but the official
 * client still guards the realism of the in-test API server (test/harness/kube-api/server.ts), on
 * which every kube test of the agent relies:
 *  - the official KubeConfig + CoreV1Api / EventsV1Api / Watch work against it unchanged;
 *  - every answer it gives (PodList, Node, watch events, Event create/patch, Status errors) survives a
 *    round trip through the official ObjectSerializer as the model it claims to be: no field the API
 *    does not know, no field of the wrong type.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CoreV1Api, EventsV1Api, KubeConfig, Observable, PatchStrategy, V1MicroTime, Watch,
  type ConfigurationOptions, type EventsV1Event, type RequestContext, type ResponseContext,
} from '@kubernetes/client-node';
// The generated models' serializer (the package index re-exports two classes of this name, so ESM
// drops both; the generated one holds every model's field map).
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import { FakeKubeApi } from '../../harness/kube-api/server.js';

const NODE = 'node-r';
let api: FakeKubeApi;
let dir: string;
let kc: KubeConfig;

type Json = Record<string, unknown>;
const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;

/** Dates compare by instant (the serializer writes milliseconds, the API server writes seconds or micros). */
function normalize(v: unknown): unknown {
  if (typeof v === 'string' && RFC3339.test(v)) return Date.parse(v);
  if (Array.isArray(v)) return v.map(normalize);
  if (v && typeof v === 'object') {
    const out: Json = {};
    for (const [k, x] of Object.entries(v as Json)) if (x !== undefined) out[k] = normalize(x);
    return out;
  }
  return v;
}

/** raw → the official model → JSON again must lose nothing. */
function expectRealShape(raw: unknown, type: string): void {
  const model: unknown = ObjectSerializer.deserialize(raw, type, '');
  const again: unknown = ObjectSerializer.serialize(model, type, '');
  expect(normalize(again), `${type} round trip through the official ObjectSerializer`).toEqual(normalize(raw));
}

async function getRaw(path: string): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${api.url}${path}`);
  return { status: res.status, body: await res.json() as Json };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pw-kube-real-'));
  api = await FakeKubeApi.start({ nodeName: NODE, bookmarkIntervalMs: 200 });
  api.addPod({ namespace: 'shop', name: 'web-1', nodeName: NODE, containers: [{ name: 'app', image: 'registry.example.com/web:1', waiting: 'ImagePullBackOff', message: 'Back-off pulling image' }] });
  api.addPod({ namespace: 'shop', name: 'web-2', nodeName: NODE, containers: [{ name: 'app', image: 'registry.example.com/web:1' }] });
  kc = new KubeConfig();
  kc.loadFromFile(api.writeKubeconfig(dir));
});

afterAll(async () => {
  await api.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('in-test API server speaks real API shapes (checked by @kubernetes/client-node)', { timeout: 30_000 }, () => {
  it('PodList and Node: the official client reads them, and they are real V1PodList / V1Node objects', async () => {
    const core = kc.makeApiClient(CoreV1Api);
    const list = await core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${NODE}` });
    expect(list.items.map((p) => p.metadata?.name).sort()).toEqual(['web-1', 'web-2']);
    expect(list.items.find((p) => p.metadata?.name === 'web-1')?.status?.containerStatuses?.[0]?.state?.waiting?.reason).toBe('ImagePullBackOff');
    expect(list.metadata?.resourceVersion).toMatch(/^\d+$/);
    const node = await core.readNode({ name: NODE });
    expect(node.status?.nodeInfo?.containerRuntimeVersion).toMatch(/^containerd:\/\//);

    const rawList = await getRaw(`/api/v1/pods?fieldSelector=spec.nodeName%3D${NODE}`);
    expect(rawList.body.kind).toBe('PodList');
    expectRealShape(rawList.body, 'V1PodList');
    expectRealShape((await getRaw(`/api/v1/nodes/${NODE}`)).body, 'V1Node');
  });

  it('Status errors (404, 410) are real V1Status objects', async () => {
    const missing = await getRaw('/api/v1/nodes/no-such-node');
    expect(missing.status).toBe(404);
    expect(missing.body).toMatchObject({ kind: 'Status', code: 404, reason: 'NotFound' });
    expectRealShape(missing.body, 'V1Status');
    api.failNextWatches(1, 410);
    const gone = await getRaw('/api/v1/pods?watch=true&resourceVersion=1');
    expect(gone.status).toBe(410);
    expect(gone.body).toMatchObject({ kind: 'Status', code: 410 });
    expectRealShape(gone.body, 'V1Status');
  });

  it('watch events: the official Watch follows the stream; objects are V1Pod, ERROR carries a V1Status', async () => {
    const list = await kc.makeApiClient(CoreV1Api).listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${NODE}` });
    const got: Array<{ type: string; obj: unknown }> = [];
    let ended: unknown = 'open';
    const controller = await new Watch(kc).watch('/api/v1/pods', {
      fieldSelector: `spec.nodeName=${NODE}`, allowWatchBookmarks: true, resourceVersion: list.metadata?.resourceVersion,
    }, (type, obj) => got.push({ type, obj }), (err) => { ended = err ?? null; });
    try {
      api.addPod({ namespace: 'shop', name: 'web-3', nodeName: NODE, containers: [{ name: 'app', image: 'registry.example.com/web:2', waiting: 'ContainerCreating' }] });
      api.setWaiting('shop', 'web-3', 'app', 'ErrImagePull');
      api.deletePod('shop', 'web-3');
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline && !(got.some((e) => e.type === 'DELETED') && got.some((e) => e.type === 'BOOKMARK'))) {
        await new Promise((r) => setTimeout(r, 25));
      }
      expect(got.filter((e) => e.type !== 'BOOKMARK').map((e) => e.type)).toEqual(['ADDED', 'MODIFIED', 'DELETED']);
      for (const e of got) {
        if (e.type === 'BOOKMARK') {
          expect(e.obj).toMatchObject({ kind: 'Pod', metadata: { resourceVersion: expect.stringMatching(/^\d+$/) } });
        } else {
          expectRealShape(e.obj, 'V1Pod');
        }
      }
      api.compact();
      api.resetWatches();
    } finally {
      controller.abort();
    }
    // A watch from a compacted resourceVersion gets an ERROR event with a 410 Status.
    const errors: unknown[] = [];
    const c2 = await new Watch(kc).watch('/api/v1/pods', { fieldSelector: `spec.nodeName=${NODE}`, resourceVersion: '1' }, (type, obj) => { if (type === 'ERROR') errors.push(obj); }, () => undefined);
    try {
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline && errors.length === 0) await new Promise((r) => setTimeout(r, 25));
      expect(errors[0]).toMatchObject({ kind: 'Status', code: 410, reason: 'Expired' });
      expectRealShape(errors[0], 'V1Status');
    } finally {
      c2.abort();
    }
    expect(ended).not.toBe(undefined);
  });

  it('events.k8s.io/v1: the official client creates and merge-patches an Event; answers are EventsV1Event', async () => {
    const events = kc.makeApiClient(EventsV1Api);
    const body: EventsV1Event = {
      apiVersion: 'events.k8s.io/v1', kind: 'Event',
      metadata: { name: 'web-1.0123456789abcdef', namespace: 'shop' },
      eventTime: new V1MicroTime(Date.now()),
      reportingController: 'pullwatch.io/agent', reportingInstance: NODE,
      action: 'Pulling', reason: 'PullStalled', type: 'Warning', note: 'layer stalled',
      regarding: { apiVersion: 'v1', kind: 'Pod', namespace: 'shop', name: 'web-1', fieldPath: 'spec.containers{app}' },
    };
    const created = await events.createNamespacedEvent({ namespace: 'shop', body });
    expect(created.metadata?.uid).toBeTruthy();
    expectRealShape(ObjectSerializer.serialize(created, 'EventsV1Event', ''), 'EventsV1Event');
    const mergePatch: ConfigurationOptions = {
      middleware: [{
        pre: (ctx: RequestContext) => { ctx.setHeaderParam('Content-Type', PatchStrategy.MergePatch); return new Observable(Promise.resolve(ctx)); },
        post: (rsp: ResponseContext) => new Observable(Promise.resolve(rsp)),
      }],
      middlewareMergeStrategy: 'append',
    };
    const patched = await events.patchNamespacedEvent(
      { name: 'web-1.0123456789abcdef', namespace: 'shop', body: { series: { count: 2, lastObservedTime: new V1MicroTime(Date.now()) } } },
      mergePatch,
    );
    expect(patched.series?.count).toBe(2);
    expectRealShape(ObjectSerializer.serialize(patched, 'EventsV1Event', ''), 'EventsV1Event');
    const stored = api.events.get('shop/web-1.0123456789abcdef');
    expect(stored).toBeDefined();
    expectRealShape(stored, 'EventsV1Event');
  });
});
