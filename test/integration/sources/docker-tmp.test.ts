/**
 * DockerTmpSource against a REAL dockerd (Debian docker.io, graph-driver image store): a pull held
 * by the stall proxy shows as a growing <data-root>/tmp/GetImageBlob* file with exactly the bytes
 * the proxy delivered; the engine version comes from the API socket through dockerode.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DockerTmpSource } from '../../../agent/sources/docker/tmp-source.js';
import { startDockerd, type RunningDockerd } from '../../harness/dockerd.js';
import { buildAndPush, refVia, type PushedImage } from '../../harness/images.js';
import { startRegistry, type RunningRegistry } from '../../harness/registry.js';
import { startStallProxy, type StallProxy } from '../../harness/stall-proxy.js';
import { waitFor } from '../../harness/wait.js';
import { assertSane, testCtx, type TestCtx } from '../../unit/sources/helpers.js';

describe('DockerTmpSource on real dockerd', () => {
  let registry: RunningRegistry | undefined;
  let proxy: StallProxy | undefined;
  let dockerd: RunningDockerd | undefined;
  let source: DockerTmpSource | undefined;
  let t: TestCtx;
  let img: PushedImage;
  let pull: Promise<unknown> | undefined;
  const HOLD = 1_500_000;

  beforeAll(async () => {
    registry = await startRegistry();
    proxy = await startStallProxy({ upstream: registry });
    img = await buildAndPush(registry, { layers: [2_500_000], repo: 'pullwatch/docker-src' });
    dockerd = await startDockerd({ insecureRegistries: [proxy.host] });
    t = testCtx();
    source = new DockerTmpSource({ dockerRoot: dockerd.dataRoot, pollMs: 200, socket: dockerd.socket });
    await source.start(t.ctx);
  });

  afterAll(async () => {
    proxy?.releaseAll();
    await source?.stop();
    if (pull) await Promise.allSettled([pull]);
    await dockerd?.stop();
    await proxy?.close();
    await registry?.stop();
    await img?.image.remove();
  });

  it('reports the held layer download with the delivered bytes, and the engine version', async () => {
    const p = proxy as StallProxy;
    const d = dockerd as RunningDockerd;
    const layer = img.layers[0]!;
    p.hold(img, HOLD);
    pull = d.docker(['pull', refVia(img, p)]).catch((err: unknown) => err);
    await p.waitHeld(layer.digest, 60_000);
    const s = await waitFor(() => {
      const last = t.ingests().at(-1);
      return last?.present.find((x) => x.offset === p.stats(layer.digest).bytesDelivered);
    }, { timeoutMs: 30_000, what: 'GetImageBlob file at the held offset' }).catch((err: Error) => {
      throw new Error(`${err.message}\nlatest: ${JSON.stringify(t.ingests().at(-1))}\nproxy: ${JSON.stringify(p.stats(layer.digest))}`);
    });
    assertSane(s);
    expect(s.key).toMatch(/^GetImageBlob\d+$/);
    expect(s).toMatchObject({ blobKind: 'layer', offset: HOLD });
    expect(t.ingests().at(-1)).toMatchObject({ runtime: 'docker', source: 'docker-tmp' });
    const runtime = await waitFor(() => t.observations.find((o) => o.kind === 'runtime'), { what: 'docker runtime observation' });
    expect(runtime).toMatchObject({ info: { name: 'docker', version: expect.stringMatching(/^\d+\.\d+\./) } });
    expect(t.health.snapshot()).toEqual([]);
  });

  it('after release: the pull finishes and the temp file closes', async () => {
    const p = proxy as StallProxy;
    p.releaseAll();
    const result = await pull;
    expect(result).not.toBeInstanceOf(Error);
    const keys = new Set(t.ingests().flatMap((o) => o.present.map((s) => s.key)));
    await waitFor(() => {
      const closed = t.ingests().flatMap((o) => o.closed.map((c) => c.key));
      return [...keys].every((k) => closed.includes(k)) && t.ingests().at(-1)?.present.length === 0;
    }, { timeoutMs: 30_000, what: 'temp files closed' });
    expect(t.health.snapshot()).toEqual([]);
  });
});
