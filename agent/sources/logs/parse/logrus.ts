/**
 * The envelope of lines written by logrus (containerd, CRI-O, dockerd, cri-dockerd):
 *   text (no TTY, what journald and files get):  time="2023-09-01T23:34:52.778Z" level=info msg="…" k=v
 *   text (TTY):                                  INFO[2024-10-17 09:48:19.724850887Z] message      k=v
 *   JSON (containerd `[debug] format = "json"`): {"level":"info","msg":"…","time":"…"}
 * Pure; never throws.
 */
import { parseKeyValues, type KeyValues } from './kv.js';
import { parseRfc3339 } from './time.js';

export interface LogrusLine {
  at: number | null;
  level?: string;
  msg: string;
  fields: KeyValues;
}

const TTY = /^(TRAC|DEBU|INFO|WARN|ERRO|FATA|PANI)\[([^\]]*)\] ?(.*)$/;
const TTY_FIELDS = /\s{2,}((?:[\w.@/-]+=(?:"(?:[^"\\]|\\.)*"|\S*)\s*)+)$/;
const LEVELS: Record<string, string> = {
  TRAC: 'trace', DEBU: 'debug', INFO: 'info', WARN: 'warning', ERRO: 'error', FATA: 'fatal', PANI: 'panic',
};

export function parseLogrusLine(line: string): LogrusLine | null {
  const s = line.trimStart();
  if (s.startsWith('time=') || s.startsWith('level=')) {
    const fields = parseKeyValues(s);
    const msg = fields.msg;
    if (msg === undefined) return null;
    return { at: fields.time ? parseRfc3339(fields.time) : null, level: fields.level, msg, fields };
  }
  if (s.startsWith('{')) return parseJsonLine(s);
  const m = TTY.exec(s);
  if (m) {
    const rest = m[3] ?? '';
    const f = TTY_FIELDS.exec(rest);
    const msg = (f ? rest.slice(0, f.index) : rest).trimEnd();
    const fields = f?.[1] ? parseKeyValues(f[1]) : (Object.create(null) as KeyValues);
    return { at: parseRfc3339(m[2] ?? ''), level: LEVELS[m[1] ?? ''], msg, fields };
  }
  return null;
}

function parseJsonLine(s: string): LogrusLine | null {
  let obj: unknown;
  try { obj = JSON.parse(s); } catch { return null; }
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) return null;
  const rec = obj as Record<string, unknown>;
  if (typeof rec.msg !== 'string') return null;
  const fields: KeyValues = Object.create(null) as KeyValues;
  for (const [k, v] of Object.entries(rec)) {
    if (typeof v === 'string') fields[k] = v;
    else if (typeof v === 'number' || typeof v === 'boolean') fields[k] = String(v);
  }
  return {
    at: typeof rec.time === 'string' ? parseRfc3339(rec.time) : null,
    level: typeof rec.level === 'string' ? rec.level : undefined,
    msg: rec.msg,
    fields,
  };
}
