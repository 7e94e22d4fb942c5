import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ManifestIndex, manifestChildren, pickManifest } from '../../../agent/sources/containerd/manifest-index.js';
import { tempDir } from './helpers.js';
import { ContentStore, fakeDigest, ociManifest } from './layout.js';

const cleanups: Array<() => void> = [];
afterEach(() => { for (const c of cleanups.splice(0)) c(); });

function store(): ContentStore {
  const t = tempDir('pw-mi-');
  cleanups.push(t.cleanup);
  return new ContentStore(join(t.path, 'root')).init();
}

describe('manifestChildren', () => {
  const cfg = fakeDigest('c');
  const l1 = fakeDigest('1');
  it('lists config and layers of OCI and Docker schema 2 manifests, fsLayers of schema 1', () => {
    expect(manifestChildren(ociManifest(cfg, [l1]))).toEqual([cfg, l1]);
    expect(manifestChildren(JSON.stringify({
      schemaVersion: 2, mediaType: 'application/vnd.docker.distribution.manifest.v2+json',
      config: { mediaType: 'application/vnd.docker.container.image.v1+json', size: 1, digest: cfg },
      layers: [{ mediaType: 'application/vnd.docker.image.rootfs.diff.tar.gzip', size: 2, digest: l1 }],
    }))).toEqual([cfg, l1]);
    expect(manifestChildren(JSON.stringify({ schemaVersion: 1, fsLayers: [{ blobSum: l1 }] }))).toEqual([l1]);
  });
  it('ignores indexes, configs and junk', () => {
    expect(manifestChildren(JSON.stringify({ schemaVersion: 2, manifests: [{ digest: l1, size: 1, mediaType: 'x' }] }))).toBeUndefined();
    expect(manifestChildren(JSON.stringify({ architecture: 'amd64', rootfs: { type: 'layers', diff_ids: [l1] } }))).toBeUndefined();
    expect(manifestChildren('{"layers": [{"digest": "sha256:nothex"}]}')).toBeUndefined();
    expect(manifestChildren('{not json')).toBeUndefined();
    expect(manifestChildren('\u0000\u0001')).toBeUndefined();
  });
});

describe('ManifestIndex', () => {
  it('finds the manifest listing a digest, examines each blob once, lists the dir only when it changed', async () => {
    const s = store();
    const idx = new ManifestIndex({ blobsDir: s.blobs, rescanMs: 0 });
    for (let i = 0; i < 30; i++) s.addBlob(Buffer.concat([Buffer.from([0x1f, 0x8b]), Buffer.from(`layer ${i}`)]));
    const l1 = fakeDigest('l1');
    const m1 = s.addBlob(ociManifest(fakeDigest('c1'), [l1]), Date.now() - 100_000);
    await idx.refresh([l1], Date.now());
    expect(idx.lookup(l1).map((m) => m.digest)).toEqual([m1]);
    const examined = idx.stats.blobsExamined;
    expect(examined).toBeLessThanOrEqual(31);
    // A digest no manifest lists: one full pass, then nothing more while the dir is unchanged.
    const orphan = fakeDigest('orphan');
    await idx.refresh([orphan], Date.now());
    expect(idx.stats.blobsExamined).toBe(31);
    const listings = idx.stats.listings;
    await idx.refresh([orphan], Date.now());
    await idx.refresh([orphan], Date.now());
    expect(idx.stats.listings).toBe(listings);
    expect(idx.stats.blobsExamined).toBe(31);
    // A new manifest appears: only it is examined.
    const l2 = fakeDigest('l2');
    const m2 = s.addBlob(ociManifest(fakeDigest('c2'), [l2, l1]));
    await idx.refresh([l2], Date.now());
    expect(idx.lookup(l2).map((m) => m.digest)).toEqual([m2]);
    expect(idx.stats.blobsExamined).toBe(32);
    // l1 is now listed by two manifests, newest first; pickManifest prefers the one before the ingest started.
    expect(idx.lookup(l1).map((m) => m.digest)).toEqual([m2, m1]);
    expect(pickManifest(idx.lookup(l1), Date.now() - 50_000)?.digest).toBe(m1);
    expect(pickManifest(idx.lookup(l1), undefined)?.digest).toBe(m2);
  });

  it('throttles re-listing for digests already searched for', async () => {
    const s = store();
    const idx = new ManifestIndex({ blobsDir: s.blobs, rescanMs: 60_000 });
    const orphan = fakeDigest('o');
    const t0 = Date.now();
    await idx.refresh([orphan], t0);
    s.addBlob('{}');
    await idx.refresh([orphan], t0 + 1000);
    expect(idx.stats.listings).toBe(1);
    await idx.refresh([orphan], t0 + 61_000);
    expect(idx.stats.listings).toBe(2);
  });

  it('survives a missing blob dir, blobs vanishing (GC) and oversized or unreadable blobs', async () => {
    const s = store();
    const errors: string[] = [];
    const idx = new ManifestIndex({ blobsDir: join(s.blobs, 'nope'), onError: (c) => errors.push(c) });
    await idx.refresh([fakeDigest('x')], Date.now());
    expect(errors).toEqual([]);
    const idx2 = new ManifestIndex({ blobsDir: s.blobs, rescanMs: 0, onError: (c) => errors.push(c) });
    const gone = s.addBlob(ociManifest(fakeDigest('c'), [fakeDigest('x')]));
    s.addBlob(Buffer.alloc(5 * 1024 * 1024, 0x7b)); // "{{{{…" but larger than any manifest
    await idx2.addManifest(gone);
    rmSync(join(s.blobs, gone.slice(7)));
    await idx2.addManifest(fakeDigest('never-there'));
    await idx2.refresh([fakeDigest('y')], Date.now());
    expect(idx2.lookup(fakeDigest('x')).map((m) => m.digest)).toEqual([gone]);
    expect(errors).toEqual([]);
  });
});
