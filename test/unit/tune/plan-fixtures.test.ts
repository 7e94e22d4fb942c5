/**
 * Plan on recorded real node layouts (test/fixtures/tune, see PROVENANCE.md). containerd 1.6 and
 * 1.7 are the real binaries; 2.x, CRI-O and kubelet versions come from small scripts in the
 * layout that print what those binaries print.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { writeFile, mkdir, chmod, rm, symlink } from 'node:fs/promises';
import path from 'node:path';
import { computeTunePlan } from '../../../agent/tune/plan.js';
import type { TunePlan, TuneSetting } from '../../../agent/tune/types.js';
import { layoutCopy, pulls } from './helpers.js';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => { for (const c of cleanups.splice(0)) await c(); });

async function planFor(name: string, opts: Parameters<typeof layoutCopy>[1] = {}, prep?: (root: string) => Promise<void>, history = null as ReturnType<typeof pulls> | null): Promise<{ plan: TunePlan; root: string }> {
  const l = await layoutCopy(name, opts);
  cleanups.push(l.cleanup);
  if (prep) await prep(l.root);
  const plan = await computeTunePlan({ hostRoot: l.root, history, now: new Date('2026-11-21T10:00:00Z') });
  return { plan, root: l.root };
}
const setting = (p: TunePlan, id: TuneSetting['id']): TuneSetting => p.settings.find((s) => s.id === id) as TuneSetting;
const fakeContainerd = async (root: string, line: string): Promise<void> => {
  await mkdir(path.join(root, 'usr/bin'), { recursive: true });
  await writeFile(path.join(root, 'usr/bin/containerd'), `#!/bin/sh\necho "${line}"\n`);
  await chmod(path.join(root, 'usr/bin/containerd'), 0o755);
};

describe('plan on recorded layouts', () => {
  it('EKS AL2 (containerd 1.7, v2 config, kubelet-config.json, dead --image-pull-progress-deadline)', async () => {
    const { plan } = await planFor('eks-al2', { containerd: '1.7' });
    expect(plan.runtime).toMatchObject({ name: 'containerd', version: '1.7.24', family: '1.7.10+' });
    expect(plan.kubelet).toMatchObject({ version: '1.29.3', configFile: '/etc/kubernetes/kubelet/kubelet-config.json' });
    const rt = setting(plan, 'runtime.pullProgressTimeout');
    expect(rt.key).toBe('plugins."io.containerd.grpc.v1.cri".image_pull_progress_timeout');
    expect(rt.source).toEqual({ kind: 'default' });
    expect(rt.effective.value).toBe(300_000);
    const legacy = setting(plan, 'kubelet.imagePullProgressDeadline');
    expect(legacy.source).toEqual({ kind: 'flag', path: '/etc/systemd/system/kubelet.service.d/30-kubelet-extra-args.conf', line: 2, flag: '--image-pull-progress-deadline' });
    expect(legacy.risk.level).toBe('warn');
    expect(legacy.recommendation).toMatchObject({ manual: true, apply: false });
    const ser = setting(plan, 'kubelet.serializeImagePulls');
    expect(ser.effective.value).toBe(false);
    expect(ser.source).toMatchObject({ kind: 'file', path: '/etc/kubernetes/kubelet/kubelet-config.json', line: 33 });
    expect(plan.errors).toEqual([]);
    expect(plan.filesRead).toBe(5);
  });

  it('EKS AL2023 (containerd 2.1, v3 config, config.json + config.json.d)', async () => {
    const { plan } = await planFor('eks-al2023');
    expect(plan.runtime).toMatchObject({ name: 'containerd', version: '2.1.4', family: '2.1+' });
    expect(plan.kubelet.configDir).toBe('/etc/kubernetes/kubelet/config.json.d');
    const rt = setting(plan, 'runtime.pullProgressTimeout');
    expect(rt.key).toBe('plugins."io.containerd.cri.v1.images".image_pull_progress_timeout');
    expect(rt.effective.display).toBe('5m0s (default)');
    expect(setting(plan, 'kubelet.serializeImagePulls').source).toMatchObject({ path: '/etc/kubernetes/kubelet/config.json', line: 39 });
    expect(plan.files.map((f) => f.path)).toContain('/etc/kubernetes/kubelet/config.json.d/40-nodeadm.conf');
    expect(plan.files.map((f) => f.path)).toContain('/etc/eks/kubelet/environment');
    expect(plan.warnings.join(' ')).toContain('nodeadm renders /etc/containerd/config.toml');
  });

  it('kubeadm + CRI-O 1.33 (0s default: disabled)', async () => {
    const { plan } = await planFor('kubeadm-crio');
    expect(plan.runtime).toMatchObject({ name: 'cri-o', version: '1.33.2', family: 'crio-default-0s' });
    const rt = setting(plan, 'runtime.pullProgressTimeout');
    expect(rt.effective.value).toBe(0);
    expect(rt.risk.level).toBe('danger');
    expect(rt.risk.text).toContain('first progress event');
    expect(rt.recommendation).toMatchObject({ value: 300_000, apply: true });
    const ser = setting(plan, 'kubelet.serializeImagePulls');
    expect(ser.effective.display).toBe('true (default)');
    expect(ser.recommendation).toMatchObject({ value: false, apply: true });
    expect(plan.warnings.join(' ')).toContain('kubeadm upgrade');
  });

  it('kubeadm + containerd 1.6: no deadline exists', async () => {
    const { plan } = await planFor('kubeadm-containerd16', { containerd: '1.6' });
    expect(plan.runtime).toMatchObject({ version: '1.6.20', family: 'no-deadline' });
    const rt = setting(plan, 'runtime.pullProgressTimeout');
    expect(rt.supported).toBe(false);
    expect(rt.risk.level).toBe('danger');
    expect(rt.risk.text).toContain('no pull progress deadline');
    expect(rt.recommendation.apply).toBe(false);
    expect(setting(plan, 'kubelet.serializeImagePulls').risk.level).toBe('danger');
  });

  it('kubeadm + containerd 1.7 `config default`: explicit 5m0s at its line', async () => {
    const { plan } = await planFor('kubeadm-containerd17', { containerd: '1.7' });
    const rt = setting(plan, 'runtime.pullProgressTimeout');
    expect(rt.source).toMatchObject({ kind: 'file', path: '/etc/containerd/config.toml', line: 61 });
    expect(rt.effective.raw).toBe('5m0s');
  });

  it('evidence changes the recommendation; JSON shape is stable', async () => {
    const { plan } = await planFor('kubeadm-containerd17', { containerd: '1.7' }, undefined, pulls('ghcr.io', 30, [100_000]));
    expect(plan.deadline).toMatchObject({ basis: 'evidence', valueMs: 300_000 });
    const { plan: p2 } = await planFor('kubeadm-containerd17', { containerd: '1.7' }, undefined, pulls('ghcr.io', 30, [130_000]));
    expect(p2.deadline.valueMs).toBe(390_000);
    expect(setting(p2, 'runtime.pullProgressTimeout').recommendation).toMatchObject({ apply: true, display: '6m30s' });
    expect(Object.keys(JSON.parse(JSON.stringify(p2))).sort()).toEqual(
      ['deadline', 'errors', 'files', 'filesRead', 'generatedAt', 'history', 'hostRoot', 'kubelet', 'runtime', 'schemaVersion', 'settings', 'warnings']);
  });

  it('containerd 1.7.0–1.7.9: the 1m default is flagged', async () => {
    const { plan } = await planFor('eks-al2', {}, (r) => fakeContainerd(r, 'containerd containerd.io 1.7.5 abcdef'));
    const rt = setting(plan, 'runtime.pullProgressTimeout');
    expect(rt.effective.value).toBe(60_000);
    expect(rt.risk).toMatchObject({ level: 'warn' });
    expect(rt.risk.text).toContain('1.7.0–1.7.9');
  });

  it('containerd 2.1+ with 0s: danger (#14158)', async () => {
    const { plan } = await planFor('eks-al2023', {}, async (r) => {
      await writeFile(path.join(r, 'etc/containerd/config.toml'), "version = 3\n[plugins.'io.containerd.cri.v1.images']\nimage_pull_progress_timeout = '0s'\n");
    });
    const rt = setting(plan, 'runtime.pullProgressTimeout');
    expect(rt.risk.level).toBe('danger');
    expect(rt.risk.text).toContain('14158');
    expect(rt.source).toMatchObject({ line: 3 });
  });

  it('containerd 1.x: an import that mentions the CRI plugin replaces its whole section', async () => {
    const { plan } = await planFor('eks-al2', { containerd: '1.7' }, async (r) => {
      const main = path.join(r, 'etc/containerd/config.toml');
      const { readFile } = await import('node:fs/promises');
      await writeFile(main, (await readFile(main, 'utf8')).replace('sandbox_image =', 'image_pull_progress_timeout = "2m0s"\nsandbox_image ='));
      await mkdir(path.join(r, 'etc/containerd/config.d'), { recursive: true });
      await writeFile(path.join(r, 'etc/containerd/config.d/mirror.toml'), 'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\nconfig_path = "/etc/x"\n');
    });
    const rt = setting(plan, 'runtime.pullProgressTimeout');
    expect(rt.effective.display).toBe('5m0s (default)');
    expect(plan.warnings.join(' ')).toContain('replaces it');
  });

  it('Docker via cri-dockerd: its own --image-pull-progress-deadline, read from the cri-docker unit', async () => {
    const { plan } = await planFor('kubeadm-containerd17', {}, async (r) => {
      await writeFile(path.join(r, 'var/lib/kubelet/kubeadm-flags.env'), 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/cri-dockerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.9"\n');
      await mkdir(path.join(r, 'lib/systemd/system'), { recursive: true });
      await writeFile(path.join(r, 'lib/systemd/system/cri-docker.service'), '[Unit]\nDescription=CRI Interface for Docker Application Container Engine\n\n[Service]\nType=notify\nExecStart=/usr/bin/cri-dockerd --container-runtime-endpoint fd:// --image-pull-progress-deadline=30s\n');
      await writeFile(path.join(r, 'usr/bin/cri-dockerd'), '#!/bin/sh\necho "cri-dockerd 0.3.15 (c1c566e)"\n', { mode: 0o755 });
    });
    expect(plan.runtime).toMatchObject({ name: 'docker', version: '0.3.15', family: 'cri-dockerd' });
    const rt = setting(plan, 'runtime.pullProgressTimeout');
    expect(rt).toMatchObject({ component: 'cri-dockerd', effective: { value: 30_000 }, source: { kind: 'flag', path: '/lib/systemd/system/cri-docker.service', line: 6 }, risk: { level: 'warn' } });
    expect(rt.recommendation).toMatchObject({ apply: false, manual: true });
  });

  it('bad input: unknown version, garbage version, malformed/duplicate TOML, bad YAML/JSON, missing import, symlinks', async () => {
    const unknown = await planFor('eks-al2', {}, (r) => fakeContainerd(r, 'containerd github.com/containerd/containerd/v3 3.0.0 abc'));
    expect(setting(unknown.plan, 'runtime.pullProgressTimeout')).toMatchObject({ supported: false, risk: { level: 'unknown' }, recommendation: { apply: false } });
    expect(unknown.plan.errors.join(' ')).toContain('newer than the versions');

    const garbage = await planFor('eks-al2', {}, (r) => fakeContainerd(r, 'hello'));
    expect(garbage.plan.runtime.version).toBeNull();
    expect(garbage.plan.errors.join(' ')).toContain('unrecognised containerd --version output');

    const bad = await planFor('eks-al2', { containerd: '1.7' }, (r) => writeFile(path.join(r, 'etc/containerd/config.toml'), 'version = 2\n[plugins."io.containerd.grpc.v1.cri"\n'));
    expect(bad.plan.errors.join(' ')).toMatch(/malformed TOML in \/etc\/containerd\/config.toml/);

    const dup = await planFor('eks-al2', { containerd: '1.7' }, (r) => writeFile(path.join(r, 'etc/containerd/config.toml'), 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nimage_pull_progress_timeout = "1m"\nimage_pull_progress_timeout = "2m"\n'));
    expect(dup.plan.errors.join(' ')).toMatch(/malformed TOML/);

    const yaml = await planFor('kubeadm-crio', {}, (r) => writeFile(path.join(r, 'var/lib/kubelet/config.yaml'), 'kind: KubeletConfiguration\nserializeImagePulls: true\nserializeImagePulls: false\n'));
    expect(yaml.plan.errors.join(' ')).toMatch(/malformed YAML in \/var\/lib\/kubelet\/config.yaml/);

    const json = await planFor('eks-al2', { containerd: '1.7' }, (r) => writeFile(path.join(r, 'etc/kubernetes/kubelet/kubelet-config.json'), '{"kind": "KubeletConfiguration", "serializeImagePulls": '));
    expect(json.plan.errors.join(' ')).toMatch(/malformed JSON/);

    const wrongType = await planFor('eks-al2', { containerd: '1.7' }, (r) => writeFile(path.join(r, 'etc/kubernetes/kubelet/kubelet-config.json'), '{"kind": "KubeletConfiguration", "serializeImagePulls": "no"}'));
    expect(wrongType.plan.errors.join(' ')).toContain('serializeImagePulls');

    const missingImport = await planFor('kubeadm-containerd17', { containerd: '1.7' }, (r) => writeFile(path.join(r, 'etc/containerd/config.toml'), 'version = 2\nimports = ["/etc/containerd/gone.toml"]\n'));
    expect(missingImport.plan.errors.join(' ')).toContain('/etc/containerd/gone.toml, which does not exist');

    const noConfig = await planFor('kubeadm-containerd17', { containerd: '1.7' }, (r) => rm(path.join(r, 'etc/containerd/config.toml')));
    expect(setting(noConfig.plan, 'runtime.pullProgressTimeout').effective.display).toBe('5m0s (default)');
    expect(noConfig.plan.warnings.join(' ')).toContain('built-in defaults');

    const linked = await planFor('kubeadm-containerd17', { containerd: '1.7' }, async (r) => {
      await mkdir(path.join(r, 'etc/eks/containerd'), { recursive: true });
      await writeFile(path.join(r, 'etc/eks/containerd/containerd-config.toml'), 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nimage_pull_progress_timeout = "4m0s"\n');
      await rm(path.join(r, 'etc/containerd/config.toml'));
      await symlink('/etc/eks/containerd/containerd-config.toml', path.join(r, 'etc/containerd/config.toml'));
    });
    expect(setting(linked.plan, 'runtime.pullProgressTimeout').effective.raw).toBe('4m0s');
    expect(linked.plan.files.find((f) => f.path === '/etc/containerd/config.toml')?.realPath).toBe('/etc/eks/containerd/containerd-config.toml');

    const loop = await planFor('kubeadm-containerd17', { containerd: '1.7' }, async (r) => {
      await rm(path.join(r, 'etc/containerd/config.toml'));
      await symlink('/etc/containerd/config.toml', path.join(r, 'etc/containerd/config.toml'));
    });
    expect(loop.plan.errors.join(' ')).toContain('too many levels of symbolic links');
  });
});
