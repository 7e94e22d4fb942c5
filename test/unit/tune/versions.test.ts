import { describe, expect, it } from 'vitest';
import { parseContainerdVersion, containerdFamily, parseCrioVersion, crioFamily, parseKubeletVersion, parseCriDockerdVersion, containerdDefaultMs } from '../../../agent/tune/versions.js';

describe('versions', () => {
  it('containerd --version lines as distros print them', () => {
    expect(parseContainerdVersion('containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3')?.text).toBe('1.6.20');
    expect(parseContainerdVersion('containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1')?.text).toBe('1.7.24');
    expect(parseContainerdVersion('containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da')?.text).toBe('1.7.27');
    expect(parseContainerdVersion('containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7')?.text).toBe('2.1.4');
    expect(parseContainerdVersion('garbage')).toBeNull();
    expect(parseContainerdVersion('containerd something notaversion')).toBeNull();
  });
  it('families and defaults', () => {
    const fam = (s: string) => containerdFamily(parseContainerdVersion(`containerd x ${s}`));
    expect(fam('1.5.9')).toBe('no-deadline');
    expect(fam('1.6.33')).toBe('no-deadline');
    expect(fam('1.7.0')).toBe('1.7.0-1.7.9');
    expect(fam('1.7.9')).toBe('1.7.0-1.7.9');
    expect(fam('1.7.10')).toBe('1.7.10+');
    expect(fam('2.0.5')).toBe('2.0');
    expect(fam('2.1.0')).toBe('2.1+');
    expect(fam('2.2.1')).toBe('2.1+');
    expect(fam('3.0.0')).toBe('unknown');
    expect(containerdFamily(null)).toBe('unknown');
    expect(containerdDefaultMs('1.7.0-1.7.9')).toBe(60_000);
    expect(containerdDefaultMs('1.7.10+')).toBe(300_000);
    expect(containerdDefaultMs('no-deadline')).toBeNull();
  });
  it('CRI-O, kubelet, cri-dockerd', () => {
    expect(parseCrioVersion('crio version 1.28.1\n')?.text).toBe('1.28.1');
    expect(parseCrioVersion('Version:        1.33.2\nGitCommit: x')?.text).toBe('1.33.2');
    const cf = (s: string) => crioFamily(parseCrioVersion(`Version: ${s}`));
    expect(cf('1.29.9')).toBe('crio-no-timeout');
    expect(cf('1.30.10')).toBe('crio-no-timeout');
    expect(cf('1.30.11')).toBe('crio-default-10s');
    expect(cf('1.30.14')).toBe('crio-default-0s');
    expect(cf('1.31.3')).toBe('crio-default-10s');
    expect(cf('1.32.0')).toBe('crio-default-10s');
    expect(cf('1.32.4')).toBe('crio-default-0s');
    expect(cf('1.33.0')).toBe('crio-default-0s');
    expect(parseKubeletVersion('Kubernetes v1.30.4-eks-a737599')?.text).toBe('1.30.4');
    expect(parseCriDockerdVersion('cri-dockerd 0.3.15 (c1c566e)')?.text).toBe('0.3.15');
  });
});
