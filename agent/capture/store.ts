/**
 * Where stall captures live: one JSON file per capture in a directory the agent owns
 * (default /var/lib/pullwatch/captures), named <time>-<pull id>.json, oldest pruned beyond `keep`.
 * `pullwatch bundle` copies them into pullwatch/captures/.
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';

export const DEFAULT_CAPTURES_DIR = '/var/lib/pullwatch/captures';

export interface CaptureFile { name: string; path: string; bytes: number; modifiedAt: string }

function safeName(s: string): string {
  return s.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 120);
}

/** Writes the capture atomically (tmp + rename); returns the file path. Keeps the newest `keep`. */
export async function saveCapture(dir: string, capture: { pullId: string; capturedAt: string }, keep = 100): Promise<string> {
  await fsp.mkdir(dir, { recursive: true, mode: 0o700 });
  const name = `${capture.capturedAt.replace(/[:.]/g, '-')}-${safeName(capture.pullId)}.json`;
  const path = join(dir, name);
  const tmp = `${path}.tmp-${process.pid}`;
  await fsp.writeFile(tmp, JSON.stringify(capture, null, 2) + '\n', { mode: 0o600 });
  await fsp.rename(tmp, path);
  const all = await listCaptures(dir);
  for (const old of all.slice(0, Math.max(0, all.length - keep))) await fsp.rm(old.path, { force: true });
  return path;
}

/** Saved captures, oldest first. A missing directory is an empty list. */
export async function listCaptures(dir: string): Promise<CaptureFile[]> {
  let names: string[];
  try { names = await fsp.readdir(dir); } catch { return []; }
  const out: CaptureFile[] = [];
  for (const name of names) {
    if (!name.endsWith('.json')) continue;
    const path = join(dir, name);
    try {
      const st = await fsp.lstat(path);
      if (!st.isFile()) continue;
      out.push({ name, path, bytes: st.size, modifiedAt: st.mtime.toISOString() });
    } catch { /* vanished */ }
  }
  return out.sort((a, b) => a.name.localeCompare(b.name));
}
