/**
 * Real containerd 1.7: tune plan reads the running instance's config, apply writes the deadline
 * in place, the test restarts containerd the way the restart hook would (through applyPlan's
 * restart hook, gated on the agent's in-flight pulls over real HTTP), `containerd config dump`
 * shows the new value, and a CRI pull held by the stall proxy is cancelled at the applied deadline.
 * Real containerd 1.6: plan reports that no deadline exists and apply leaves the runtime alone.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createServer, type Server } from 'node:http';
import { mkdir, writeFile, readFile } from 'node:fs/promises';
import path from 'node:path';
import { startContainerd, containerdBinDir, type RunningContainerd } from '../../harness/containerd.js';
import { startRegistry, type RunningRegistry } from '../../harness/registry.js';
import { startStallProxy, type StallProxy } from '../../harness/stall-proxy.js';
import { buildAndPush, refVia } from '../../harness/images.js';
import { CriError, createCriClient } from '../../harness/cri.js';
import { waitFor } from '../../harness/wait.js';
import { computePlanWithLayout } from '../../../agent/tune/plan.js';
import { applyPlan, containerdConfigDump } from '../../../agent/tune/apply.js';
import { inFlightPulls } from '../../../agent/tune/history.js';
import { defaultExec } from '../../../agent/tune/detect.js';
import { HostFs } from '../../../agent/tune/hostfs.js';
import { timeoutFromDump } from '../../../agent/tune/containerd.js';
import { addLibc, requireBinary } from '../../unit/tune/helpers.js';
import { copyFile, link, rm } from 'node:fs/promises';

const MiB = 1024 * 1024;

/** Makes the harness's instance dir look like a node: /config.toml, a containerd unit naming it, the binary. */
async function asHostRoot(c: RunningContainerd): Promise<string> {
  const root = c.dir;
  expect(c.configPath).toBe(path.join(root, 'config.toml'));
  await mkdir(path.join(root, 'etc/systemd/system'), { recursive: true });
  await writeFile(path.join(root, 'etc/systemd/system/containerd.service'),
    '[Unit]\nDescription=containerd container runtime\n\n[Service]\nExecStartPre=-/sbin/modprobe overlay\nExecStart=/usr/bin/containerd --config /config.toml\nRestart=always\n');
  await mkdir(path.join(root, 'usr/bin'), { recursive: true });
  const dest = path.join(root, 'usr/bin/containerd');
  await rm(dest, { force: true });
  try { await link(c.binary, dest); } catch { await copyFile(c.binary, dest); }
  await addLibc(root);
  return root;
}

/** A stand-in for the local agent's /v1/pulls (what `tune apply --restart` asks before restarting). */
async function agentStub(inFlight: () => number): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    const pulls = Array.from({ length: inFlight() }, (_, i) => ({ id: `p${i}`, registry: 'r', state: 'downloading', idleGapsMs: [], layers: [] }));
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ pulls }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address() as { port: number };
  return { url: `http://127.0.0.1:${addr.port}`, server };
}

describe('tune on real containerd 1.7', () => {
  let registry: RunningRegistry;
  let proxy: StallProxy;
  let c: RunningContainerd;
  let agent: { url: string; server: Server };
  let inFlight = 0;

  beforeAll(async () => {
    requireBinary(path.join(containerdBinDir('1.7'), 'containerd'));
    registry = await startRegistry();
    proxy = await startStallProxy({ upstream: registry });
    c = await startContainerd({ version: '1.7', pullProgressTimeout: '5m0s', registryHosts: [proxy.host] });
    agent = await agentStub(() => inFlight);
  });
  afterAll(async () => {
    await c?.stop();
    await proxy?.close();
    await registry?.stop();
    await new Promise((r) => agent?.server.close(r));
  });

  test('plan → apply --restart (gated on in-flight pulls) → config dump → held pull cancelled at the applied deadline', async () => {
    const root = await asHostRoot(c);
    const now = new Date();
    const first = await computePlanWithLayout({ hostRoot: root, history: null, deadlineOverrideMs: 12_000, now });
    const layout = first.layout;
    let plan = first.plan;
    expect(plan.runtime).toMatchObject({ name: 'containerd', family: '1.7.10+' });
    const rt = plan.settings.find((s) => s.id === 'runtime.pullProgressTimeout')!;
    expect(rt.source).toMatchObject({ kind: 'file', path: '/config.toml' });
    expect(rt.effective.raw).toBe('5m0s');
    expect(rt.recommendation).toMatchObject({ apply: true, display: '12s' });

    const restarts: number[] = [];
    const opts = {
      only: 'runtime' as const, restart: true,
      inFlight: () => inFlightPulls(agent.url),
      restartComponent: async () => { restarts.push(c.pid); await c.restart(); },
      healthy: async () => { try { await c.ctr(['version'], { timeoutMs: 5000 }); return true; } catch { return false; } },
      healthTimeoutMs: 60_000,
    };
    // a pull in flight: refused, nothing written
    inFlight = 1;
    const refused = await applyPlan({ plan, layout, ...opts }).then(() => null, (e: Error) => e);
    expect(refused?.message).toContain('1 pull(s) in flight');
    expect(await readFile(c.configPath, 'utf8')).toContain('image_pull_progress_timeout = "5m0s"');

    inFlight = 0;
    const pidBefore = c.pid;
    const res = await applyPlan({ plan, layout, ...opts });
    expect(res.restarted).toEqual(['containerd']);
    expect(restarts).toEqual([pidBefore]);
    expect(c.pid).not.toBe(pidBefore);
    expect(timeoutFromDump(await containerdConfigDump(new HostFs(root), defaultExec, '/usr/bin/containerd', '/config.toml'))).toBe('12s');
    ({ plan } = await computePlanWithLayout({ hostRoot: root, history: null, deadlineOverrideMs: 12_000, now }));
    expect(plan.settings.find((s) => s.id === 'runtime.pullProgressTimeout')!.recommendation.apply).toBe(false);

    // the restarted containerd cancels a held pull at the new deadline
    const img = await buildAndPush(registry, { layers: [64 * 1024, 3 * MiB] });
    const layer = img.layers[1]!;
    proxy.hold(layer.digest, MiB);
    const cri = createCriClient(c.socket);
    const ref = refVia(img, proxy);
    try {
      const err = await cri.pullImage(ref).then(() => undefined, (e: unknown) => e);
      const failedAt = Date.now();
      expect(err).toBeInstanceOf(CriError);
      expect((err as CriError).details).toContain('context canceled');
      const lastByteAt = proxy.stats(layer.digest).lastByteAt ?? failedAt;
      expect(failedAt - lastByteAt).toBeGreaterThanOrEqual(11_500);
      expect(failedAt - lastByteAt).toBeLessThan(35_000);
      const log = await waitFor(async () => {
        const text = await c.readLog();
        return text.includes('because of no progress in 12s') ? text : undefined;
      }, { what: 'cancel line in the containerd log' });
      expect(log).toContain(`cancel pulling image ${ref} because of no progress in 12s`);
    } finally {
      proxy.release(layer.digest);
      cri.close();
    }
  });
});

describe('tune on real containerd 1.6', () => {
  let c: RunningContainerd;
  beforeAll(async () => { c = await startContainerd({ version: '1.6' }); });
  afterAll(async () => { await c?.stop(); });

  test('plan reports that no deadline exists; apply leaves the runtime alone', async () => {
    const root = await asHostRoot(c);
    const before = await readFile(c.configPath, 'utf8');
    const { plan, layout } = await computePlanWithLayout({ hostRoot: root, history: null, deadlineOverrideMs: 120_000, now: new Date() });
    expect(plan.runtime).toMatchObject({ name: 'containerd', family: 'no-deadline' });
    expect(plan.runtime.version).toMatch(/^1\.6\./);
    const rt = plan.settings.find((s) => s.id === 'runtime.pullProgressTimeout')!;
    expect(rt).toMatchObject({ supported: false, risk: { level: 'danger' }, recommendation: { apply: false, manual: true } });
    const res = await applyPlan({ plan, layout, only: 'runtime' });
    expect(res.changes).toEqual([]);
    expect(await readFile(c.configPath, 'utf8')).toBe(before);
    const dump = await containerdConfigDump(new HostFs(root), defaultExec, '/usr/bin/containerd', '/config.toml');
    expect(timeoutFromDump(dump)).toBeUndefined();
  });
});
