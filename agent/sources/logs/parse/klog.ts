/**
 * klog's header and structured body (kubelet, and dockershim inside it):
 *   I0901 23:34:58.231448     391 server.go:415] "Kubelet version" kubeletVersion="v1.27.3"
 *   E0601 18:48:29.026003   46185 kube_docker_client.go:274] Cancel pulling image "nginx:latest" …
 * Pure; never throws.
 */
import { readGoQuoted } from './gostring.js';
import { parseKeyValues, type KeyValues } from './kv.js';
import { yearLess } from './time.js';

export interface KlogLine {
  severity: 'I' | 'W' | 'E' | 'F';
  at: number;
  pid: number;
  file: string;
  body: string;
}

const HEADER = /^([IWEF])(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6})\s+(\d+) ([^\s:\]]+):(\d+)\] ?/;

export function parseKlogHeader(line: string, year: number | undefined, fallbackAt: number): KlogLine | null {
  const m = HEADER.exec(line);
  if (!m) return null;
  const n = (i: number) => Number(m[i]);
  const at = yearLess(n(2), n(3), n(4), n(5), n(6), Math.floor(n(7) / 1000), year, fallbackAt);
  if (at === null) return null; // an impossible date: not a klog header
  return {
    severity: m[1] as KlogLine['severity'],
    at,
    pid: n(8),
    file: `${m[9]}:${m[10]}`,
    body: line.slice(m[0].length),
  };
}

export interface KlogBody {
  /** The quoted message of a structured line, or the whole text of a printf-style one. */
  msg: string;
  kv: KeyValues;
  structured: boolean;
}

export function parseKlogBody(body: string): KlogBody {
  if (body.startsWith('"')) {
    const q = readGoQuoted(body, 0);
    if (q) return { msg: q.value, kv: parseKeyValues(body, q.end), structured: true };
  }
  return { msg: body, kv: Object.create(null) as KeyValues, structured: false };
}
