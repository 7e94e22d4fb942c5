/**
 * containerd's active ingests as they are on disk:
 * <root>/io.containerd.content.v1.content/ingest/<hash>/{ref,total,startedat,updatedat,data}
 * (content/local/store.go). Read-only; never throws (per-ingest errors are recorded).
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';

export interface IngestOnDisk {
  dir: string;
  ref?: string;
  total?: number;
  startedAt?: string;
  updatedAt?: string;
  /** Size of `data`: bytes received so far. */
  offset?: number;
  /** mtime of `data` (ISO): the last write. */
  dataModifiedAt?: string;
  error?: string;
}

export function ingestDir(containerdRoot: string): string {
  return join(containerdRoot, 'io.containerd.content.v1.content', 'ingest');
}

async function readSmall(path: string): Promise<string | undefined> {
  try {
    const fh = await fsp.open(path, 'r');
    try {
      const buf = Buffer.alloc(4096);
      const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
      return buf.subarray(0, bytesRead).toString('utf8').trim();
    } finally { await fh.close(); }
  } catch { return undefined; }
}

/** All ingests under a containerd root (absolute path as this process sees it). */
export async function readIngests(containerdRoot: string, limit = 1000): Promise<{ dir: string; ingests: IngestOnDisk[]; error?: string }> {
  const dir = ingestDir(containerdRoot);
  let names: string[];
  try { names = await fsp.readdir(dir); } catch (e) { return { dir, ingests: [], error: (e as Error).message }; }
  const ingests: IngestOnDisk[] = [];
  for (const name of names.slice(0, limit)) {
    const d = join(dir, name);
    const rec: IngestOnDisk = { dir: name };
    try {
      const st = await fsp.lstat(d);
      if (!st.isDirectory()) continue;
      const ref = await readSmall(join(d, 'ref'));
      if (ref !== undefined) rec.ref = ref;
      const total = await readSmall(join(d, 'total'));
      if (total !== undefined && /^\d+$/.test(total)) rec.total = Number(total);
      const s = await readSmall(join(d, 'startedat'));
      if (s) rec.startedAt = s;
      const u = await readSmall(join(d, 'updatedat'));
      if (u) rec.updatedAt = u;
      try {
        const dst = await fsp.stat(join(d, 'data'));
        rec.offset = dst.size;
        rec.dataModifiedAt = dst.mtime.toISOString();
      } catch { /* not written yet */ }
    } catch (e) { rec.error = (e as Error).message; }
    ingests.push(rec);
  }
  return { dir, ingests };
}
