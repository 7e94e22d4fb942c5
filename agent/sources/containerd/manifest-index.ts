/**
 * Which image manifest lists a given layer/config digest, learned from the committed blobs in
 * `<root>/io.containerd.content.v1.content/blobs/sha256/`.
 *
 * containerd fetches and commits a manifest before it starts the ingests of the layers it lists
 * (images.Dispatch runs children after their parent's handlers), so when a layer ingest shows up,
 * its manifest is already a blob. The manifest is usually fetched between two polls, so the blob
 * directory is the reliable place to find it.
 *
 * Cost model: a blob file is looked at (stat, a 64-byte peek, and for JSON a parse) at most once
 * per process; the directory is listed again only when its mtime changed, and at most once per
 * `rescanMs` unless a digest nobody has searched for yet is wanted. Blobs are examined newest
 * first, and a scan stops as soon as every wanted digest is found.
 */
import { open, readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';

/** containerd refuses manifests larger than this (images.ManifestLimit-ish, 4 MiB). */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;

export interface ManifestEntry {
  digest: string;
  mtimeMs: number;
  /** Config and layer digests the manifest lists. */
  children: string[];
}

const Descriptor = z.object({ digest: z.string().regex(/^sha256:[a-f0-9]{64}$/) });
const ImageManifest = z.object({
  config: Descriptor.optional(),
  layers: z.array(Descriptor),
});
const Schema1Manifest = z.object({ fsLayers: z.array(z.object({ blobSum: z.string().regex(/^sha256:[a-f0-9]{64}$/) })) });

/**
 * OCI / Docker schema 2 image manifest → [config, ...layers]; schema 1 → fsLayers; anything else
 * (index, config, attestation, junk) → undefined. Pure.
 */
export function manifestChildren(text: string): string[] | undefined {
  let json: unknown;
  try { json = JSON.parse(text); } catch { return undefined; }
  const m = ImageManifest.safeParse(json);
  if (m.success) {
    const out = m.data.layers.map((l) => l.digest);
    if (m.data.config) out.unshift(m.data.config.digest);
    return out;
  }
  const s1 = Schema1Manifest.safeParse(json);
  if (s1.success) return s1.data.fsLayers.map((l) => l.blobSum);
  return undefined;
}

interface Pending { name: string; mtimeMs: number; size: number }

export interface ManifestIndexOptions {
  /** `<root>/io.containerd.content.v1.content/blobs/sha256`. */
  blobsDir: string;
  /** Minimum time between two listings of the blob dir for digests already searched for. */
  rescanMs?: number;
  onError?: (cause: string, err: unknown) => void;
}

export class ManifestIndex {
  private readonly checked = new Set<string>();
  private pending: Pending[] = [];
  private readonly byChild = new Map<string, ManifestEntry[]>();
  private readonly manifests = new Map<string, ManifestEntry>();
  private readonly searched = new Set<string>();
  private dirMtimeMs = -1;
  private lastListAt = -Infinity;
  private readonly rescanMs: number;
  /** Counters for tests and benches. */
  readonly stats = { listings: 0, blobsExamined: 0, manifestsParsed: 0 };

  constructor(private readonly opts: ManifestIndexOptions) {
    this.rescanMs = opts.rescanMs ?? 5000;
  }

  /** Manifests known to list this digest, newest first. */
  lookup(digest: string): ManifestEntry[] {
    return this.byChild.get(digest) ?? [];
  }

  get size(): number { return this.manifests.size; }

  /** Record a manifest known by digest (e.g. a `manifest-` ingest that was committed). */
  async addManifest(digest: string): Promise<void> {
    const hex = /^sha256:([a-f0-9]{64})$/.exec(digest)?.[1];
    if (!hex || this.checked.has(hex)) return;
    try {
      const st = await stat(join(this.opts.blobsDir, hex));
      await this.examine({ name: hex, mtimeMs: st.mtimeMs, size: st.size });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.opts.onError?.('blob-unreadable', err);
    }
  }

  /** Look through not yet examined blobs (newest first) until every wanted digest has a manifest. */
  async refresh(wanted: Iterable<string>, now: number): Promise<void> {
    const missing = [...wanted].filter((d) => !this.byChild.has(d));
    if (missing.length === 0) return;
    const fresh = missing.some((d) => !this.searched.has(d));
    for (const d of missing) this.searched.add(d);
    if (fresh || now - this.lastListAt >= this.rescanMs) await this.list(now);
    const want = new Set(missing);
    while (this.pending.length > 0 && [...want].some((d) => !this.byChild.has(d))) {
      const next = this.pending.shift() as Pending;
      await this.examine(next);
    }
  }

  private async list(now: number): Promise<void> {
    let dirMtime: number;
    try {
      dirMtime = (await stat(this.opts.blobsDir)).mtimeMs;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.opts.onError?.('blobs-dir-unreadable', err);
      return;
    }
    this.lastListAt = now;
    if (dirMtime === this.dirMtimeMs) return;
    let names: string[];
    try {
      names = await readdir(this.opts.blobsDir);
    } catch (err) {
      this.opts.onError?.('blobs-dir-unreadable', err);
      return;
    }
    this.stats.listings++;
    this.dirMtimeMs = dirMtime;
    const queued = new Set(this.pending.map((p) => p.name));
    const fresh = names.filter((n) => !this.checked.has(n) && !queued.has(n) && /^[a-f0-9]{64}$/.test(n));
    const stats = await Promise.all(fresh.map(async (name) => {
      try {
        const st = await stat(join(this.opts.blobsDir, name));
        return st.isFile() ? { name, mtimeMs: st.mtimeMs, size: st.size } : undefined;
      } catch { return undefined; /* vanished (GC) between readdir and stat */ }
    }));
    for (const s of stats) if (s) this.pending.push(s);
    this.pending.sort((a, b) => b.mtimeMs - a.mtimeMs);
  }

  private async examine(p: Pending): Promise<void> {
    this.checked.add(p.name);
    this.stats.blobsExamined++;
    if (p.size < 2 || p.size > MAX_MANIFEST_BYTES) return;
    const path = join(this.opts.blobsDir, p.name);
    try {
      const fh = await open(path, 'r');
      try {
        const head = Buffer.alloc(64);
        const { bytesRead } = await fh.read(head, 0, head.length, 0);
        if (!head.subarray(0, bytesRead).toString('latin1').trimStart().startsWith('{')) return;
      } finally {
        await fh.close();
      }
      const text = await readFile(path, 'utf8');
      this.stats.manifestsParsed++;
      const children = manifestChildren(text);
      if (!children) return;
      const entry: ManifestEntry = { digest: `sha256:${p.name}`, mtimeMs: p.mtimeMs, children };
      this.manifests.set(entry.digest, entry);
      for (const c of children) {
        const list = this.byChild.get(c) ?? [];
        list.push(entry);
        list.sort((a, b) => b.mtimeMs - a.mtimeMs);
        this.byChild.set(c, list);
      }
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT') this.opts.onError?.('blob-unreadable', err);
    }
  }
}

/**
 * The manifest a layer ingest most likely belongs to: the newest one committed before the ingest
 * started (a shared layer is listed by several; the pull that started the ingest fetched its
 * manifest first), else the newest.
 */
export function pickManifest(candidates: ManifestEntry[], startedAt: number | undefined): ManifestEntry | undefined {
  if (startedAt !== undefined) {
    const before = candidates.find((c) => c.mtimeMs <= startedAt + 2000);
    if (before) return before;
  }
  return candidates[0];
}
