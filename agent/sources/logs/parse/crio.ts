/**
 * CRI-O pull lines (server/image_pull.go; logrus text, time with a space separator, request
 * fields `id=<uuid> name=/runtime.v1.ImageService/PullImage`):
 *   Pulling image: %s                                         (info)
 *   Pulled image: %v          (the resolved reference, usually repo@sha256:…)   (info)
 *   Timed out on waiting up to %s for image pull progress updates   (warning; names no image:
 *                                                the event's image is '' and requestId is set)
 * Pure; never throws.
 */
import { dur } from './containerd.js';
import type { KeyValues } from './kv.js';
import { parseLogrusLine } from './logrus.js';
import type { MessageMatch, ParseContext, ParsedLogLine, PullLogEvent } from './types.js';

const C = 'cri-o' as const;
const RE_PULLING = /^Pulling image: (\S+)$/;
const RE_PULLED = /^Pulled image: (\S+)$/;
const RE_TIMEOUT = /^Timed out on waiting up to (\S+) for image pull progress updates$/;

export function matchCrioMessage(msg: string, fields: KeyValues): MessageMatch {
  let m = RE_PULLING.exec(msg);
  if (m) return { type: 'pull-started', component: C, image: m[1] as string };
  m = RE_PULLED.exec(msg);
  if (m) {
    const image = m[1] as string;
    const ev: PullLogEvent = { type: 'pull-succeeded', component: C, image };
    if (/@sha256:[0-9a-f]{64}$/.test(image)) ev.repoDigest = image;
    return ev;
  }
  m = RE_TIMEOUT.exec(msg);
  if (m) {
    const ev: PullLogEvent = { type: 'pull-cancelled', component: C, image: fields.image ?? '' };
    const d = dur(m[1]);
    if (d !== undefined) ev.deadlineMs = d;
    return ev;
  }
  return null;
}

export function parseCrioLine(line: string, ctx: ParseContext): ParsedLogLine | null {
  const l = parseLogrusLine(line);
  if (!l) return null;
  const event = matchCrioMessage(l.msg, l.fields);
  if (!event) return null;
  const out: ParsedLogLine = { at: l.at ?? ctx.fallbackAt, component: C, event };
  if (l.fields.id) out.requestId = l.fields.id;
  return out;
}
