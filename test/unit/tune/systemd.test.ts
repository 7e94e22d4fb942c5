import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseUnitSection, effectiveService, parseEnvFile, parseFlags, splitWords } from '../../../agent/tune/systemd.js';
import { KUBELET_VALUE_FLAGS } from '../../../agent/tune/kubelet.js';
import { FIXTURES } from './helpers.js';

const read = (p: string) => readFileSync(path.join(FIXTURES, p), 'utf8');

describe('systemd', () => {
  it('kubeadm: ExecStart reset in the drop-in, variables from Environment= and EnvironmentFile=', () => {
    const unit = parseUnitSection(read('kubeadm-crio/lib/systemd/system/kubelet.service'), '/lib/systemd/system/kubelet.service');
    const drop = parseUnitSection(read('kubeadm-crio/etc/systemd/system/kubelet.service.d/10-kubeadm.conf'), '/etc/systemd/system/kubelet.service.d/10-kubeadm.conf');
    const env = parseEnvFile(read('kubeadm-crio/var/lib/kubelet/kubeadm-flags.env'), '/var/lib/kubelet/kubeadm-flags.env');
    const view = effectiveService([...unit, ...drop], new Map([['/var/lib/kubelet/kubeadm-flags.env', env]]));
    expect(view.exec.map((w) => w.text)).toEqual([
      '/usr/bin/kubelet', '--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf', '--kubeconfig=/etc/kubernetes/kubelet.conf',
      '--config=/var/lib/kubelet/config.yaml', '--container-runtime-endpoint=unix:///var/run/crio/crio.sock', '--pod-infra-container-image=registry.k8s.io/pause:3.10',
    ]);
    const flags = parseFlags(view.exec, KUBELET_VALUE_FLAGS);
    expect(flags.get('config')?.value).toBe('/var/lib/kubelet/config.yaml');
    expect(flags.get('container-runtime-endpoint')?.origin).toEqual({ path: '/var/lib/kubelet/kubeadm-flags.env', line: 1 });
  });
  it('EKS AL2: backslash continuations, quoted Environment= in drop-ins, space-separated flag values', () => {
    const unit = parseUnitSection(read('eks-al2/etc/systemd/system/kubelet.service'), '/etc/systemd/system/kubelet.service');
    const d10 = parseUnitSection(read('eks-al2/etc/systemd/system/kubelet.service.d/10-kubelet-args.conf'), '/d/10.conf');
    const d30 = parseUnitSection(read('eks-al2/etc/systemd/system/kubelet.service.d/30-kubelet-extra-args.conf'), '/d/30.conf');
    const view = effectiveService([...unit, ...d10, ...d30], new Map());
    const flags = parseFlags(view.exec, KUBELET_VALUE_FLAGS);
    expect(flags.get('config')?.value).toBe('/etc/kubernetes/kubelet/kubelet-config.json');
    expect(flags.get('config')?.origin.line).toBe(10);
    expect(flags.get('image-pull-progress-deadline')).toMatchObject({ value: '10m', origin: { path: '/d/30.conf', line: 2 } });
    expect(flags.get('container-runtime-endpoint')?.value).toBe('unix:///run/containerd/containerd.sock');
  });
  it('AL2023: unquoted env file value with spaces', () => {
    const env = parseEnvFile(read('eks-al2023/etc/eks/kubelet/environment'), '/etc/eks/kubelet/environment');
    expect(env[0]?.name).toBe('NODEADM_KUBELET_ARGS');
    expect(splitWords(env[0]?.value ?? '')).toContain('--config-dir=/etc/kubernetes/kubelet/config.json.d');
  });
  it('Environment= with several assignments and ${VAR} inside a word', () => {
    const d = parseUnitSection('[Service]\nEnvironment="A=--x=1 --y=2" B=b\nExecStart=/bin/k $A --z=${B}\n', '/u');
    const v = effectiveService(d, new Map());
    expect(v.exec.map((w) => w.text)).toEqual(['/bin/k', '--x=1', '--y=2', '--z=b']);
  });
});
