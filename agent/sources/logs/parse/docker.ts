/**
 * Docker-side pull lines. dockerd itself logs no pull start/progress at info level; the lines come
 * from cri-dockerd (libdocker/kube_docker_client.go, logrus), which took over dockershim's
 * progress reporter:
 *   Cancel pulling image %s because it exceeded image pull deadline %s. Latest progress %s   (current)
 *   Cancel pulling image %q because of no progress for %v, latest progress: %q               (early cri-dockerd)
 *   Stop pulling image %s: %s          (the pull ended; the last progress follows)
 * (`Pulling image %s: %s` every 10 s is progress, not a start: ignored.)
 * Pure; never throws.
 */
import { dur } from './containerd.js';
import { GO_QUOTED, unquoteGo } from './gostring.js';
import type { KeyValues } from './kv.js';
import { parseLogrusLine } from './logrus.js';
import type { MessageMatch, ParseContext, ParsedLogLine, PullLogEvent } from './types.js';

const C = 'docker' as const;
const Q = GO_QUOTED;
const RE_CANCEL_NEW = /^Cancel pulling image (\S+) because it exceeded image pull deadline (\S+)\. Latest progress ([\s\S]*)$/;
const RE_CANCEL_OLD = new RegExp(`^Cancel pulling image (${Q}) because of no progress for (\\S+), latest progress: (${Q})$`);
const RE_STOP = /^Stop pulling image (\S+): ([\s\S]*)$/;

export function matchDockerMessage(msg: string, _fields: KeyValues): MessageMatch {
  let m = RE_CANCEL_NEW.exec(msg);
  if (m) {
    const ev: PullLogEvent = { type: 'pull-cancelled', component: C, image: m[1] as string, lastProgress: m[3] as string };
    const d = dur(m[2]);
    if (d !== undefined) ev.deadlineMs = d;
    return ev;
  }
  m = RE_CANCEL_OLD.exec(msg);
  if (m) {
    const image = unquoteGo(m[1] as string);
    if (!image) return null;
    const ev: PullLogEvent = { type: 'pull-cancelled', component: C, image };
    const d = dur(m[2]);
    if (d !== undefined) ev.deadlineMs = d;
    const last = unquoteGo(m[3] as string);
    if (last !== null) ev.lastProgress = last;
    return ev;
  }
  m = RE_STOP.exec(msg);
  if (m) return { type: 'pull-stopped', component: C, image: m[1] as string };
  return null;
}

export function parseDockerLine(line: string, ctx: ParseContext): ParsedLogLine | null {
  const l = parseLogrusLine(line);
  if (!l) return null;
  const event = matchDockerMessage(l.msg, l.fields);
  return event ? { at: l.at ?? ctx.fallbackAt, component: C, event } : null;
}
