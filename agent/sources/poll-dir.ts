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

/**
 * pollRuntimeDir with the bookkeeping both sources need: a problem is reported, and the dir appearing after a problem is logged once. Returns the entries, or undefined
 * when there is no evidence this poll (emit nothing then).
 */
export class RuntimeDirPoller {
  private missing = false;

  constructor(
    private readonly dir: string,
    private readonly root: string,
    private readonly unreadableCause: string,
    private readonly report: (cause: string, err: unknown) => void,
  ) {}

  /** `found` runs when the dir is listed again after a problem. */
  list(found: () => void): Dirent[] | undefined {
    const listed = pollRuntimeDir(this.dir, this.root);
    if (!listed.ok) {
      this.report(listed.cause === 'root-missing' ? 'root-missing' : this.unreadableCause, listed.err);
      this.missing = true;
      return undefined;
    }
    if (this.missing) {
      this.missing = false;
      found();
    }
    return listed.entries;
  }
}
