/**
 * apply on recorded real layouts: minimal edits that keep comments and every other value, drop-ins
 * where the component supports them, backups, idempotence, and refusals on bad input. containerd
 * 1.6/1.7 validation runs the real binary (`config dump`, chrooted into the layout).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { readFile, writeFile, readdir, lstat, readlink, mkdir, rm, symlink } from 'node:fs/promises';
import { spawn, execFileSync } from 'node:child_process';
import path from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { parse as parseYaml } from 'yaml';
import { computePlanWithLayout } from '../../../agent/tune/plan.js';
import { applyPlan, containerdConfigDump, type ApplyOptions } from '../../../agent/tune/apply.js';
import { defaultExec } from '../../../agent/tune/detect.js';
import { HostFs } from '../../../agent/tune/hostfs.js';
import { timeoutFromDump } from '../../../agent/tune/containerd.js';
import { getPath } from '../../../agent/tune/toml-edit.js';
import { TuneError, type HistoryPull } from '../../../agent/tune/types.js';
import { layoutCopy, pulls, FIXTURES } from './helpers.js';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => { for (const c of cleanups.splice(0)) await c(); });

const SIX_MIN = pulls('ghcr.io', 30, [120_000]); // 3 × 2m = 6m0s

async function layout(name: string, opts: Parameters<typeof layoutCopy>[1] = {}, prep?: (root: string) => Promise<void>): Promise<string> {
  const l = await layoutCopy(name, opts);
  cleanups.push(l.cleanup);
  if (prep) await prep(l.root);
  return l.root;
}

async function apply(root: string, extra: Partial<ApplyOptions> = {}, history: HistoryPull[] | null = SIX_MIN) {
  const { plan, layout: lay } = await computePlanWithLayout({ hostRoot: root, history, now: new Date('2026-11-21T10:00:00Z') });
  return applyPlan({ plan, layout: lay, now: new Date('2026-11-21T10:00:00Z'), ...extra });
}

const rd = (root: string, p: string) => readFile(path.join(root, p), 'utf8');
const lines = (s: string) => s.split('\n').filter((l) => l.trim() !== '');

async function expectRefusal(p: Promise<unknown>, code: string, msg?: RegExp): Promise<void> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(TuneError);
  expect((e as TuneError).code).toBe(code);
  if (msg) expect((e as TuneError).message).toMatch(msg);
}

describe('apply on recorded layouts', () => {
  it('EKS AL2 / containerd 1.7: in-place edit of the CRI section (imports would wipe it), JSON kubelet edit, dump validated, idempotent', async () => {
    const root = await layout('eks-al2', { containerd: '1.7', libs: true });
    const before = await rd(root, 'etc/containerd/config.toml');
    const kBefore = await rd(root, 'etc/kubernetes/kubelet/kubelet-config.json');

    const dry = await apply(root, { dryRun: true });
    expect(dry.written).toBe(false);
    expect(dry.diff).toContain('+image_pull_progress_timeout = "6m0s"');
    expect(dry.diff).toContain('+  "maxParallelImagePulls": 3,');
    expect(await rd(root, 'etc/containerd/config.toml')).toBe(before);

    const res = await apply(root);
    expect(res.written).toBe(true);
    const after = await rd(root, 'etc/containerd/config.toml');
    for (const l of lines(before)) expect(after).toContain(l);
    expect(lines(after).length).toBe(lines(before).length + 1);
    expect(getPath(parseToml(after), ['plugins', 'io.containerd.grpc.v1.cri', 'image_pull_progress_timeout'])).toBe('6m0s');
    // the real containerd sees the new value and keeps the rest of the CRI section
    const dump = await containerdConfigDump(new HostFs(root), defaultExec, '/usr/bin/containerd', '/etc/containerd/config.toml');
    expect(timeoutFromDump(dump)).toBe('6m0s');
    expect(dump).toContain('602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause:3.5');
    const k = JSON.parse(await rd(root, 'etc/kubernetes/kubelet/kubelet-config.json'));
    expect(k).toEqual({ ...JSON.parse(kBefore), maxParallelImagePulls: 3 });
    // backup with the original bytes and a manifest
    const bdir = path.join(root, res.backupDir as string);
    expect(await readFile(path.join(bdir, 'etc/containerd/config.toml'), 'utf8')).toBe(before);
    expect(JSON.parse(await readFile(path.join(bdir, 'manifest.json'), 'utf8')).files).toHaveLength(2);

    const again = await apply(root);
    expect(again.changes).toEqual([]);
    expect(again.messages[0]).toContain('nothing to change');
  });

  it('EKS AL2023 / containerd 2.x: drop-in through imports (minimal edit of the main file), kubelet drop-in in config.json.d', async () => {
    const root = await layout('eks-al2023');
    const before = await rd(root, 'etc/containerd/config.toml');
    const res = await apply(root, { runtimeValidate: false });
    expect(res.changes.map((c) => c.path).sort()).toEqual([
      '/etc/containerd/config.toml', '/etc/containerd/pullwatch-tune.toml', '/etc/kubernetes/kubelet/config.json.d/99-pullwatch-tune.conf']);
    const main = await rd(root, 'etc/containerd/config.toml');
    expect(main).toBe(before.replace("version = 3\n", "version = 3\nimports = [\"/etc/containerd/pullwatch-tune.toml\"]\n"));
    const drop = parseToml(await rd(root, 'etc/containerd/pullwatch-tune.toml'));
    expect(drop.version).toBe(3);
    expect(getPath(drop, ['plugins', 'io.containerd.cri.v1.images', 'image_pull_progress_timeout'])).toBe('6m0s');
    const kdrop = JSON.parse(await rd(root, 'etc/kubernetes/kubelet/config.json.d/99-pullwatch-tune.conf'));
    expect(kdrop).toEqual({ apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration', maxParallelImagePulls: 3 });
    const { plan } = await computePlanWithLayout({ hostRoot: root, history: SIX_MIN, now: new Date() });
    const rt = plan.settings.find((s) => s.id === 'runtime.pullProgressTimeout');
    expect(rt?.source).toMatchObject({ kind: 'file', path: '/etc/containerd/pullwatch-tune.toml' });
    expect(plan.settings.find((s) => s.id === 'kubelet.maxParallelImagePulls')?.source).toMatchObject({ path: '/etc/kubernetes/kubelet/config.json.d/99-pullwatch-tune.conf' });
    expect((await apply(root, { runtimeValidate: false })).changes).toEqual([]);
  });

  it('containerd 2.x with an imports glob: the drop-in goes into that directory, main file untouched', async () => {
    const root = await layout('eks-al2023', {}, async (r) => {
      const p = path.join(r, 'etc/containerd/config.toml');
      await writeFile(p, (await readFile(p, 'utf8')).replace('version = 3\n', 'version = 3\nimports = ["conf.d/*.toml"]\n'));
      await mkdir(path.join(r, 'etc/containerd/conf.d'), { recursive: true });
      await writeFile(path.join(r, 'etc/containerd/conf.d/10-debug.toml'), "version = 3\n[debug]\nlevel = 'info'\n");
    });
    const before = await rd(root, 'etc/containerd/config.toml');
    const res = await apply(root, { runtimeValidate: false, only: 'runtime' });
    expect(res.changes.map((c) => c.path)).toEqual(['/etc/containerd/conf.d/99-pullwatch-tune.toml']);
    expect(await rd(root, 'etc/containerd/config.toml')).toBe(before);
    expect((await apply(root, { runtimeValidate: false, only: 'runtime' })).changes).toEqual([]);
  });

  it('kubeadm + CRI-O: crio.conf.d drop-in, minimal YAML edit of /var/lib/kubelet/config.yaml', async () => {
    const root = await layout('kubeadm-crio');
    const kBefore = await rd(root, 'var/lib/kubelet/config.yaml');
    const res = await apply(root);
    expect(res.written).toBe(true);
    expect(getPath(parseToml(await rd(root, 'etc/crio/crio.conf.d/99-pullwatch-tune.conf')), ['crio', 'image', 'pull_progress_timeout'])).toBe('6m0s');
    expect(await rd(root, 'etc/crio/crio.conf.d/10-crio.conf')).toBe(await readFile(path.join(FIXTURES, 'kubeadm-crio/etc/crio/crio.conf.d/10-crio.conf'), 'utf8'));
    const k = await rd(root, 'var/lib/kubelet/config.yaml');
    expect(k.startsWith(kBefore)).toBe(true);
    expect(parseYaml(k)).toEqual({ ...parseYaml(kBefore), serializeImagePulls: false, maxParallelImagePulls: 3 });
    expect((await apply(root)).changes).toEqual([]);
  });

  it('comments and order survive an in-place containerd edit; real dump shows the value (1.7)', async () => {
    const root = await layout('kubeadm-containerd17', { containerd: '1.7', libs: true }, (r) => writeFile(path.join(r, 'etc/containerd/config.toml'),
      '# managed by hand\nversion = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  # keep the pause image pinned\n  sandbox_image = "registry.k8s.io/pause:3.9"\n  image_pull_progress_timeout = "1m0s" # was too short\n  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n    SystemdCgroup = true\n'));
    await apply(root, { only: 'runtime' });
    const after = await rd(root, 'etc/containerd/config.toml');
    expect(after).toBe('# managed by hand\nversion = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  # keep the pause image pinned\n  sandbox_image = "registry.k8s.io/pause:3.9"\n  image_pull_progress_timeout = "6m0s" # was too short\n  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n    SystemdCgroup = true\n');
    const dump = await containerdConfigDump(new HostFs(root), defaultExec, '/usr/bin/containerd', '/etc/containerd/config.toml');
    expect(timeoutFromDump(dump)).toBe('6m0s');
    expect(dump).toMatch(/SystemdCgroup = true/);
  });

  it('a symlinked config is edited at its target; the link stays a link', async () => {
    const root = await layout('kubeadm-containerd17', { containerd: '1.7', libs: true }, async (r) => {
      await mkdir(path.join(r, 'etc/eks/containerd'), { recursive: true });
      await writeFile(path.join(r, 'etc/eks/containerd/containerd-config.toml'), 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.9"\n');
      await rm(path.join(r, 'etc/containerd/config.toml'));
      await symlink('/etc/eks/containerd/containerd-config.toml', path.join(r, 'etc/containerd/config.toml'));
    });
    await apply(root, { only: 'runtime' });
    expect((await lstat(path.join(root, 'etc/containerd/config.toml'))).isSymbolicLink()).toBe(true);
    expect(await readlink(path.join(root, 'etc/containerd/config.toml'))).toBe('/etc/eks/containerd/containerd-config.toml');
    expect(await rd(root, 'etc/eks/containerd/containerd-config.toml')).toContain('image_pull_progress_timeout = "6m0s"');
  });

  it('missing containerd config on 1.7: creates one that containerd accepts', async () => {
    const root = await layout('kubeadm-containerd17', { containerd: '1.7', libs: true }, (r) => rm(path.join(r, 'etc/containerd/config.toml')));
    await apply(root, { only: 'runtime' });
    const dump = await containerdConfigDump(new HostFs(root), defaultExec, '/usr/bin/containerd', '/etc/containerd/config.toml');
    expect(timeoutFromDump(dump)).toBe('6m0s');
  });

  it('refuses malformed files and leaves them untouched', async () => {
    const bad = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nimage_pull_progress_timeout = "1m"\nimage_pull_progress_timeout = "2m"\n';
    const root = await layout('kubeadm-containerd17', { containerd: '1.7' }, (r) => writeFile(path.join(r, 'etc/containerd/config.toml'), bad));
    await expectRefusal(apply(root, { only: 'runtime' }), 'malformed', /malformed TOML/);
    expect(await rd(root, 'etc/containerd/config.toml')).toBe(bad);
    const root2 = await layout('kubeadm-crio', {}, (r) => writeFile(path.join(r, 'var/lib/kubelet/config.yaml'), 'kind: KubeletConfiguration\n  bad: [\n'));
    await expectRefusal(apply(root2, { only: 'kubelet' }), 'malformed', /malformed YAML/);
  });

  it('refuses on a read-only mount (EROFS) before changing anything', async () => {
    const root = await layout('kubeadm-containerd17', { containerd: '1.7' });
    const dir = path.join(root, 'etc/containerd');
    execFileSync('mount', ['--bind', dir, dir]);
    try {
      execFileSync('mount', ['-o', 'remount,ro,bind', dir]);
      const before = await rd(root, 'etc/containerd/config.toml');
      await expectRefusal(apply(root, { only: 'runtime' }, pulls('r', 30, [200_000])), 'read-only', /read-only/);
      expect(await rd(root, 'etc/containerd/config.toml')).toBe(before);
      expect(await readdir(path.join(root, 'var/lib'))).not.toContain('pullwatch');
    } finally { execFileSync('umount', [dir]); }
  });

  it('lock: refuses a concurrent apply, takes over a stale lock', async () => {
    const root = await layout('kubeadm-crio');
    await mkdir(path.join(root, 'run'), { recursive: true });
    await writeFile(path.join(root, 'run/pullwatch-tune.lock'), JSON.stringify({ pid: process.pid, host: 'x', startedAt: 'then' }));
    await expectRefusal(apply(root), 'locked', new RegExp(`pid ${process.pid}`));
    // a lock left by a process that is gone
    const child = spawn('true');
    const deadPid = child.pid as number;
    await new Promise((r) => child.on('exit', r));
    await writeFile(path.join(root, 'run/pullwatch-tune.lock'), JSON.stringify({ pid: deadPid, host: 'x', startedAt: 'then' }));
    const res = await apply(root);
    expect(res.written).toBe(true);
    expect(await readdir(path.join(root, 'run'))).not.toContain('pullwatch-tune.lock');
  });

  it('--restart: refuses with pulls in flight or an unreachable agent (nothing written), --force overrides', async () => {
    const root = await layout('kubeadm-crio');
    const before = await rd(root, 'var/lib/kubelet/config.yaml');
    await expectRefusal(apply(root, { restart: true, inFlight: async () => 2 }), 'pulls-in-flight', /2 pull\(s\) in flight/);
    await expectRefusal(apply(root, { restart: true, inFlight: async () => { throw new TuneError('agent unreachable', 'agent-unreachable'); } }), 'agent-unreachable');
    expect(await rd(root, 'var/lib/kubelet/config.yaml')).toBe(before);
    const restarted: string[] = [];
    const res = await apply(root, { restart: true, force: true, restartComponent: async (c) => { restarted.push(c); }, healthy: async () => true });
    expect(res.restarted).toEqual(['cri-o', 'kubelet']);
    expect(restarted).toEqual(['cri-o', 'kubelet']);
  });

  it('a restart that fails or stays unhealthy rolls the files back and restarts again', async () => {
    const root = await layout('kubeadm-crio');
    const before = await rd(root, 'var/lib/kubelet/config.yaml');
    const calls: string[] = [];
    let n = 0;
    await expectRefusal(apply(root, {
      only: 'runtime', restart: true, inFlight: async () => 0,
      restartComponent: async (c) => { calls.push(c); if (n++ === 0) throw new Error('Job for crio.service failed'); },
      healthy: async () => true,
    }), 'rolled-back', /files restored/);
    expect(calls).toEqual(['cri-o', 'cri-o']);
    expect(await readdir(path.join(root, 'etc/crio/crio.conf.d'))).toEqual(['10-crio.conf']);

    let healthyCalls = 0;
    await expectRefusal(apply(root, {
      only: 'kubelet', restart: true, inFlight: async () => 0, healthTimeoutMs: 1200,
      restartComponent: async () => undefined,
      healthy: async () => { healthyCalls++; return false; },
    }), 'rolled-back', /not healthy/);
    expect(healthyCalls).toBeGreaterThan(1);
    expect(await rd(root, 'var/lib/kubelet/config.yaml')).toBe(before);
  });

  it('unknown containerd version: the runtime is not written', async () => {
    const root = await layout('kubeadm-containerd17', {}, async (r) => {
      await mkdir(path.join(r, 'usr/bin'), { recursive: true });
      await writeFile(path.join(r, 'usr/bin/containerd'), '#!/bin/sh\necho "containerd x 3.1.0 abc"\n', { mode: 0o755 });
    });
    const res = await apply(root, { only: 'runtime' }, pulls('r', 30, [200_000]));
    expect(res.changes).toEqual([]);
  });
});
