/**
 * Durations as people and Go programs write them: "60s", "1m30s", "5m0s", "1.5h", "250ms", "0".
 * Returns milliseconds. Throws DurationError with a clear message on anything else.
 */
export class DurationError extends Error {}

const UNIT_MS: Record<string, number> = {
  ns: 1e-6, us: 1e-3, 'µs': 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000,
};

export function parseDuration(text: string): number {
  const s = String(text).trim();
  if (s === '0') return 0;
  if (!s) throw new DurationError('empty duration');
  const re = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d)/gy;
  let total = 0;
  let pos = 0;
  let sign = 1;
  let body = s;
  if (body.startsWith('-')) { sign = -1; body = body.slice(1); }
  re.lastIndex = 0;
  while (pos < body.length) {
    re.lastIndex = pos;
    const m = re.exec(body);
    if (!m) throw new DurationError(`invalid duration "${text}" (expected e.g. 60s, 1m30s, 5m0s, 250ms, 1h)`);
    total += Number(m[1]) * (UNIT_MS[m[2] as string] as number);
    pos = re.lastIndex;
  }
  return sign * total;
}

/** Go-style rendering: 75000 → "1m15s", 300000 → "5m0s", 1500 → "1.5s". */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return String(ms);
  if (ms === 0) return '0s';
  const neg = ms < 0;
  let rest = Math.abs(ms);
  if (rest < 1000) return `${neg ? '-' : ''}${round(rest, 3)}ms`;
  const h = Math.floor(rest / 3_600_000); rest -= h * 3_600_000;
  const m = Math.floor(rest / 60_000); rest -= m * 60_000;
  const sec = round(rest / 1000, 3);
  let out = '';
  if (h) out += `${h}h`;
  if (h || m) out += `${m}m`;
  out += `${sec}s`;
  return (neg ? '-' : '') + out;
}

function round(n: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}
