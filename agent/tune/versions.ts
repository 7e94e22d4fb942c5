/**
 * Version parsing and per-version deadline facts (pure). Sources: REFERENCE.md, checked against
 * containerd pkg/cri/config (1.7: default 1m0s before 1.7.10, 5m0s after), containerd#14158 (2.1+),
 * CRI-O `[crio.image] pull_progress_timeout` (added 1.32.0 / 1.31.3 / 1.30.11; default 0s from
 * 1.33.0 / 1.32.4 / 1.31.9 / 1.30.14, 10s before), kubelet (dockershim flag gone in 1.24).
 */
import type { ContainerdFamily, CrioFamily } from './types.js';

export interface SemVer { major: number; minor: number; patch: number; text: string }

export function parseSemver(text: string): SemVer | null {
  const m = /v?(\d+)\.(\d+)(?:\.(\d+))?/.exec(text);
  if (!m) return null;
  const major = Number(m[1]);
  const minor = Number(m[2]);
  const patch = Number(m[3] ?? 0);
  return { major, minor, patch, text: `${major}.${minor}.${patch}` };
}

export function cmpSemver(a: SemVer, b: [number, number, number]): number {
  return a.major - b[0] || a.minor - b[1] || a.patch - b[2];
}

/**
 * `containerd --version` lines seen in the field:
 *   containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3
 *   containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da
 *   containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376
 */
export function parseContainerdVersion(output: string): SemVer | null {
  const line = output.split('\n').find((l) => /^containerd\s/.test(l.trim()));
  if (!line) return null;
  const fields = line.trim().split(/\s+/);
  // third field is the version (first is "containerd", second the package/module name)
  const v = fields[2];
  if (!v || !/^v?\d+\.\d+/.test(v)) return null;
  return parseSemver(v);
}

export function containerdFamily(v: SemVer | null): ContainerdFamily {
  if (!v) return 'unknown';
  if (v.major === 1 && v.minor <= 6) return 'no-deadline';
  if (v.major === 0) return 'no-deadline';
  if (v.major === 1 && v.minor === 7) return v.patch <= 9 ? '1.7.0-1.7.9' : '1.7.10+';
  if (v.major === 1) return 'unknown'; // 1.8+ never shipped
  if (v.major === 2 && v.minor === 0) return '2.0';
  if (v.major === 2) return '2.1+';
  return 'unknown'; // 3.x and later: semantics not verified
}

/** Built-in default of image_pull_progress_timeout (ms); null = the setting does not exist. */
export function containerdDefaultMs(f: ContainerdFamily): number | null | undefined {
  switch (f) {
    case 'no-deadline': return null;
    case '1.7.0-1.7.9': return 60_000;
    case '1.7.10+': case '2.0': case '2.1+': return 300_000;
    default: return undefined;
  }
}

/** `crio --version`: "crio version 1.28.1" (old) or a table with "Version:        1.30.4". */
export function parseCrioVersion(output: string): SemVer | null {
  const m = /^\s*(?:crio version|Version:)\s+v?(\d+\.\d+\.\d+)/mi.exec(output);
  return m?.[1] ? parseSemver(m[1]) : null;
}

export function crioFamily(v: SemVer | null): CrioFamily | 'unknown' {
  if (!v) return 'unknown';
  if (v.major !== 1) return 'unknown';
  const has = v.minor >= 32 || (v.minor === 31 && v.patch >= 3) || (v.minor === 30 && v.patch >= 11);
  if (!has) return 'crio-no-timeout';
  const zero = v.minor >= 33 || (v.minor === 32 && v.patch >= 4) || (v.minor === 31 && v.patch >= 9) || (v.minor === 30 && v.patch >= 14);
  return zero ? 'crio-default-0s' : 'crio-default-10s';
}

/** `kubelet --version`: "Kubernetes v1.29.3" or "Kubernetes v1.30.4-eks-a737599". */
export function parseKubeletVersion(output: string): SemVer | null {
  const m = /Kubernetes\s+v?(\d+\.\d+\.\d+)/.exec(output);
  return m?.[1] ? parseSemver(m[1]) : null;
}

/** `cri-dockerd --version`: "cri-dockerd 0.3.15 (c1c566e)". */
export function parseCriDockerdVersion(output: string): SemVer | null {
  const m = /cri-dockerd\s+v?(\d+\.\d+\.\d+)/.exec(output);
  return m?.[1] ? parseSemver(m[1]) : null;
}
