/**
 * `tune plan` on a full node layout: the recorded kubeadm + containerd 1.7 layout (real 1.7 binary
 * for the version), plus three containerd imports, two kubelet --config-dir drop-ins, the
 * containerd unit, and a pull history of 5,000 pulls over 4 registries. Target: < 1 s per plan.
 */
import { cp, copyFile, link, mkdtemp, mkdir, rm, writeFile, readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { computeTunePlan } from '../agent/tune/plan.js';
import type { HistoryPull } from '../agent/tune/types.js';

const FIXTURES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../test/fixtures/tune');
const CONTAINERD17 = `${process.env.PULLWATCH_CONTAINERD17_DIR ?? '/opt/pullwatch-test/containerd-1.7'}/usr/bin/containerd`;

async function buildLayout(): Promise<string> {
  const root = await mkdtemp(path.join(os.tmpdir(), 'pw-bench-tune-'));
  await cp(path.join(FIXTURES, 'kubeadm-containerd17'), root, { recursive: true });
  if (!existsSync(CONTAINERD17)) throw new Error(`${CONTAINERD17} missing (scripts/ensure-test-deps.sh)`);
  try { await link(CONTAINERD17, path.join(root, 'usr/bin/containerd')); } catch { await copyFile(CONTAINERD17, path.join(root, 'usr/bin/containerd')); }
  const main = path.join(root, 'etc/containerd/config.toml');
  await writeFile(main, (await readFile(main, 'utf8')).replace('imports = []', 'imports = ["/etc/containerd/conf.d/*.toml"]'));
  await mkdir(path.join(root, 'etc/containerd/conf.d'), { recursive: true });
  for (const n of ['10-metrics', '20-debug', '30-grpc']) {
    await writeFile(path.join(root, `etc/containerd/conf.d/${n}.toml`), `version = 2\n[${n === '10-metrics' ? 'metrics' : n === '20-debug' ? 'debug' : 'grpc'}]\n  ${n === '10-metrics' ? 'address = "127.0.0.1:1338"' : n === '20-debug' ? 'level = "info"' : 'max_recv_message_size = 16777216'}\n`);
  }
  await mkdir(path.join(root, 'etc/systemd/system'), { recursive: true });
  await writeFile(path.join(root, 'etc/systemd/system/containerd.service'), '[Service]\nExecStart=/usr/bin/containerd\n');
  await mkdir(path.join(root, 'etc/kubernetes/kubelet.conf.d'), { recursive: true });
  await writeFile(path.join(root, 'etc/kubernetes/kubelet.conf.d/10-a.conf'), 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 110\n');
  await writeFile(path.join(root, 'etc/kubernetes/kubelet.conf.d/20-b.conf'), '{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","registryPullQPS":10}\n');
  await mkdir(path.join(root, 'etc/default'), { recursive: true });
  await writeFile(path.join(root, 'etc/default/kubelet'), 'KUBELET_EXTRA_ARGS=--config-dir=/etc/kubernetes/kubelet.conf.d\n');
  return root;
}

function history(n: number): HistoryPull[] {
  const regs = ['docker.io', 'ghcr.io', 'quay.io', '123456789012.dkr.ecr.us-west-2.amazonaws.com'];
  return Array.from({ length: n }, (_, i) => ({
    id: `p${i}`, registry: regs[i % regs.length] as string, state: i % 50 === 0 ? 'failed' : 'completed',
    idleGapsMs: Array.from({ length: i % 5 }, (_, j) => 1_000 + ((i * 7919 + j * 104729) % 90_000)),
    bytesDone: 80_000_000, durationMs: 12_000, rateBytesPerSecond: 6_000_000,
    layers: [{ bytesTotal: 50_000_000 }, { bytesTotal: 30_000_000 }],
  }));
}

export async function benchTune(): Promise<Record<string, number | string>> {
  const root = await buildLayout();
  try {
    const h = history(5000);
    const times: number[] = [];
    let filesRead = 0;
    let files = 0;
    for (let i = 0; i < 11; i++) {
      const t0 = process.hrtime.bigint();
      const plan = await computeTunePlan({ hostRoot: root, history: h, now: new Date() });
      times.push(Number(process.hrtime.bigint() - t0) / 1e6);
      filesRead = plan.filesRead;
      files = plan.files.length;
      if (plan.errors.length) throw new Error(`plan errors: ${plan.errors.join('; ')}`);
    }
    times.sort((a, b) => a - b);
    return {
      tune_plan_median_ms: Number((times[5] as number).toFixed(1)),
      tune_plan_max_ms: Number((times[times.length - 1] as number).toFixed(1)),
      tune_plan_min_ms: Number(times[0]?.toFixed(1)),
      files_read: filesRead,
      files_looked_up: files,
      history_pulls: h.length,
      under_1s: (times[times.length - 1] as number) < 1000 ? 'yes' : 'NO',
    };
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}
