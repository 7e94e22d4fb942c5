import { readdirSync, statSync, type Dirent } from 'node:fs';

export type PolledDir =
  | { ok: true; entries: Dirent[] }
  | { ok: false; cause: 'root-missing' | 'dir-unreadable'; err: unknown };

/**
 * Lists a directory a runtime creates on demand (containerd's ingest/, Docker's tmp/). Absent under
 * an existing root means "nothing in flight"; a missing root or an unreadable dir is no evidence at
 * all, and the caller reports it and emits nothing (rather than calling every known download closed).
 */
export function pollRuntimeDir(dir: string, root: string): PolledDir {
  try {
    return { ok: true, entries: readdirSync(dir, { withFileTypes: true }) };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException | null)?.code;
    if (code === 'ENOENT' && statSync(root, { throwIfNoEntry: false })?.isDirectory()) return { ok: true, entries: [] };
    return { ok: false, cause: code === 'ENOENT' ? 'root-missing' : 'dir-unreadable', err };
  }
}
