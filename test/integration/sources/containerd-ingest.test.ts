/**
 * ContainerdIngestSource against REAL containerd 1.6 and 1.7: pulls made the way kubelet makes them
 * (CRI ImageService/PullImage), through a proxy that holds each layer after N bytes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IngestStatus, Observation } from '../../../agent/model/observations.js';
import { ContainerdClient } from '../../../agent/sources/containerd/grpc.js';
import { ContainerdIngestSource } from '../../../agent/sources/containerd/ingest-source.js';
import { startContainerd, type ContainerdVersion, type RunningContainerd } from '../../harness/containerd.js';
import { createCriClient, type CriClient } from '../../harness/cri.js';
import { buildAndPush, refVia, type PushedImage } from '../../harness/images.js';
import { startRegistry, type RunningRegistry } from '../../harness/registry.js';
import { startStallProxy, type StallProxy } from '../../harness/stall-proxy.js';
import { waitFor } from '../../harness/wait.js';
import { testCtx, assertSane, type TestCtx } from '../../unit/sources/helpers.js';

type Ingests = Extract<Observation, { kind: 'ingests' }>;

describe.each(['1.6', '1.7'] as ContainerdVersion[])('ContainerdIngestSource on real containerd %s', (version) => {
  let registry: RunningRegistry | undefined;
  let proxy: StallProxy | undefined;
  let containerd: RunningContainerd | undefined;
  let cri: CriClient | undefined;
  let source: ContainerdIngestSource | undefined;
  let t: TestCtx;
  let imgA: PushedImage;
  let imgB: PushedImage;
  // containerd 1.6/1.7 copy a blob into `data` through a 1 MiB buffer filled with io.ReadAtLeast
  // (content/helpers.go copyWithBuffer): the file grows in whole MiB steps, so the on-disk offset
  // is the delivered byte count rounded down to a MiB. Holds are placed past 1 and 2 MiB.
  const MiB = 1024 * 1024;
  const HOLD_A = 2_500_000;
  const HOLD_B = 1_500_000;
  const pulls: Array<Promise<unknown>> = [];

  beforeAll(async () => {
    registry = await startRegistry();
    proxy = await startStallProxy({ upstream: registry });
    const tag = version.replace('.', '');
    [imgA, imgB] = await Promise.all([
      buildAndPush(registry, { layers: [3_000_000], repo: `pullwatch/src-a${tag}` }),
      buildAndPush(registry, { layers: [2_200_000], repo: `pullwatch/team/src-b${tag}`, format: 'oci' }),
    ]);
    containerd = await startContainerd({ version, registryHosts: [proxy.host] });
    cri = createCriClient(containerd.socket);
    t = testCtx();
    source = new ContainerdIngestSource({ root: containerd.root, pollMs: 200, socket: containerd.socket });
    await source.start(t.ctx);
  });

  afterAll(async () => {
    proxy?.releaseAll();
    await source?.stop();
    await Promise.allSettled(pulls);
    cri?.close();
    await containerd?.stop();
    await proxy?.close();
    await registry?.stop();
    await Promise.allSettled([imgA?.image.remove(), imgB?.image.remove()]);
  });

  const latest = (): Ingests | undefined => t.ingests().at(-1);
  const present = (digest: string): IngestStatus | undefined => latest()?.present.find((s) => s.digest === digest);

  it('reports held layer ingests of two concurrent pulls with the right digest, bytes, total and attribution', async () => {
    const p = proxy as StallProxy;
    const layerA = imgA.layers[0]!;
    const layerB = imgB.layers[0]!;
    p.hold(imgA, HOLD_A);
    p.hold(imgB, HOLD_B);
    for (const img of [imgA, imgB]) {
      pulls.push((cri as CriClient).pullImage(refVia(img, p)).catch((err: unknown) => err));
    }
    await Promise.all([p.waitHeld(layerA.digest, 60_000), p.waitHeld(layerB.digest, 60_000)]);

    // The runtime version comes from containerd.services.version.v1.Version over the socket.
    const runtime = await waitFor(() => t.observations.find((o) => o.kind === 'runtime'), { what: 'runtime observation' });
    expect(runtime).toMatchObject({ kind: 'runtime', info: { name: 'containerd', version: expect.stringMatching(new RegExp(`^${version.replace('.', '\\.')}\\.`)) } });

    for (const [img, layer] of [[imgA, layerA], [imgB, layerB]] as const) {
      const s = await waitFor(() => {
        const st = present(layer.digest);
        const delivered = p.stats(layer.digest).highestOffset;
        return st && delivered > 0 && st.offset === Math.floor(delivered / MiB) * MiB && st.registry ? st : undefined;
      }, { timeoutMs: 30_000, what: `attributed ingest at the held offset for ${img.repo}` }).catch((err: Error) => {
        throw new Error(`${err.message}\nlatest: ${JSON.stringify(latest())}\nproxy: ${JSON.stringify(p.stats(layer.digest))}\nhealth: ${JSON.stringify(t.health.snapshot())}`);
      });
      assertSane(s);
      expect(s).toMatchObject({
        namespace: 'k8s.io',
        blobKind: 'layer',
        digest: layer.digest,
        total: layer.size,
        manifestDigest: img.manifestDigest,
        // containerd's label key drops the port (url.Hostname()): containerd.io/distribution.source.127.0.0.1
        registry: '127.0.0.1',
        repository: img.repo,
      });
      expect(s.ref).toBe(`k8s.io/${s.ref.split('/')[1]}/layer-${layer.digest}`);
      const delivered = p.stats(layer.digest).bytesDelivered;
      expect(delivered).toBe(img === imgA ? HOLD_A : HOLD_B);
      expect(s.offset).toBe(Math.floor(delivered / MiB) * MiB);
      expect(s.offset).toBeGreaterThan(0);
      expect(s.lastWriteAt).toBeLessThanOrEqual(Date.now());
      expect(Date.now() - (s.lastWriteAt as number)).toBeLessThan(60_000);
    }
    // The .proto subsets against the real service: ListStatuses says what the ingest dirs say.
    const client = new ContainerdClient({ socket: (containerd as RunningContainerd).socket });
    try {
      const statuses = await client.listStatuses('k8s.io');
      for (const layer of [layerA, layerB]) {
        const fromFs = present(layer.digest) as IngestStatus;
        const viaGrpc = statuses.find((x) => x.ref.endsWith(`layer-${layer.digest}`));
        // The namespaced API gives the client ref; on disk it is prefixed with <namespace>/<seq>/.
        expect(viaGrpc).toMatchObject({ ref: `layer-${layer.digest}`, total: layer.size, offset: fromFs.offset });
        expect(fromFs.ref.endsWith(`/${viaGrpc?.ref}`)).toBe(true);
        expect(viaGrpc?.startedAt).toBeCloseTo(fromFs.startedAt as number, -1);
      }
      expect(await client.listStatuses('default')).toEqual([]);
    } finally {
      client.close();
    }
    expect(t.health.snapshot()).toEqual([]);
  });

  it('after release: the pulls finish and the ingests close as committed', async () => {
    const p = proxy as StallProxy;
    p.releaseAll();
    const results = await Promise.all(pulls.splice(0));
    for (const r of results) expect(r).not.toBeInstanceOf(Error);
    const closed = await waitFor(() => {
      const all = t.ingests().flatMap((o) => o.closed);
      const a = all.find((c) => c.digest === imgA.layers[0]!.digest);
      const b = all.find((c) => c.digest === imgB.layers[0]!.digest);
      return a && b ? [a, b] : undefined;
    }, { timeoutMs: 30_000, what: 'closed layer ingests' });
    for (const c of closed) expect(c.committed).toBe(true);
    await waitFor(() => latest()?.present.length === 0, { what: 'no ingests left' });
    // images.v1 List (proto subset): CRI created the image records with their manifest digests.
    const client = new ContainerdClient({ socket: (containerd as RunningContainerd).socket });
    try {
      const images = await client.listImages('k8s.io');
      for (const img of [imgA, imgB]) {
        expect(images.find((i) => i.name === refVia(img, proxy as StallProxy))?.target?.digest).toBe(img.manifestDigest);
      }
    } finally {
      client.close();
    }
    expect(t.health.snapshot()).toEqual([]);
  });

  it('after a containerd restart the same source reconnects and attributes a new pull', async () => {
    const p = proxy as StallProxy;
    const c = containerd as RunningContainerd;
    await c.restart();
    const img = await buildAndPush(registry as RunningRegistry, { layers: [1_500_000], repo: `pullwatch/src-c${version.replace('.', '')}` });
    try {
      const layer = img.layers[0]!;
      p.hold(img, 1_200_000);
      const client = createCriClient(c.socket);
      const pull = client.pullImage(refVia(img, p)).catch((err: unknown) => err);
      try {
        await p.waitHeld(layer.digest, 60_000);
        const s = await waitFor(() => {
          const st = present(layer.digest);
          return st?.repository ? st : undefined;
        }, { timeoutMs: 30_000, what: 'attribution after restart' });
        expect(s).toMatchObject({ offset: MiB, total: layer.size, manifestDigest: img.manifestDigest, registry: '127.0.0.1', repository: img.repo });
      } finally {
        p.release(img);
        await pull;
        client.close();
      }
    } finally {
      await img.image.remove();
    }
  });
});
