/**
 * kubelet pull lines (pkg/kubelet/images/image_manager.go event messages, cri-client
 * remote_image.go, kuberuntime_image.go, dockershim kube_docker_client.go). Pure; never throws.
 *
 * Event messages (fmt strings, by version):
 *   Pulling image %q
 *   Successfully pulled image %q in %v                                        (1.19–1.25)
 *   Successfully pulled image %q in %v (%v including waiting)                 (1.26, backports)
 *   Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.   (1.30+)
 *   Container image %q already present on machine                           (no pull: ignored)
 *   Failed to pull image %q: %v
 *   Back-off pulling image %q   (the pod status message appends `: <previous error>`, 1.32+)
 * They reach the log as `"Event occurred" object="ns/pod" … reason="Pulling" message="…"` (klog -v≥3,
 * client-go StartStructuredLogging), as the older `Event(v1.ObjectReference{…}): type: … reason: …
 * <message>` (V4), or as plain klog text `<ns>/<pod>/<image> <message>` when there is no object ref.
 * cri-client: "PullImage from image service failed" err="…" image="…" (remote_image.go; log.go in 1.31+).
 * kuberuntime_image.go: "Failed to pull image" err="…" image="…".
 * pod_workers.go (default verbosity): "Error syncing pod, skipping" err="failed to \"StartContainer\" for
 *   \"c\" with ImagePullBackOff: \"Back-off pulling image \\\"img\\\"[: <previous error>]\"" pod="ns/name".
 * dockershim (≤1.23): Cancel pulling image %q because of no progress for %v, latest progress: %q
 */
import { parseDuration } from '../../../../common/duration.js';
import { GO_QUOTED, readGoQuoted, unquoteGo } from './gostring.js';
import { parseKlogBody, parseKlogHeader } from './klog.js';
import type { MessageMatch, ParseContext, ParsedLogLine, PullLogEvent } from './types.js';

const Q = GO_QUOTED;
const C = 'kubelet' as const;

const RE_PULLING = new RegExp(`(?:^|\\s)Pulling image (${Q})$`);
const RE_PULLED = new RegExp(
  `(?:^|\\s)Successfully pulled image (${Q}) in (\\S+?)(?: \\((\\S+?) including waiting\\))?(?:\\. Image size: (\\d+) bytes\\.)?$`,
);
const RE_FAILED = new RegExp(`(?:^|\\s)Failed to pull image (${Q}): ([\\s\\S]*)$`);
const RE_BACKOFF = new RegExp(`(?:^|\\s)Back-off pulling image (${Q})(?:: ([\\s\\S]*))?$`);
const RE_CANCEL = new RegExp(
  `(?:^|\\s)Cancel pulling image (${Q}) because of no progress for (\\S+), latest progress: (${Q})$`,
);
const RE_PRESENT = new RegExp(`(?:^|\\s)Container image (${Q}) already present on machine`);
const RE_PREFIX_POD = /^([^/\s]+)\/([^/\s]+)\/\S+$/;
const RE_OBJREF_POD = /Kind:"Pod", Namespace:"([^"]*)", Name:"([^"]*)"/;

function dur(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  try {
    const ms = parseDuration(text);
    return Number.isFinite(ms) && ms >= 0 ? ms : undefined;
  } catch {
    return undefined;
  }
}

function num(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

interface Found { event: PullLogEvent; index: number }

/**
 * Finds a kubelet pull message in `text` (an event message, or a printf-style klog body that may
 * carry a `ns/pod/image ` prefix). `pod` is attached when known.
 */
export function matchKubeletMessage(text: string, pod?: string): MessageMatch {
  const found = findKubelet(text);
  if (!found) return null;
  const ev = found.event;
  if (pod === undefined) pod = podFromPrefix(text.slice(0, found.index));
  if (pod && ev.type !== 'pull-cancelled' && ev.type !== 'pull-stopped') ev.pod = pod;
  return ev;
}

function findKubelet(text: string): Found | null {
  if (!text.includes('image')) return null;
  let m = RE_PULLING.exec(text);
  if (m) {
    const image = unquoteGo(m[1] as string);
    return image ? { event: { type: 'pull-started', component: C, image }, index: m.index } : null;
  }
  m = RE_PULLED.exec(text);
  if (m) {
    const image = unquoteGo(m[1] as string);
    if (!image) return null;
    const ev: PullLogEvent = { type: 'pull-succeeded', component: C, image };
    const d = dur(m[2]);
    const total = dur(m[3]);
    if (d !== undefined) ev.durationMs = d;
    if (d !== undefined && total !== undefined) ev.waitingMs = Math.max(0, Math.round((total - d) * 1000) / 1000);
    const size = num(m[4]);
    if (size !== undefined) ev.sizeBytes = size;
    return { event: ev, index: m.index };
  }
  m = RE_CANCEL.exec(text);
  if (m) {
    const image = unquoteGo(m[1] as string);
    if (!image) return null;
    const ev: PullLogEvent = { type: 'pull-cancelled', component: C, image };
    const d = dur(m[2]);
    if (d !== undefined) ev.deadlineMs = d;
    const last = unquoteGo(m[3] as string);
    if (last !== null) ev.lastProgress = last;
    return { event: ev, index: m.index };
  }
  m = RE_FAILED.exec(text);
  if (m) {
    const image = unquoteGo(m[1] as string);
    return image ? { event: { type: 'pull-failed', component: C, image, error: m[2] as string }, index: m.index } : null;
  }
  m = RE_BACKOFF.exec(text);
  if (m) {
    const image = unquoteGo(m[1] as string);
    if (!image) return null;
    const ev: PullLogEvent = { type: 'pull-backoff', component: C, image };
    if (m[2]) ev.error = m[2];
    return { event: ev, index: m.index };
  }
  return null;
}

function podFromPrefix(prefix: string): string | undefined {
  const p = prefix.trim();
  if (!p) return undefined;
  const ref = RE_OBJREF_POD.exec(p);
  if (ref) return `${ref[1]}/${ref[2]}`;
  const m = RE_PREFIX_POD.exec(p);
  return m ? `${m[1]}/${m[2]}` : undefined;
}

/** True for "Container image … already present on machine" (a pull that did not happen). */
export function isAlreadyPresent(text: string): boolean {
  return RE_PRESENT.test(text);
}

/** Parses one kubelet line (klog header optional). */
export function parseKubeletLine(line: string, ctx: ParseContext): ParsedLogLine | null {
  const header = parseKlogHeader(line, ctx.year, ctx.fallbackAt);
  const body = header ? header.body : line;
  const at = header?.at ?? ctx.fallbackAt;
  const event = matchKubeletBody(body);
  return event ? { at, component: C, event } : null;
}

export function matchKubeletBody(body: string): MessageMatch {
  const b = parseKlogBody(body);
  if (!b.structured) return matchKubeletMessage(b.msg);
  switch (b.msg) {
    case 'Event occurred': {
      const message = b.kv.message ?? b.kv.note;
      if (!message) return null;
      const pod = b.kv.kind === 'Pod' && b.kv.object ? b.kv.object : undefined;
      return matchKubeletMessage(message, pod ?? '');
    }
    case 'PullImage from image service failed':
    case 'Failed to pull image': {
      const image = b.kv.image;
      if (!image) return null;
      const ev: PullLogEvent = { type: 'pull-failed', component: C, image };
      if (b.kv.err !== undefined) ev.error = b.kv.err;
      return ev;
    }
    case 'Error syncing pod, skipping': {
      // pod_workers.go at default verbosity: err="failed to \"StartContainer\" for \"c\" with ImagePullBackOff: \"Back-off pulling image …\""
      const err = b.kv.err;
      const at = err ? err.indexOf(' with ImagePullBackOff: "') : -1;
      if (!err || at < 0) return null;
      const q = readGoQuoted(err, at + ' with ImagePullBackOff: '.length);
      return q ? matchKubeletMessage(q.value, b.kv.pod ?? '') : null;
    }
    default:
      return null;
  }
}
