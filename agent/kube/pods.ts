/**
 * Pure mapping from Pod objects (as the API server sends them in lists and watch events) to the
 * containers that wait on an image. No I/O. Pods are validated with zod at this boundary: a
 * malformed object yields an error the caller counts, never an exception out of the source.
 */
import { z } from 'zod';
import { parseImageRef } from '../../common/image-ref.js';
import type { PodImageWait } from '../model/observations.js';

/**
 * Waiting reasons that mean "the image is not there yet". ContainerCreating is what the kubelet
 * reports while a pull is in flight (kubelet/kuberuntime: the container is not created until
 * EnsureImageExists returns); the others are the image-manager errors (pkg/kubelet/images/types.go).
 */
export const IMAGE_WAIT_REASONS: ReadonlySet<string> = new Set([
  'ContainerCreating',
  'ErrImagePull',
  'ImagePullBackOff',
  'RegistryUnavailable',
  'SignatureValidationFailed',
  'InvalidImageName',
  'ErrImageNeverPull',
  'ImageInspectError',
]);

const containerSpec = z.object({ name: z.string(), image: z.string().optional() });
const containerStatus = z.object({
  name: z.string(),
  image: z.string().optional(),
  state: z.object({
    waiting: z.object({ reason: z.string().optional(), message: z.string().optional() }).nullish(),
  }).passthrough().nullish(),
});

/** The part of a v1.Pod this module reads. Everything else passes through untouched. */
export const podSchema = z.object({
  metadata: z.object({
    name: z.string().min(1),
    namespace: z.string().min(1),
    uid: z.string().optional(),
    resourceVersion: z.string().optional(),
  }),
  spec: z.object({
    nodeName: z.string().optional(),
    containers: z.array(containerSpec).default([]),
    initContainers: z.array(containerSpec).nullish(),
  }).optional(),
  status: z.object({
    phase: z.string().optional(),
    containerStatuses: z.array(containerStatus).nullish(),
    initContainerStatuses: z.array(containerStatus).nullish(),
  }).nullish(),
});
export type PodLike = z.infer<typeof podSchema>;

export type ParsedPod =
  | { ok: true; key: string; namespace: string; name: string; resourceVersion?: string; waits: PodImageWait[] }
  | { ok: false; error: string };

/** Validates one pod object and returns the containers on it that wait on their image. */
export function parsePod(obj: unknown): ParsedPod {
  const r = podSchema.safeParse(obj);
  if (!r.success) {
    const first = r.error.issues[0];
    return { ok: false, error: `invalid Pod object: ${first ? `${first.path.join('.')}: ${first.message}` : 'unknown'}` };
  }
  const pod = r.data;
  return {
    ok: true,
    key: podKey(pod.metadata.namespace, pod.metadata.name),
    namespace: pod.metadata.namespace,
    name: pod.metadata.name,
    resourceVersion: pod.metadata.resourceVersion,
    waits: waitingContainers(pod),
  };
}

export function podKey(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

/**
 * Containers of a pod whose state is waiting for an image reason. The image comes from the spec
 * (what the user wrote; the status' image may be empty or already resolved), falling back to the
 * status. A pod whose status the kubelet has not written yet counts once it has.
 */
export function waitingContainers(pod: PodLike): PodImageWait[] {
  const out: PodImageWait[] = [];
  const { namespace, name, uid } = pod.metadata;
  const spec = pod.spec;
  const status = pod.status ?? undefined;
  const specImage = new Map<string, string>();
  for (const c of spec?.initContainers ?? []) if (c.image) specImage.set(c.name, c.image);
  for (const c of spec?.containers ?? []) if (c.image) specImage.set(c.name, c.image);
  const phase = status?.phase;
  if (phase === 'Succeeded' || phase === 'Failed') return out;
  const statuses = [...(status?.initContainerStatuses ?? []), ...(status?.containerStatuses ?? [])];
  for (const cs of statuses) {
    const waiting = cs.state?.waiting;
    const reason = waiting?.reason;
    if (!reason || !IMAGE_WAIT_REASONS.has(reason)) continue;
    const image = specImage.get(cs.name) ?? cs.image;
    if (!image) continue;
    const wait: PodImageWait = { namespace, name, container: cs.name, image, reason };
    if (uid) wait.uid = uid;
    if (waiting?.message) wait.message = waiting.message;
    out.push(wait);
  }
  return out;
}

/** Stable order so that "did the set change" is a string comparison. */
export function sortWaits(waits: PodImageWait[]): PodImageWait[] {
  return [...waits].sort((a, b) =>
    a.namespace.localeCompare(b.namespace) || a.name.localeCompare(b.name) || a.container.localeCompare(b.container));
}

function sameImage(a: string, b: string): boolean {
  return parseImageRef(a).normalized === parseImageRef(b).normalized;
}

/**
 * With `serializeImagePulls: true` (the kubelet default) the kubelet pulls one image at a time per
 * node, so while one pull is stalled every other container still in ContainerCreating on a different
 * image is queued behind it. Returns those waits (pure; the caller decides whether pulls are
 * serialized, e.g. from the kubelet config). With serialized pulls off nothing is queued.
 */
export function podsQueuedBehind(
  stalledImage: string,
  waits: readonly PodImageWait[],
  serializeImagePulls: boolean,
): PodImageWait[] {
  if (!serializeImagePulls) return [];
  return waits.filter((w) => w.reason === 'ContainerCreating' && !sameImage(w.image, stalledImage));
}

/** Waits on a given image (tag or digest as normalised by image-ref). */
export function podsWaitingOn(image: string, waits: readonly PodImageWait[]): PodImageWait[] {
  return waits.filter((w) => sameImage(w.image, image));
}
