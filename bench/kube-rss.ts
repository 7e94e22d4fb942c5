/**
 * Agent memory with the Kubernetes integration on: the real `pullwatch agent` (built CLI) watching
 * 50 waiting pods on its node through the in-test API server, RSS and high-water mark after 12 s,
 * with default V8 flags and with --max-semi-space-size=1. Target (issue 6 / issue 2): ≤ 80 MiB RSS.
 * Run `npx tsc -p tsconfig.build.json` first (npm run bench does).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { FakeKubeApi } from '../test/harness/kube-api/server.js';

const NODE = 'n';

function memKiB(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (key: string): number => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? NaN);
  return { rss: kib('VmRSS'), hwm: kib('VmHWM') };
}

async function runOnce(api: FakeKubeApi, nodeFlags: string[], waitMs: number, kube = true): Promise<{ rss: number; hwm: number; watching: boolean }> {
  const dir = mkdtempSync(join(tmpdir(), 'pullwatch-bench-kube-rss-'));
  const root = join(dir, 'containerd');
  mkdirSync(root, { recursive: true });
  writeFileSync(join(dir, 'l'), '');
  const bin = resolve(import.meta.dirname, '..', 'bin', 'pullwatch.js');
  const child = spawn(process.execPath, [
    ...nodeFlags, bin, 'agent', ...(kube ? ['--kubeconfig', api.writeKubeconfig(dir)] : ['--kube', 'off']), '--node-name', NODE, '--listen', '127.0.0.1:0',
    '--containerd-root', root, '--containerd-socket', join(dir, 's'), '--docker-root', join(dir, 'd'),
    '--log-source', `file:${join(dir, 'l')}`, '--queue-dir', join(dir, 'q'), '--log-level', 'error',
  ], { stdio: ['ignore', 'ignore', 'inherit'] });
  const pid = child.pid;
  if (pid === undefined) throw new Error('could not spawn the agent');
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  try {
    await new Promise((r) => setTimeout(r, waitMs));
    if (child.exitCode !== null) throw new Error(`agent exited early with code ${child.exitCode}`);
    const m = memKiB(pid);
    // The number only means something if the agent is really watching through the API.
    return { ...m, watching: api.openWatches() > 0 };
  } finally {
    child.kill('SIGTERM');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 3000))]);
    try { process.kill(pid, 'SIGKILL'); } catch { /* already gone */ }
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchKubeRss(opts: { waitMs?: number } = {}): Promise<Record<string, number | string>> {
  const waitMs = opts.waitMs ?? 12_000;
  const api = await FakeKubeApi.start({ nodeName: NODE, bookmarkIntervalMs: 5000 });
  try {
    for (let i = 0; i < 50; i++) {
      api.addPod({ namespace: 'bench', name: `web-${i}`, nodeName: NODE, containers: [{ name: 'app', image: `registry.example.com/team/web:${i}`, waiting: 'ContainerCreating' }] });
    }
    const mib = (kib: number): number => Number((kib / 1024).toFixed(1));
    const plain = await runOnce(api, [], waitMs);
    const semi = await runOnce(api, ['--max-semi-space-size=1'], waitMs);
    // The same agent without the Kubernetes integration, for the difference.
    const off = await runOnce(api, [], waitMs, false);
    if (!plain.watching || !semi.watching) throw new Error('the agent did not open a pod watch against the in-test API server');
    return {
      'kube_agent.pods_waiting': 50,
      'kube_agent.rss_MiB': mib(plain.rss),
      'kube_agent.rss_hwm_MiB': mib(plain.hwm),
      'kube_agent.semi1.rss_MiB': mib(semi.rss),
      'kube_agent.semi1.rss_hwm_MiB': mib(semi.hwm),
      'kube_off_agent.rss_MiB': mib(off.rss),
      'kube_off_agent.rss_hwm_MiB': mib(off.hwm),
    };
  } finally {
    await api.close();
  }
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  benchKubeRss().then((r) => process.stdout.write(`${JSON.stringify(r, null, 2)}\n`), (err: unknown) => {
    process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
    process.exitCode = 1;
  });
}
