import { Option, InvalidArgumentError } from 'commander';
import { parseDuration } from '../common/duration.js';
import { parseBytes } from '../common/bytes.js';

/**
 * An option that also reads PULLWATCH_<FLAG> from the environment (DESIGN.md: every flag does),
 * e.g. --stall-after → PULLWATCH_STALL_AFTER.
 */
export function envOption(flags: string, description: string, defaultValue?: string | boolean | string[]): Option {
  const o = new Option(flags, description);
  const long = o.long?.replace(/^--/, '') ?? '';
  if (long) o.env(`PULLWATCH_${long.toUpperCase().replace(/-/g, '_')}`);
  if (defaultValue !== undefined) o.default(defaultValue);
  return o;
}

/** commander argParser for durations ("60s"): a clear error instead of NaN. */
export function durationArg(value: string): number {
  try { return parseDuration(value); } catch (e) { throw new InvalidArgumentError((e as Error).message); }
}

/** commander argParser for sizes/rates ("64KiB"). */
export function bytesArg(value: string): number {
  try { return parseBytes(value); } catch (e) { throw new InvalidArgumentError((e as Error).message); }
}

/** Collects a repeatable option into an array. */
export function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}
