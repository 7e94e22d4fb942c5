/**
 * Pure reading of a v1.Node's status.nodeInfo: the kubelet version and the runtime the kubelet
 * talks to ("containerd://1.7.24", "cri-o://1.30.3", "docker://24.0.7").
 */
import { z } from 'zod';
import type { RuntimeInfo, RuntimeName } from '../model/observations.js';

export const nodeSchema = z.object({
  metadata: z.object({ name: z.string().min(1) }),
  status: z.object({
    nodeInfo: z.object({
      kubeletVersion: z.string().optional(),
      containerRuntimeVersion: z.string().optional(),
      osImage: z.string().optional(),
      kernelVersion: z.string().optional(),
    }).passthrough().optional(),
  }).passthrough().optional(),
});

export interface NodeInfo {
  name: string;
  kubeletVersion?: string;
  /** As the node reports it, e.g. "containerd://1.7.24". */
  containerRuntimeVersion?: string;
  osImage?: string;
  kernelVersion?: string;
  runtime?: RuntimeInfo;
}

export function parseNode(obj: unknown): { ok: true; node: NodeInfo } | { ok: false; error: string } {
  const r = nodeSchema.safeParse(obj);
  if (!r.success) {
    const first = r.error.issues[0];
    return { ok: false, error: `invalid Node object: ${first ? `${first.path.join('.')}: ${first.message}` : 'unknown'}` };
  }
  const ni = r.data.status?.nodeInfo;
  const node: NodeInfo = { name: r.data.metadata.name };
  if (ni?.kubeletVersion) node.kubeletVersion = ni.kubeletVersion;
  if (ni?.containerRuntimeVersion) node.containerRuntimeVersion = ni.containerRuntimeVersion;
  if (ni?.osImage) node.osImage = ni.osImage;
  if (ni?.kernelVersion) node.kernelVersion = ni.kernelVersion;
  const runtime = ni?.containerRuntimeVersion ? parseRuntimeVersion(ni.containerRuntimeVersion) : undefined;
  if (runtime) node.runtime = runtime;
  return { ok: true, node };
}

const RUNTIME_SCHEMES: Record<string, RuntimeName> = {
  containerd: 'containerd',
  'cri-o': 'cri-o',
  crio: 'cri-o',
  docker: 'docker',
};

/**
 * "containerd://1.7.24" → { name: 'containerd', version: '1.7.24' }. containerd before 1.7 has no
 * pull progress deadline at all (image_pull_progress_timeout arrived in 1.7.0), so pullDeadlineMs is
 * null there; for every other version the effective value depends on the runtime's config and is
 * left unknown (undefined) for the config reader to fill in.
 */
export function parseRuntimeVersion(text: string): RuntimeInfo | undefined {
  const m = /^([a-z0-9-]+):\/\/v?(\S+)$/i.exec(text.trim());
  if (!m) return undefined;
  const name = RUNTIME_SCHEMES[(m[1] as string).toLowerCase()];
  if (!name) return undefined;
  const version = m[2] as string;
  const info: RuntimeInfo = { name, version };
  if (name === 'containerd') {
    const v = /^(\d+)\.(\d+)/.exec(version);
    if (v && Number(v[1]) === 1 && Number(v[2]) < 7) info.pullDeadlineMs = null;
  }
  return info;
}
