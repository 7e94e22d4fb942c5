/**
 * The agent on a real dockerd: a layer held by the stall proxy is a GetImageBlob* temp file that
 * stops growing; the agent reports the Docker pull stalled, then done after release.
 */
import Docker from 'dockerode';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { startDockerd, type RunningDockerd } from '../../harness/dockerd.js';
import { buildAndPush, refVia, type PushedImage } from '../../harness/images.js';
import { startRegistry, type RunningRegistry } from '../../harness/registry.js';
import { startStallProxy, type StallProxy } from '../../harness/stall-proxy.js';
import { waitFor } from '../../harness/wait.js';
import { startTestAgent, type TestAgent } from './agent-env.js';

const MiB = 1 << 20;
const STALL_AFTER_MS = 3_000;
let registry: RunningRegistry;
let proxy: StallProxy;
let dockerd: RunningDockerd;
let agent: TestAgent;
let img: PushedImage | undefined;

beforeAll(async () => {
  registry = await startRegistry();
  proxy = await startStallProxy({ upstream: registry });
  dockerd = await startDockerd({ insecureRegistries: [proxy.host] });
  agent = await startTestAgent({ dockerd, stallAfterMs: STALL_AFTER_MS, logSources: [] });
});
afterAll(async () => {
  proxy?.releaseAll();
  await agent?.stop();
  await dockerd?.stop();
  await proxy?.close();
  await registry?.stop();
  await img?.image.remove();
});

function pull(docker: Docker, ref: string): Promise<unknown[]> {
  return new Promise((resolve, reject) => {
    docker.pull(ref, (err: Error | null, stream: NodeJS.ReadableStream) => {
      if (err) { reject(err); return; }
      docker.modem.followProgress(stream, (e: Error | null, out: unknown[]) => (e ? reject(e) : resolve(out)));
    });
  });
}

test('a docker pull held by the proxy is reported stalled with its bytes; release completes it', async () => {
  img = await buildAndPush(registry, { layers: [64 * 1024, 3 * MiB] });
  const layer = img.layers[1]!;
  const N = MiB + 4321;
  proxy.hold(layer.digest, N);
  const docker = new Docker({ socketPath: dockerd.socket });
  const ref = refVia(img, proxy);
  const pulling = pull(docker, ref);
  pulling.catch(() => undefined);
  await proxy.waitHeld(layer.digest);

  const stalled = await agent.waitPull('stalled docker pull', (p) => p.state === 'stalled' && p.runtime.name === 'docker');
  const latency = Date.now() - proxy.stats(layer.digest).lastByteAt!;
  expect(latency).toBeLessThanOrEqual(STALL_AFTER_MS + 2_000);
  expect(stalled.layers.some((l) => l.state === 'stalled' && l.bytesDone === N)).toBe(true);
  expect(stalled.idleSeconds).toBeGreaterThanOrEqual(STALL_AFTER_MS / 1000 - 0.5);

  proxy.release(layer.digest);
  await pulling;
  await waitFor(async () => (await agent.pulls()).filter((p) => p.runtime.name === 'docker' && p.state === 'stalled').length === 0,
    { timeoutMs: 15_000, what: 'no stalled docker pull after release' });
});
