/**
 * One entry point for every log line a node writes about image pulls: kubelet (klog),
 * containerd / CRI-O / cri-dockerd (logrus text, TTY or JSON), optionally behind a syslog prefix
 * (`Sep 01 23:34:52 host containerd[130]: …` from /var/log/syslog or messages), and journald
 * entries (`journalctl -o json`). Pure, no I/O; returns null for anything that is not a pull line
 * and never throws, whatever the input.
 */
import { z } from 'zod';
import { parseContainerdLine, matchContainerdMessage } from './containerd.js';
import { matchCrioMessage } from './crio.js';
import { matchDockerMessage } from './docker.js';
import { parseKlogHeader } from './klog.js';
import { matchKubeletBody, parseKubeletLine } from './kubelet.js';
import { parseLogrusLine } from './logrus.js';
import { monthNumber, parseRfc3339, yearLess } from './time.js';
import type { LogComponent, ParseContext, ParsedLogLine } from './types.js';
import { parseCrioLine } from './crio.js';
import { parseDockerLine } from './docker.js';

export type { ParseContext, ParsedLogLine } from './types.js';
export { parseKubeletLine, matchKubeletMessage, isAlreadyPresent } from './kubelet.js';
export { parseContainerdLine, matchContainerdMessage } from './containerd.js';
export { parseCrioLine, matchCrioMessage } from './crio.js';
export { parseDockerLine, matchDockerMessage } from './docker.js';

/** Longest line the parsers look at; longer ones are not log lines we know (the readers drop them first). */
export const MAX_PARSE_LINE = 64 * 1024;

/**
 * Every pull line of every component contains one of these words; most lines a node writes do not,
 * and are refused before any further parsing (the cheap path for the 95% of noise).
 */
const PREFILTER = /pull(?:ing|ed)? image|PullImage|Timed out on waiting/i;

const SYSLOG_BSD = /^([A-Z][a-z]{2}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\S+) ([^\s[:]+)(?:\[\d+\])?: ?/;
const SYSLOG_ISO = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?) (\S+) ([^\s[:]+)(?:\[\d+\])?: ?/;

/** Component from a syslog identifier, journald SYSLOG_IDENTIFIER or unit name (kubelet.service, …). */
export function componentFromName(name: string | undefined): LogComponent | undefined {
  if (!name) return undefined;
  const n = name.toLowerCase().replace(/\.service$/, '');
  if (n === 'kubelet' || n.endsWith('.kubelet') || n.endsWith('-kubelet')) return 'kubelet';
  if (n === 'crio' || n === 'cri-o') return 'cri-o';
  if (n === 'cri-docker' || n === 'cri-dockerd' || n === 'docker' || n === 'dockerd') return 'docker';
  if (n === 'containerd' || n.endsWith('containerd')) return 'containerd';
  return undefined;
}

/** False when `text` cannot be a pull line of any component (cheap pre-check). */
export function mayBePullLine(text: string): boolean {
  return PREFILTER.test(text);
}

export function parseLogLine(line: string, ctx: ParseContext): ParsedLogLine | null {
  try {
    if (typeof line !== 'string' || line.length === 0 || line.length > MAX_PARSE_LINE) return null;
    if (!PREFILTER.test(line)) return null;
    let text = line.endsWith('\r') ? line.slice(0, -1) : line;
    let component = ctx.component;
    let fallbackAt = ctx.fallbackAt;
    const sys = stripSyslog(text, ctx);
    if (sys) {
      text = sys.rest;
      component ??= componentFromName(sys.ident);
      if (sys.at !== null) fallbackAt = sys.at;
    }
    const c: ParseContext = { fallbackAt, year: ctx.year, component };
    switch (component) {
      case 'kubelet': return parseKubeletLine(text, c);
      case 'containerd': return parseContainerdLine(text, c);
      case 'cri-o': return parseCrioLine(text, c);
      case 'docker': return parseDockerLine(text, c);
      default: return detect(text, c);
    }
  } catch {
    return null;
  }
}

function detect(text: string, ctx: ParseContext): ParsedLogLine | null {
  const k = parseKlogHeader(text, ctx.year, ctx.fallbackAt);
  if (k) {
    const event = matchKubeletBody(k.body);
    return event ? { at: k.at ?? ctx.fallbackAt, component: 'kubelet', event } : null;
  }
  const l = parseLogrusLine(text);
  if (!l) return null;
  const at = l.at ?? ctx.fallbackAt;
  let event = matchContainerdMessage(l.msg, l.fields);
  if (event) return { at, component: 'containerd', event };
  event = matchCrioMessage(l.msg, l.fields);
  if (event) {
    const out: ParsedLogLine = { at, component: 'cri-o', event };
    if (l.fields.id) out.requestId = l.fields.id;
    return out;
  }
  event = matchDockerMessage(l.msg, l.fields);
  return event ? { at, component: 'docker', event } : null;
}

function stripSyslog(text: string, ctx: ParseContext): { ident: string; at: number | null; rest: string } | null {
  const c0 = text.charCodeAt(0);
  if (c0 >= 0x41 && c0 <= 0x5a) {
    const m = SYSLOG_BSD.exec(text);
    if (!m) return null;
    const month = monthNumber(m[1] as string);
    if (month === undefined) return null;
    const at = yearLess(month, Number(m[2]), Number(m[3]), Number(m[4]), Number(m[5]), 0, ctx.year, ctx.fallbackAt);
    return { ident: m[7] as string, at, rest: text.slice(m[0].length) };
  }
  if (c0 >= 0x30 && c0 <= 0x39) {
    const m = SYSLOG_ISO.exec(text);
    if (!m) return null;
    return { ident: m[3] as string, at: parseRfc3339(m[1] as string), rest: text.slice(m[0].length) };
  }
  return null;
}

// ---- journald -------------------------------------------------------------------------------

/** A journald field value in `journalctl -o json`: text, bytes (non-UTF-8), null (too large), or several of those. */
const fieldValue = z.union([z.string(), z.array(z.number().int().min(0).max(255)), z.null()]);
const journalField = z.union([fieldValue, z.array(z.union([z.string(), z.array(z.number().int().min(0).max(255)), z.null()]))]);

export const journalEntrySchema = z.object({
  MESSAGE: journalField.optional(),
  _SYSTEMD_UNIT: journalField.optional(),
  SYSLOG_IDENTIFIER: journalField.optional(),
  _COMM: journalField.optional(),
  __REALTIME_TIMESTAMP: z.union([z.string().regex(/^\d{1,20}$/), z.number().int().nonnegative()]).optional(),
  __CURSOR: z.string().optional(),
}).passthrough();

export type JournalEntry = z.infer<typeof journalEntrySchema>;

/** A journald field as text: bytes decoded as UTF-8 (U+FFFD for junk), first value of a multi-valued field. */
export function journalText(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (!Array.isArray(v) || v.length === 0) return undefined;
  if (typeof v[0] === 'number') {
    if (v.length > MAX_PARSE_LINE) return undefined;
    return Buffer.from(v as number[]).toString('utf8');
  }
  return journalText(v[0]);
}

/** Realtime stamp of a journal entry in epoch ms, or null. */
export function journalTime(entry: { __REALTIME_TIMESTAMP?: string | number }): number | null {
  const raw = entry.__REALTIME_TIMESTAMP;
  if (raw === undefined) return null;
  const us = typeof raw === 'number' ? raw : Number(raw);
  return Number.isFinite(us) ? Math.floor(us / 1000) : null;
}

/**
 * One `journalctl -o json` object (already JSON.parse'd). Component from _SYSTEMD_UNIT, else
 * SYSLOG_IDENTIFIER, else detected from the line; time from __REALTIME_TIMESTAMP (µs).
 */
export function parseJournalEntry(entry: unknown, fallbackAt: number): ParsedLogLine | null {
  try {
    const r = journalEntrySchema.safeParse(entry);
    if (!r.success) return null;
    const e = r.data;
    const message = journalText(e.MESSAGE);
    if (!message) return null;
    const component = componentFromName(journalText(e._SYSTEMD_UNIT))
      ?? componentFromName(journalText(e.SYSLOG_IDENTIFIER))
      ?? componentFromName(journalText(e._COMM));
    const at = journalTime(e);
    const parsed = parseLogLine(message, { fallbackAt: at ?? fallbackAt, component });
    if (!parsed) return null;
    if (at !== null) parsed.at = at;
    return parsed;
  } catch {
    return null;
  }
}

const CURSOR_RE = /"__CURSOR":"((?:[^"\\]|\\.)*)"/;

export type JournalLineResult =
  | { ok: true; parsed: ParsedLogLine | null; cursor?: string }
  | { ok: false; error: string };

/**
 * One line of `journalctl -o json` output. Lines that cannot hold a pull (no keyword, MESSAGE not
 * a byte array) skip JSON parsing and validation: only their cursor is taken.
 */
export function parseJournalLine(line: string, fallbackAt: number): JournalLineResult {
  if (!line.includes('"MESSAGE":[') && !PREFILTER.test(line)) {
    const m = CURSOR_RE.exec(line);
    if (m) return { ok: true, parsed: null, cursor: JSON.parse(`"${m[1]}"`) as string };
    // no cursor found cheaply: fall through to a full parse (and its error if it is not JSON)
  }
  let entry: unknown;
  try {
    entry = JSON.parse(line);
  } catch (err) {
    return { ok: false, error: (err as Error).message };
  }
  const cursor = entry && typeof entry === 'object' && typeof (entry as { __CURSOR?: unknown }).__CURSOR === 'string'
    ? (entry as { __CURSOR: string }).__CURSOR : undefined;
  return { ok: true, parsed: parseJournalEntry(entry, fallbackAt), cursor };
}
