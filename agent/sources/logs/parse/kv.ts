/**
 * `key=value key2="quoted \"value\""` pairs as written by logrus' text formatter (containerd,
 * CRI-O, dockerd, cri-dockerd) and by klog's structured logging after the quoted message.
 * Pure; never throws; a truncated quoted value keeps what is there.
 */
import { readGoQuoted } from './gostring.js';

export type KeyValues = Record<string, string>;

const MAX_PAIRS = 64;

export function parseKeyValues(text: string, start = 0): KeyValues {
  const out: KeyValues = Object.create(null) as KeyValues;
  let i = start;
  let pairs = 0;
  const n = text.length;
  while (i < n && pairs < MAX_PAIRS) {
    while (i < n && text.charCodeAt(i) === 0x20) i++;
    if (i >= n) break;
    const eq = text.indexOf('=', i);
    const sp = text.indexOf(' ', i);
    if (eq < 0) break;
    if (sp >= 0 && sp < eq) { i = sp + 1; continue; } // a bare word: skip it
    const key = text.slice(i, eq);
    i = eq + 1;
    let value: string;
    if (text.charCodeAt(i) === 0x22) {
      const q = readGoQuoted(text, i);
      if (q) { value = q.value; i = q.end; } else { value = text.slice(i + 1); i = n; }
    } else {
      const end = text.indexOf(' ', i);
      value = end < 0 ? text.slice(i) : text.slice(i, end);
      i = end < 0 ? n : end;
    }
    if (key && /^[\w.@/-]+$/.test(key)) { out[key] = value; pairs++; }
  }
  return out;
}
