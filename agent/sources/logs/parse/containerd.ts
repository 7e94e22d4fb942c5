/**
 * containerd CRI plugin pull lines (logrus; msg is a Go-quoted logfmt value, so the `%q` image
 * arrives as `msg="PullImage \"nginx:1.25\""`). Format strings, from
 * pkg/cri/server/instrumented_service.go + image_pull.go (1.6, 1.7) and
 * internal/cri/server/images/image_pull.go (2.x):
 *   PullImage %q                                   (info)
 *   PullImage %q returns image reference %q        (info)
 *   PullImage %q failed                            (error, with error="…")
 *   Pulled image %q with image id %q, repo tag %q, repo digest %q, size %q in %s   (info, 1.7+)
 *   Pulled image %q with image id %q, repo tag %q, repo digest %q                  (debug, 1.6)
 *   cancel pulling image %s because of no progress in %v                           (error, 1.7+)
 *   stop pulling image %s: active requests=%v, bytes read=%v                       (info, 1.7+)
 * Pure; never throws.
 */
import { parseDuration } from '../../../../common/duration.js';
import { GO_QUOTED, unquoteGo } from './gostring.js';
import type { KeyValues } from './kv.js';
import { parseLogrusLine } from './logrus.js';
import type { MessageMatch, ParseContext, ParsedLogLine, PullLogEvent } from './types.js';

const Q = GO_QUOTED;
const C = 'containerd' as const;

const RE_START = new RegExp(`^PullImage (${Q})$`);
const RE_RETURNS = new RegExp(`^PullImage (${Q}) returns image reference (${Q})$`);
const RE_FAILED = new RegExp(`^PullImage (${Q}) failed$`);
const RE_PULLED = new RegExp(
  `^Pulled image (${Q}) with image id (${Q}), repo tag (${Q}), repo digest (${Q})(?:, size (${Q}) in (\\S+))?$`,
);
const RE_CANCEL = /^cancel pulling image (\S+) because of no progress in (\S+)$/;
const RE_STOP = /^stop pulling image (\S+): active requests=(-?\d+), bytes read=(\d+)$/;

export function matchContainerdMessage(msg: string, fields: KeyValues): MessageMatch {
  if (!msg.includes('ull')) return null;
  let m = RE_START.exec(msg);
  if (m) {
    const image = unquoteGo(m[1] as string);
    return image ? { type: 'pull-started', component: C, image } : null;
  }
  m = RE_RETURNS.exec(msg);
  if (m) {
    const image = unquoteGo(m[1] as string);
    if (!image) return null;
    const ev: PullLogEvent = { type: 'pull-succeeded', component: C, image };
    const id = unquoteGo(m[2] as string);
    if (id) ev.imageId = id;
    return ev;
  }
  m = RE_FAILED.exec(msg);
  if (m) {
    const image = unquoteGo(m[1] as string);
    if (!image) return null;
    const ev: PullLogEvent = { type: 'pull-failed', component: C, image };
    if (fields.error !== undefined) ev.error = fields.error;
    return ev;
  }
  m = RE_PULLED.exec(msg);
  if (m) {
    const image = unquoteGo(m[1] as string);
    if (!image) return null;
    const ev: PullLogEvent = { type: 'pull-succeeded', component: C, image };
    const id = unquoteGo(m[2] as string);
    if (id) ev.imageId = id;
    const digest = unquoteGo(m[4] as string);
    if (digest) ev.repoDigest = digest;
    const size = m[5] !== undefined ? Number(unquoteGo(m[5])) : NaN;
    if (Number.isSafeInteger(size) && size >= 0) ev.sizeBytes = size;
    const d = dur(m[6]);
    if (d !== undefined) ev.durationMs = d;
    return ev;
  }
  m = RE_CANCEL.exec(msg);
  if (m) {
    const ev: PullLogEvent = { type: 'pull-cancelled', component: C, image: m[1] as string };
    const d = dur(m[2]);
    if (d !== undefined) ev.deadlineMs = d;
    return ev;
  }
  m = RE_STOP.exec(msg);
  if (m) {
    const ev: PullLogEvent = { type: 'pull-stopped', component: C, image: m[1] as string };
    const active = Number(m[2]);
    const bytes = Number(m[3]);
    if (Number.isSafeInteger(active)) ev.activeRequests = active;
    if (Number.isSafeInteger(bytes)) ev.bytesRead = bytes;
    return ev;
  }
  return null;
}

export function parseContainerdLine(line: string, ctx: ParseContext): ParsedLogLine | null {
  const l = parseLogrusLine(line);
  if (!l) return null;
  const event = matchContainerdMessage(l.msg, l.fields);
  return event ? { at: l.at ?? ctx.fallbackAt, component: C, event } : null;
}

export function dur(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  try {
    const ms = parseDuration(text);
    return Number.isFinite(ms) && ms >= 0 ? ms : undefined;
  } catch {
    return undefined;
  }
}
