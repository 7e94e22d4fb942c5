/**
 * Detection latency on real containerd: time from the last byte the registry delivered to the
 * agent's "stalled" report, beside containerd 1.7's own cancel (image_pull_progress_timeout) in the
 * same run. Target (issue 2): ≤ --stall-after + 1.5 s.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../common/log.js';
import { startAgent } from '../agent/run.js';
import { startContainerd, type ContainerdVersion } from '../test/harness/containerd.js';
import { startRegistry } from '../test/harness/registry.js';
import { startStallProxy } from '../test/harness/stall-proxy.js';
import { buildAndPush, refVia } from '../test/harness/images.js';
import { createCriClient } from '../test/harness/cri.js';

const STALL_AFTER_MS = 20_000;
const DEADLINE = '20s';

async function once(version: ContainerdVersion): Promise<Record<string, number | string>> {
  const dir = mkdtempSync(join(tmpdir(), 'pullwatch-bench-latency-'));
  const registry = await startRegistry();
  const proxy = await startStallProxy({ upstream: registry });
  const containerd = await startContainerd({
    version, registryHosts: [proxy.host], ...(version === '1.7' ? { pullProgressTimeout: DEADLINE } : {}),
  });
  const agent = await startAgent({
    hostRoot: '/', containerdRoot: containerd.root, containerdSocket: containerd.socket, dockerRoot: join(dir, 'no-docker'),
    logSources: [`file:${containerd.logFile}`], stallAfterMs: STALL_AFTER_MS, slowBelowBytesPerSecond: 64 * 1024, pollMs: 1000,
    listen: '127.0.0.1:0', nodeName: 'bench', kube: 'off', queueDir: join(dir, 'q'),
  }, silentLogger());
  const cri = createCriClient(containerd.address);
  try {
    const image = await buildAndPush(registry, { layers: [8 * 1024 * 1024] });
    const layer = image.layers[0];
    if (!layer) throw new Error('no layer');
    proxy.hold(layer.digest, 1024 * 1024);
    const pullStarted = Date.now();
    const pull = cri.pullImage(refVia(image, proxy.host)).then(() => ({ ok: true, at: Date.now() }), () => ({ ok: false, at: Date.now() }));
    const held = await proxy.waitHeld(layer.digest, 60_000);
    const lastByteAt = held.lastByteAt ?? pullStarted;
    let stalledAt: number | undefined;
    let cancelReportedAt: number | undefined;
    let criDone: { ok: boolean; at: number } | undefined;
    void pull.then((r) => { criDone = r; });
    const limit = Date.now() + STALL_AFTER_MS + (version === '1.7' ? 45_000 : 15_000);
    while (Date.now() < limit) {
      const recs = agent.pulls();
      if (!stalledAt && recs.some((p) => p.state === 'stalled' && p.layers.some((l) => l.digest === layer.digest))) stalledAt = Date.now();
      if (version === '1.7' && !cancelReportedAt) {
        const res = await fetch(`${agent.url}/v1/pulls?all=1`).then((r) => r.json()) as { pulls: Array<{ state: string }> };
        if (res.pulls.some((p) => p.state === 'cancelled-by-runtime')) cancelReportedAt = Date.now();
      }
      if (stalledAt && (version === '1.6' || (criDone && cancelReportedAt))) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    proxy.releaseAll();
    const s = (t: number | undefined) => (t === undefined ? 'never' : Number(((t - lastByteAt) / 1000).toFixed(2)));
    return {
      [`containerd${version}.stall_after_s`]: STALL_AFTER_MS / 1000,
      [`containerd${version}.pullwatch_stalled_after_last_byte_s`]: s(stalledAt),
      ...(version === '1.7' ? {
        'containerd1.7.runtime_deadline': DEADLINE,
        'containerd1.7.containerd_cancel_after_last_byte_s': criDone && !criDone.ok ? s(criDone.at) : 'never',
        'containerd1.7.pullwatch_cancel_reported_after_last_byte_s': s(cancelReportedAt),
      } : { 'containerd1.6.containerd_cancel_after_last_byte_s': 'never (1.6 has no progress deadline)' }),
    };
  } finally {
    cri.close();
    await agent.stop();
    await containerd.stop();
    await proxy.close();
    await registry.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchDetectionLatency(): Promise<Record<string, number | string>> {
  return { ...(await once('1.7')), ...(await once('1.6')) };
}
