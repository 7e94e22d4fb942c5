/**
 * Reading the node's files under --host-root. Paths are host paths ("/etc/containerd/config.toml");
 * symlinks are followed *inside* the host root (an absolute link target names a host path, not a
 * path in pullwatch's own container), loops and escapes are reported, and every file read is
 * recorded for the plan's file list and the benchmark.
 */
import { lstat, readFile, readdir, readlink } from 'node:fs/promises';
import path from 'node:path';
import type { FileRead } from './types.js';

export type ReadOutcome =
  | { ok: true; path: string; realPath: string; text: string }
  | { ok: false; path: string; reason: 'missing' | 'error'; error: string };

export class HostFs {
  readonly files: FileRead[] = [];
  private readonly cache = new Map<string, ReadOutcome>();

  constructor(readonly hostRoot: string) {}

  /** Container path of a host path. */
  toLocal(hostPath: string): string {
    return path.join(this.hostRoot, path.posix.normalize('/' + hostPath));
  }

  /** Follows symlinks within the host root; returns the host path of the final target. */
  async realHostPath(hostPath: string): Promise<string> {
    let cur = path.posix.normalize('/' + hostPath);
    for (let hops = 0; hops < 40; hops++) {
      // resolve each component so that links in directories are followed too
      const parts = cur.split('/').filter(Boolean);
      let acc = '/';
      let changed = false;
      for (let i = 0; i < parts.length; i++) {
        const next = path.posix.join(acc, parts[i] as string);
        let st;
        try { st = await lstat(this.toLocal(next)); } catch (e) {
          if ((e as NodeJS.ErrnoException).code === 'ENOENT') return path.posix.join(next, ...parts.slice(i + 1));
          throw e;
        }
        if (st.isSymbolicLink()) {
          const target = await readlink(this.toLocal(next));
          const resolved = path.posix.isAbsolute(target) ? path.posix.normalize(target) : path.posix.normalize(path.posix.join(acc, target));
          cur = path.posix.join(resolved, ...parts.slice(i + 1));
          changed = true;
          break;
        }
        acc = next;
      }
      if (!changed) return cur;
    }
    throw new Error(`too many levels of symbolic links resolving ${hostPath}`);
  }

  async read(hostPath: string, role: string): Promise<ReadOutcome> {
    const cached = this.cache.get(hostPath);
    if (cached) return cached;
    let out: ReadOutcome;
    try {
      const real = await this.realHostPath(hostPath);
      const text = await readFile(this.toLocal(real), 'utf8');
      out = { ok: true, path: hostPath, realPath: real, text };
      this.files.push({ path: hostPath, role, status: 'read', ...(real !== hostPath ? { realPath: real } : {}) });
    } catch (e) {
      const err = e as NodeJS.ErrnoException;
      const missing = err.code === 'ENOENT' || err.code === 'ENOTDIR';
      out = { ok: false, path: hostPath, reason: missing ? 'missing' : 'error', error: missing ? 'not found' : err.message };
      this.files.push({ path: hostPath, role, status: missing ? 'missing' : 'error', ...(missing ? {} : { error: err.message }) });
    }
    this.cache.set(hostPath, out);
    return out;
  }

  async exists(hostPath: string): Promise<boolean> {
    try { await lstat(this.toLocal(await this.realHostPath(hostPath))); return true; } catch { return false; }
  }

  /** Directory entries (names, sorted bytewise as Go and systemd sort them); [] when absent. */
  async list(hostDir: string): Promise<string[]> {
    try {
      const real = await this.realHostPath(hostDir);
      const names = await readdir(this.toLocal(real));
      return names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    } catch { return []; }
  }

  /** Go filepath.Glob semantics for `*`, `?` and `[...]` in any path component; sorted per directory. */
  async glob(pattern: string): Promise<string[]> {
    const parts = path.posix.normalize(pattern).split('/').filter(Boolean);
    let bases = ['/'];
    for (const part of parts) {
      const next: string[] = [];
      if (!/[*?[]/.test(part)) {
        for (const b of bases) next.push(path.posix.join(b, part));
      } else {
        const re = globToRegExp(part);
        for (const b of bases) for (const name of await this.list(b)) if (re.test(name)) next.push(path.posix.join(b, name));
      }
      bases = next;
    }
    const out: string[] = [];
    for (const b of bases) if (await this.exists(b)) out.push(b);
    return out;
  }
}

export function globToRegExp(part: string): RegExp {
  let re = '^';
  for (let i = 0; i < part.length; i++) {
    const c = part[i] as string;
    if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else if (c === '[') {
      const end = part.indexOf(']', i + 1);
      if (end < 0) { re += '\\['; continue; }
      let cls = part.slice(i + 1, end);
      if (cls.startsWith('^')) cls = '^' + cls.slice(1);
      re += `[${cls.replace(/\\/g, '\\\\')}]`;
      i = end;
    } else re += c.replace(/[.+^${}()|\\]/g, '\\$&');
  }
  return new RegExp(re + '$');
}
