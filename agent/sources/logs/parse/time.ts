/**
 * Timestamps as the node's components write them. Pure; return null rather than throw.
 * Year-less stamps (klog `I1121 09:44:10.123456`, syslog `Nov 21 09:44:10`) are read as the
 * process's local time (UTC in the agent's container image) in `year` (default: the year of
 * `fallbackAt`); a result more than a day in the future of `fallbackAt` is taken from the year
 * before (a December line read in January).
 */

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?\s?(Z|[+-]\d{2}:?\d{2})?$/;

/** RFC 3339 (nanosecond fractions, `T` or space separator, `Z` or offset). No offset = UTC. */
export function parseRfc3339(text: string): number | null {
  const m = RFC3339.exec(text.trim());
  if (!m) return null;
  const [, y, mo, d, h, mi, s, frac, tz] = m;
  const ms = frac ? Number((frac + '00').slice(0, 3)) : 0;
  let t = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s), ms);
  if (tz && tz !== 'Z') {
    const sign = tz.startsWith('-') ? -1 : 1;
    const digits = tz.slice(1).replace(':', '');
    t -= sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2, 4))) * 60_000;
  }
  return Number.isFinite(t) ? t : null;
}

export function yearLess(
  month: number, day: number, h: number, mi: number, s: number, ms: number,
  year: number | undefined, fallbackAt: number,
): number | null {
  if (month < 1 || month > 12 || day < 1 || day > 31 || h > 23 || mi > 59 || s > 60) return null;
  const explicit = year !== undefined;
  const y = year ?? new Date(fallbackAt).getFullYear();
  let t = new Date(y, month - 1, day, h, mi, s, ms).getTime();
  if (!explicit && t > fallbackAt + 86_400_000) t = new Date(y - 1, month - 1, day, h, mi, s, ms).getTime();
  return Number.isFinite(t) ? t : null;
}

const MONTHS: Record<string, number> = {
  Jan: 1, Feb: 2, Mar: 3, Apr: 4, May: 5, Jun: 6, Jul: 7, Aug: 8, Sep: 9, Oct: 10, Nov: 11, Dec: 12,
};

export function monthNumber(abbrev: string): number | undefined {
  return MONTHS[abbrev];
}
