/** Sizes as people write them: "65536", "64KiB", "64k", "1.5MB", "2GiB". Returns bytes. */
export class ByteSizeError extends Error {}

const UNITS: Record<string, number> = {
  '': 1, b: 1,
  k: 1024, kb: 1000, kib: 1024,
  m: 1024 ** 2, mb: 1000 ** 2, mib: 1024 ** 2,
  g: 1024 ** 3, gb: 1000 ** 3, gib: 1024 ** 3,
  t: 1024 ** 4, tb: 1000 ** 4, tib: 1024 ** 4,
};

export function parseBytes(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)(?:\/s)?\s*$/.exec(String(text));
  const unit = m?.[2]?.toLowerCase() ?? '';
  if (!m || !(unit in UNITS)) throw new ByteSizeError(`invalid size "${text}" (expected e.g. 65536, 64KiB, 10MB)`);
  return Math.round(Number(m[1]) * (UNITS[unit] as number));
}

/** Human rendering with SI-ish units as kubectl users read them: 4.2 MB, 40 MB, 512 B. */
export function formatBytes(n: number): string {
  if (!Number.isFinite(n)) return '?';
  const abs = Math.abs(n);
  if (abs < 1000) return `${n} B`;
  const units = ['kB', 'MB', 'GB', 'TB'];
  let v = n / 1000;
  let i = 0;
  while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return `${v >= 100 ? v.toFixed(0) : v.toFixed(1)} ${units[i]}`;
}
