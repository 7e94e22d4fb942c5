/**
 * Timestamps at the start of log lines, for applying --since/--until to text logs. Pure.
 * Year-less formats (syslog "Nov 21 09:51:57", klog "I1121 09:51:57.123456") take `refYear`;
 * times without a zone are read as UTC (nodes log in UTC; the manifest says so).
 */

const MONTHS: Record<string, number> = { Jan: 0, Feb: 1, Mar: 2, Apr: 3, May: 4, Jun: 5, Jul: 6, Aug: 7, Sep: 8, Oct: 9, Nov: 10, Dec: 11 };

const ISO_START = /^\[?(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?/;
const ISO_KEYED = /(?:\btime=|"(?:time|ts|timestamp|@timestamp)"\s*:\s*)"?(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?/;
const SYSLOG = /^([A-Z][a-z]{2}) {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d)/;
const KLOG = /^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?/;

function fromParts(y: string, mo: string, d: string, h: string, mi: string, s: string, frac: string | undefined, zone: string | undefined): number {
  let ms = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s));
  if (frac) ms += Number((frac + '00').slice(0, 3));
  if (zone && zone !== 'Z') {
    const sign = zone[0] === '-' ? -1 : 1;
    const z = zone.slice(1).replace(':', '');
    ms -= sign * (Number(z.slice(0, 2)) * 60 + Number(z.slice(2, 4))) * 60_000;
  }
  return ms;
}

/** Epoch ms of the line's timestamp, or null when the line has none we know. */
export function parseLineTime(line: string, refYear: number): number | null {
  let m = ISO_START.exec(line);
  if (m) return fromParts(m[1]!, m[2]!, m[3]!, m[4]!, m[5]!, m[6]!, m[7], m[8]);
  m = SYSLOG.exec(line);
  if (m) {
    const mon = MONTHS[m[1]!];
    if (mon !== undefined) return Date.UTC(refYear, mon, Number(m[2]), Number(m[3]), Number(m[4]), Number(m[5]));
  }
  m = KLOG.exec(line);
  if (m) {
    let ms = Date.UTC(refYear, Number(m[1]) - 1, Number(m[2]), Number(m[3]), Number(m[4]), Number(m[5]));
    if (m[6]) ms += Number((m[6] + '00').slice(0, 3));
    return ms;
  }
  const head = line.length > 300 ? line.slice(0, 300) : line;
  m = ISO_KEYED.exec(head);
  if (m) return fromParts(m[1]!, m[2]!, m[3]!, m[4]!, m[5]!, m[6]!, m[7], m[8]);
  return null;
}

/** A year-less timestamp that lands after the file's mtime belongs to the year before. */
export function fixYear(ms: number, mtimeMs: number): number {
  if (ms > mtimeMs + 2 * 86_400_000) {
    const d = new Date(ms);
    d.setUTCFullYear(d.getUTCFullYear() - 1);
    return d.getTime();
  }
  return ms;
}
