/** Builds containerd content-store layouts on disk, the way content/local/store.go writes them. */
import { createHash } from 'node:crypto';
import { mkdirSync, renameSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const CONTENT = 'io.containerd.content.v1.content';

export function sha256(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Go time.MarshalText style: RFC 3339 with nanoseconds, trailing zeros trimmed. */
export function goTime(ms: number): string {
  const iso = new Date(Math.floor(ms)).toISOString(); // 2024-01-02T03:04:05.123Z
  const nanos = String(Math.round((ms - Math.floor(ms / 1000) * 1000) * 1e6)).padStart(9, '0').replace(/0+$/, '');
  return `${iso.slice(0, 19)}${nanos ? `.${nanos}` : ''}Z`;
}

export interface IngestSpec {
  ref: string;
  total?: number;
  startedAt?: number;
  /** Bytes already in `data` (omit for no data file). */
  bytes?: number;
}

export class ContentStore {
  readonly content: string;
  readonly ingest: string;
  readonly blobs: string;
  constructor(readonly root: string) {
    this.content = join(root, CONTENT);
    this.ingest = join(this.content, 'ingest');
    this.blobs = join(this.content, 'blobs', 'sha256');
  }

  init(): this {
    mkdirSync(this.ingest, { recursive: true });
    mkdirSync(this.blobs, { recursive: true });
    return this;
  }

  dirOf(ref: string): string {
    return join(this.ingest, sha256(ref));
  }

  addIngest(spec: IngestSpec): string {
    const dir = this.dirOf(spec.ref);
    mkdirSync(dir, { recursive: true });
    const started = spec.startedAt ?? Date.now();
    writeFileSync(join(dir, 'ref'), spec.ref);
    writeFileSync(join(dir, 'startedat'), goTime(started));
    writeFileSync(join(dir, 'updatedat'), goTime(started));
    if (spec.total !== undefined && spec.total > 0) writeFileSync(join(dir, 'total'), String(spec.total));
    if (spec.bytes !== undefined) writeFileSync(join(dir, 'data'), Buffer.alloc(spec.bytes, 1));
    return dir;
  }

  /** Sets the data file's mtime (seconds, fractional allowed). */
  touchData(ref: string, ms: number): void {
    utimesSync(join(this.dirOf(ref), 'data'), ms / 1000, ms / 1000);
  }

  /** Commit as writer.go does: rename data → blobs/sha256/<hex>, then remove the ingest dir. */
  commit(ref: string, hex: string): void {
    const dir = this.dirOf(ref);
    renameSync(join(dir, 'data'), join(this.blobs, hex));
    rmSync(dir, { recursive: true, force: true });
  }

  abort(ref: string): void {
    rmSync(this.dirOf(ref), { recursive: true, force: true });
  }

  /** Writes a committed blob; returns its digest. */
  addBlob(content: string | Buffer, mtimeMs?: number): string {
    const hex = sha256(content);
    const p = join(this.blobs, hex);
    writeFileSync(p, content);
    if (mtimeMs !== undefined) utimesSync(p, mtimeMs / 1000, mtimeMs / 1000);
    return `sha256:${hex}`;
  }
}

export function ociManifest(config: string, layers: string[]): string {
  return JSON.stringify({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: config, size: 100 },
    layers: layers.map((d) => ({ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: d, size: 1000 })),
  });
}

export function fakeDigest(seed: string): string {
  return `sha256:${sha256(seed)}`;
}
