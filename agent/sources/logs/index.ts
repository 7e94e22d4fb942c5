/**
 * Log sources: the `--log-source` values `journal`, `journal:DIR` and `file:PATH` turned into
 * followers that emit `{ kind: 'log', at, source, event }` observations.
 */
import type { LogComponent } from '../../model/observations.js';
import type { Source } from '../source.js';
import { FileLogSource, type FileLogSourceOptions } from './file-source.js';
import { JournalLogSource, type JournalLogSourceOptions } from './journal-source.js';

export { FileLogSource, type FileLogSourceOptions } from './file-source.js';
export { JournalLogSource, DEFAULT_JOURNAL_UNITS, type JournalLogSourceOptions } from './journal-source.js';
export { LineSplitter, DEFAULT_MAX_LINE_BYTES } from './line-reader.js';
export { LogCorrelator } from './correlate.js';
export {
  parseLogLine, parseJournalEntry, parseJournalLine, mayBePullLine, componentFromName, journalEntrySchema,
  type ParseContext, type ParsedLogLine,
} from './parse/index.js';

export class LogSourceSpecError extends Error {}

export type LogSourceSpec =
  | { kind: 'journal'; directory?: string }
  | { kind: 'file'; path: string };

/** Validates one `--log-source` value: `journal`, `journal:DIR` or `file:PATH`. Throws LogSourceSpecError. */
export function parseLogSourceSpec(spec: string): LogSourceSpec {
  const s = String(spec ?? '').trim();
  if (s === 'journal') return { kind: 'journal' };
  if (s.startsWith('journal:')) {
    const directory = s.slice('journal:'.length);
    if (!directory) throw new LogSourceSpecError(`--log-source "${spec}": journal: needs a directory, e.g. journal:/var/log/journal`);
    return { kind: 'journal', directory };
  }
  if (s.startsWith('file:')) {
    const path = s.slice('file:'.length);
    if (!path) throw new LogSourceSpecError(`--log-source "${spec}": file: needs a path, e.g. file:/var/log/kubelet.log`);
    return { kind: 'file', path };
  }
  throw new LogSourceSpecError(`--log-source "${spec}" is not one of: journal, journal:DIR, file:PATH`);
}

export interface CreateLogSourcesOptions {
  /**
   * Root of the host filesystem (`--host-root`). For plain `journal` with a root other than `/`,
   * journalctl reads the host's journal through `--root`. Paths in `journal:DIR` / `file:PATH`
   * are used as given (they are paths as the agent sees them).
   */
  hostRoot?: string;
  /** File poll interval (default 500 ms). */
  pollMs?: number;
  /** Bytes read back from each file at start (default 256 KiB). */
  tailBytes?: number;
  /** journalctl `--since` for the first start (default: the last 1000 entries). */
  journalSince?: string;
  /** journalctl executable (default from PATH). */
  journalctl?: string;
  journalUnits?: string[];
  /** Component for every file line (default: detected per line). */
  fileComponent?: LogComponent;
  file?: Omit<FileLogSourceOptions, 'pollMs' | 'tailBytes'>;
  journal?: Omit<JournalLogSourceOptions, 'directory' | 'root' | 'since' | 'journalctl' | 'units'>;
}

/** One source per spec, in order; duplicate specs are created once. Throws LogSourceSpecError on a bad spec. */
export function createLogSources(specs: string[], opts: CreateLogSourcesOptions = {}): Source[] {
  const seen = new Set<string>();
  const out: Source[] = [];
  for (const raw of specs) {
    const spec = parseLogSourceSpec(raw);
    const key = spec.kind === 'file' ? `file:${spec.path}` : `journal:${spec.directory ?? ''}`;
    if (seen.has(key)) continue;
    seen.add(key);
    if (spec.kind === 'file') {
      out.push(new FileLogSource(spec.path, {
        ...opts.file, pollMs: opts.pollMs, tailBytes: opts.tailBytes, component: opts.fileComponent ?? opts.file?.component,
      }));
    } else {
      const root = !spec.directory && opts.hostRoot && opts.hostRoot !== '/' ? opts.hostRoot : undefined;
      out.push(new JournalLogSource({
        ...opts.journal,
        directory: spec.directory,
        root,
        since: opts.journalSince,
        journalctl: opts.journalctl,
        units: opts.journalUnits,
      }));
    }
  }
  return out;
}
