/**
 * containerd 1.7 with image_pull_progress_timeout = 20s (the setting): the runtime cancels
 * a held pull; the agent, following containerd's log file, reports it as cancelled-by-runtime with
 * the runtime's deadline and the last progress it saw, after having reported it stalled.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { startContainerd, type RunningContainerd } from '../../harness/containerd.js';
import { CriError, createCriClient, type CriClient } from '../../harness/cri.js';
import { buildAndPush, refVia, type PushedImage } from '../../harness/images.js';
import { startRegistry, type RunningRegistry } from '../../harness/registry.js';
import { startStallProxy, type StallProxy } from '../../harness/stall-proxy.js';
import { startTestAgent, type TestAgent } from './agent-env.js';

const MiB = 1 << 20;
const STALL_AFTER_MS = 4_000;
let registry: RunningRegistry;
let proxy: StallProxy;
let containerd: RunningContainerd;
let cri: CriClient;
let agent: TestAgent;
let img: PushedImage | undefined;

beforeAll(async () => {
  registry = await startRegistry();
  proxy = await startStallProxy({ upstream: registry });
  containerd = await startContainerd({ version: '1.7', pullProgressTimeout: '20s', registryHosts: [proxy.host] });
  cri = createCriClient(containerd.socket);
  agent = await startTestAgent({ containerd, stallAfterMs: STALL_AFTER_MS, logSources: [`file:${containerd.logFile}`] });
});
afterAll(async () => {
  proxy?.releaseAll();
  await agent?.stop();
  cri?.close();
  await containerd?.stop();
  await proxy?.close();
  await registry?.stop();
  await img?.image.remove();
});

test('a pull cancelled by image_pull_progress_timeout (20s) is reported cancelled-by-runtime with its deadline and last progress', async () => {
  img = await buildAndPush(registry, { layers: [64 * 1024, 3 * MiB] });
  const layer = img.layers[1]!;
  proxy.hold(layer.digest, 2 * MiB);
  const ref = refVia(img, proxy);
  const pull = cri.pullImage(ref).then(() => undefined, (e: unknown) => e);

  // Stalled first (long before the runtime gives up) ...
  const stalled = await agent.waitPull('stalled pull', (p) => p.image === ref && p.state === 'stalled');
  const stalledAt = Date.now();
  expect(stalled.layers.find((l) => l.digest === layer.digest)?.bytesDone).toBe(2 * MiB);

  // ... then containerd cancels after 20 s without progress (checked every 10 s).
  const err = await pull;
  const lastByteAt = proxy.stats(layer.digest).lastByteAt!;
  expect(err).toBeInstanceOf(CriError);
  expect((err as CriError).code).toBe(1); // CANCELLED
  const cancelledAfter = Date.now() - lastByteAt;
  if (process.env.PW_DEBUG) console.log(`containerd 1.7 cancelled the pull ${cancelledAfter} ms after the last byte; agent reported stalled ${stalledAt - lastByteAt} ms after it`);
  expect(cancelledAfter).toBeGreaterThanOrEqual(19_000);

  const cancelled = await agent.waitPull('cancelled-by-runtime pull', (p) => p.image === ref && p.state === 'cancelled-by-runtime', { all: true, timeoutMs: 15_000 });
  expect(cancelled.cancel?.by).toBe('containerd');
  expect(cancelled.cancel?.deadlineMs).toBe(20_000);
  expect(cancelled.cancel?.bytesDone).toBeGreaterThanOrEqual(2 * MiB);
  expect(cancelled.cancel?.bytesDone).toBeLessThan(img.layers[0]!.size + layer.size);
  expect(cancelled.cancel?.lastProgress).toMatch(/\S/);
  expect(agent.transitions(ref).map((t) => t.transition)).toEqual(expect.arrayContaining(['stalled', 'cancelled']));
  // The leftover ingest of the cancelled pull is not reported as a pull still in flight.
  expect((await agent.pulls()).filter((p) => p.image === ref)).toEqual([]);
}, 90_000);
