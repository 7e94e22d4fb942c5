import { appendFileSync, cpSync, mkdirSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { distributionSources } from '../../../agent/sources/containerd/ingest-files.js';
import { ContainerdIngestSource } from '../../../agent/sources/containerd/ingest-source.js';
import { assertSane, tempDir, testCtx } from './helpers.js';
import { ContentStore, fakeDigest, ociManifest, sha256 } from './layout.js';

const FIXTURE = join(import.meta.dirname, '../../fixtures/sources/containerd-1.6.20/ingest');

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function setup(opts: { namespaces?: string[]; init?: boolean; now?: () => number } = {}) {
  const tmp = tempDir('pw-ingest-');
  const store = new ContentStore(join(tmp.path, 'root'));
  if (opts.init !== false) store.init();
  const t = testCtx(opts.now);
  const source = new ContainerdIngestSource({ root: store.root, pollMs: 60_000, namespaces: opts.namespaces });
  cleanups.push(tmp.cleanup, () => source.stop());
  return { store, t, source };
}

describe('ContainerdIngestSource on the recorded containerd 1.6 ingest dir', () => {
  it('reports ref, namespace, kind, digest, total, startedAt, offset and lastWriteAt', async () => {
    const { store, t, source } = setup();
    cpSync(FIXTURE, store.ingest, { recursive: true });
    const name = readdirSync(FIXTURE)[0] as string;
    appendFileSync(join(store.ingest, name, 'data'), Buffer.alloc(12345));
    await source.start(t.ctx);
    const obs = t.lastIngests();
    expect(obs).toMatchObject({ kind: 'ingests', runtime: 'containerd', source: 'containerd-ingest', closed: [] });
    expect(obs.present).toHaveLength(1);
    const s = obs.present[0]!;
    expect(s).toMatchObject({
      key: name,
      ref: 'k8s.io/1/layer-sha256:d8f505d8f9b89b4026731ad287131adadbb433d2dab6be6c218b4f91210f6acc',
      namespace: 'k8s.io', blobKind: 'layer',
      digest: 'sha256:d8f505d8f9b89b4026731ad287131adadbb433d2dab6be6c218b4f91210f6acc',
      offset: 12345, total: 2000000,
    });
    expect(s.startedAt).toBeCloseTo(Date.parse('2026-11-21T09:55:59.039Z') + 0.105131, 3);
    assertSane(s);
    // The dir name is the sha256 of the ref text, as containerd names it.
    expect(sha256(s.ref)).toBe(name);
  });
});

describe('ContainerdIngestSource polling', () => {
  it('follows growth, keeps lastWriteAt = max(updatedat, data mtime), reports closes with committed', async () => {
    const { store, t, source } = setup();
    const layer = fakeDigest('layer-a');
    const other = fakeDigest('layer-b');
    const refA = `k8s.io/1/layer-${layer}`;
    const refB = `k8s.io/2/layer-${other}`;
    const started = Date.now() - 10_000;
    store.addIngest({ ref: refA, total: 5000, startedAt: started, bytes: 100 });
    store.addIngest({ ref: refB, total: 5000, startedAt: started, bytes: 10 });
    // data mtime older than updatedat → updatedat wins; newer → mtime wins (sub-ms precision kept).
    store.touchData(refA, started - 5000);
    store.touchData(refB, started + 1234.5);
    await source.start(t.ctx);
    let byKey = new Map(t.lastIngests().present.map((s) => [s.ref, s]));
    expect(byKey.get(refA)?.lastWriteAt).toBeCloseTo(started, 3);
    expect(byKey.get(refB)?.lastWriteAt).toBeCloseTo(started + 1234.5, 0);

    appendFileSync(join(store.dirOf(refA), 'data'), Buffer.alloc(900));
    source.pollOnce();
    byKey = new Map(t.lastIngests().present.map((s) => [s.ref, s]));
    expect(byKey.get(refA)?.offset).toBe(1000);
    expect(byKey.get(refA)!.lastWriteAt!).toBeGreaterThan(started + 5000);

    store.commit(refA, layer.slice(7));
    store.abort(refB);
    source.pollOnce();
    const last = t.lastIngests();
    expect(last.present).toEqual([]);
    expect(last.closed).toEqual(expect.arrayContaining([
      { key: sha256(refA), digest: layer, committed: true },
      { key: sha256(refB), digest: other, committed: false },
    ]));
    expect(last.closed).toHaveLength(2);
    source.pollOnce();
    expect(t.lastIngests().closed).toEqual([]);
  });

  it('reads ref/startedat once per dir and the rest only when the dir changes (stat-only steady state)', async () => {
    let now = Date.now();
    const { store, t, source } = setup({ now: () => now });
    for (let i = 0; i < 20; i++) store.addIngest({ ref: `k8s.io/${i}/layer-${fakeDigest(`l${i}`)}`, total: 100_000, bytes: i });
    await source.start(t.ctx);
    expect(source.stats.smallFileReads).toBe(20 * 4);
    // Brand-new dirs are re-read while young (their files may still be appearing); then never.
    now += 600_000;
    source.pollOnce();
    const after1 = source.stats.smallFileReads;
    expect(after1).toBe(20 * 4 + 20 * 1);
    for (let i = 0; i < 5; i++) {
      for (const d of readdirSync(store.ingest)) appendFileSync(join(store.ingest, d, 'data'), Buffer.alloc(10));
      source.pollOnce();
    }
    expect(source.stats.smallFileReads).toBe(after1);
    expect(t.lastIngests().present.map((s) => s.offset).sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i + 50));
  });

  it('covers every namespace, or only the configured ones', async () => {
    const a = setup();
    const b = setup({ namespaces: ['moby'] });
    for (const { store } of [a, b]) {
      store.addIngest({ ref: `k8s.io/1/layer-${fakeDigest('x')}`, bytes: 1 });
      store.addIngest({ ref: `moby/1/layer-${fakeDigest('y')}`, bytes: 1 });
      store.addIngest({ ref: `default/1/manifest-${fakeDigest('z')}`, bytes: 1 });
    }
    await a.source.start(a.t.ctx);
    await b.source.start(b.t.ctx);
    expect(a.t.lastIngests().present.map((s) => s.namespace).sort()).toEqual(['default', 'k8s.io', 'moby']);
    expect(b.t.lastIngests().present.map((s) => s.namespace)).toEqual(['moby']);
  });

  it('attributes a layer to the manifest blob that lists it (filesystem only, no socket)', async () => {
    const { store, t, source } = setup();
    const layer = fakeDigest('layer-1');
    const config = fakeDigest('config-1');
    const layerOther = fakeDigest('layer-2');
    // Unrelated blobs (a gzip-looking layer, a config JSON) and two manifests.
    store.addBlob(Buffer.from([0x1f, 0x8b, 8, 0, 1, 2, 3]));
    store.addBlob(JSON.stringify({ architecture: 'amd64', rootfs: { diff_ids: [] } }));
    const m1 = store.addBlob(ociManifest(config, [fakeDigest('base'), layer]));
    const m2 = store.addBlob(ociManifest(fakeDigest('config-2'), [layerOther]));
    store.addIngest({ ref: `k8s.io/7/layer-${layer}`, total: 1000, bytes: 10 });
    store.addIngest({ ref: `k8s.io/8/config-${config}`, total: 100, bytes: 1 });
    store.addIngest({ ref: `k8s.io/9/layer-${layerOther}`, total: 1000, bytes: 10 });
    await source.start(t.ctx);
    await source.settle();
    source.pollOnce();
    const byDigest = new Map(t.lastIngests().present.map((s) => [s.digest, s]));
    expect(byDigest.get(layer)?.manifestDigest).toBe(m1);
    expect(byDigest.get(config)?.manifestDigest).toBe(m1);
    expect(byDigest.get(layerOther)?.manifestDigest).toBe(m2);
    expect(byDigest.get(layer)?.registry).toBeUndefined();
  });
});

describe('ContainerdIngestSource on bad input', () => {
  it('never emits NaN or garbage, reports each cause, keeps going', async () => {
    let now = Date.now();
    const { store, t, source } = setup({ now: () => now });
    const good = `k8s.io/1/layer-${fakeDigest('good')}`;
    store.addIngest({ ref: good, total: 1000, bytes: 10 });
    // Garbage ref (binary junk).
    const junkDir = join(store.ingest, 'a'.repeat(64));
    mkdirSync(junkDir);
    writeFileSync(join(junkDir, 'ref'), Buffer.from([0, 1, 2, 0xff, 0xfe]));
    writeFileSync(join(junkDir, 'data'), 'xx');
    // Missing ref.
    const noRef = join(store.ingest, 'b'.repeat(64));
    mkdirSync(noRef);
    writeFileSync(join(noRef, 'data'), 'xx');
    // `ref` is a directory (EISDIR: root in tests ignores chmod 000).
    const refIsDir = join(store.ingest, 'c'.repeat(64));
    mkdirSync(join(refIsDir, 'ref'), { recursive: true });
    // Garbage total / startedat / updatedat.
    const badTotal = `k8s.io/2/layer-${fakeDigest('bad-total')}`;
    store.addIngest({ ref: badTotal, bytes: 50 });
    writeFileSync(join(store.dirOf(badTotal), 'total'), 'NaN-not-a-number');
    writeFileSync(join(store.dirOf(badTotal), 'startedat'), 'yesterday');
    writeFileSync(join(store.dirOf(badTotal), 'updatedat'), '\u0000garbage');
    // Missing startedat and total (total is legitimately optional).
    const noStarted = `k8s.io/3/layer-${fakeDigest('no-startedat')}`;
    store.addIngest({ ref: noStarted, bytes: 5 });
    rmSync(join(store.dirOf(noStarted), 'startedat'));
    // Data file missing / data is a directory.
    const noData = `k8s.io/4/layer-${fakeDigest('no-data')}`;
    store.addIngest({ ref: noData, total: 10 });
    const dataDir = `k8s.io/5/layer-${fakeDigest('data-dir')}`;
    store.addIngest({ ref: dataDir, total: 10 });
    mkdirSync(join(store.dirOf(dataDir), 'data'));
    // More bytes than total (corrupt total).
    const over = `k8s.io/6/layer-${fakeDigest('over')}`;
    store.addIngest({ ref: over, total: 10, bytes: 20 });
    // Stray files and *.tmp files next to dirs / inside dirs.
    writeFileSync(join(store.ingest, 'stray-file'), 'x');
    writeFileSync(join(store.dirOf(good), 'updatedat.tmp'), '');

    await source.start(t.ctx);
    now += 600_000; // past the creation grace: missing files are now problems
    source.pollOnce();
    source.pollOnce();

    const obs = t.lastIngests();
    for (const s of obs.present) assertSane(s);
    const byRef = new Map(obs.present.map((s) => [s.ref, s]));
    expect([...byRef.keys()].sort()).toEqual([good, badTotal, noStarted, over].sort());
    expect(byRef.get(good)).toMatchObject({ offset: 10, total: 1000 });
    expect(byRef.get(badTotal)?.total).toBeUndefined();
    expect(byRef.get(badTotal)?.startedAt).toBeUndefined();
    expect(byRef.get(badTotal)?.offset).toBe(50);
    expect(byRef.get(noStarted)?.startedAt).toBeUndefined();
    expect(byRef.get(over)).toMatchObject({ offset: 20 });
    expect(byRef.get(over)?.total).toBeUndefined();

    const causes = t.causes();
    expect(causes).toMatchObject({
      'ingest-ref-invalid': 1,
      'ingest-ref-missing': 1,
      'ingest-ref-unreadable': 1,
      'ingest-total-invalid': 1,
      'ingest-startedat-invalid': 1,
      'ingest-updatedat-invalid': 1,
      'ingest-startedat-missing': 1,
      'ingest-data-missing': 1,
      'ingest-data-not-a-file': 1,
      'ingest-offset-exceeds-total': 1,
    });
    expect(causes['poll-failed']).toBeUndefined();
  });

  it('does not count the normal creation race (files appear one by one) as a problem', async () => {
    const { store, t, source } = setup();
    const ref = `k8s.io/1/layer-${fakeDigest('new')}`;
    const dir = store.dirOf(ref);
    mkdirSync(dir);
    await source.start(t.ctx);
    expect(t.lastIngests().present).toEqual([]);
    writeFileSync(join(dir, 'ref'), ref);
    source.pollOnce();
    writeFileSync(join(dir, 'startedat'), '2026-01-01T00:00:00.5Z');
    writeFileSync(join(dir, 'updatedat'), '2026-01-01T00:00:00.5Z');
    writeFileSync(join(dir, 'total'), '77');
    source.pollOnce();
    expect(t.lastIngests().present).toEqual([]);
    writeFileSync(join(dir, 'data'), 'abc');
    source.pollOnce();
    expect(t.lastIngests().present).toEqual([expect.objectContaining({ ref, offset: 3, total: 77, startedAt: Date.parse('2026-01-01T00:00:00.500Z') })]);
    expect(t.health.snapshot()).toEqual([]);
  });

  it('with no containerd root: warns once, emits nothing; picks the root up when it appears', async () => {
    const { store, t, source } = setup({ init: false });
    await source.start(t.ctx);
    source.pollOnce();
    source.pollOnce();
    expect(t.ingests()).toEqual([]);
    expect(t.health.snapshot()).toEqual([expect.objectContaining({ cause: 'root-missing', count: 3 })]);
    // Content store without ingest/ yet (fresh containerd): no ingests, not an error.
    mkdirSync(store.blobs, { recursive: true });
    source.pollOnce();
    expect(t.lastIngests().present).toEqual([]);
    mkdirSync(store.ingest);
    store.addIngest({ ref: `k8s.io/1/layer-${fakeDigest('late')}`, total: 9, bytes: 3 });
    source.pollOnce();
    expect(t.lastIngests().present).toEqual([expect.objectContaining({ offset: 3, total: 9 })]);
    expect(t.health.snapshot()).toHaveLength(1);
  });

  it('keeps the last numbers while a dir is mid-commit (data renamed, dir not yet removed)', async () => {
    const { store, t, source } = setup();
    const layer = fakeDigest('mid');
    const ref = `k8s.io/1/layer-${layer}`;
    store.addIngest({ ref, total: 100, bytes: 100 });
    await source.start(t.ctx);
    const before = t.lastIngests().present[0];
    const { renameSync } = await import('node:fs');
    renameSync(join(store.dirOf(ref), 'data'), join(store.blobs, layer.slice(7)));
    source.pollOnce();
    expect(t.lastIngests().present).toEqual([before]);
    rmSync(store.dirOf(ref), { recursive: true });
    source.pollOnce();
    expect(t.lastIngests().closed).toEqual([{ key: sha256(ref), digest: layer, committed: true }]);
    expect(t.health.snapshot()).toEqual([]);
  });
});

describe('ContainerdIngestSource with an unreachable containerd socket', () => {
  it('reports it once and keeps reporting ingests from the filesystem', async () => {
    const tmp = tempDir('pw-nosock-');
    const store = new ContentStore(join(tmp.path, 'root')).init();
    const t = testCtx();
    const source = new ContainerdIngestSource({ root: store.root, pollMs: 60_000, socket: join(tmp.path, 'missing.sock'), grpcDeadlineMs: 500 });
    cleanups.push(tmp.cleanup, () => source.stop());
    const layer = fakeDigest('l');
    const m = store.addBlob(ociManifest(fakeDigest('c'), [layer]));
    store.addIngest({ ref: `k8s.io/1/layer-${layer}`, total: 10, bytes: 4 });
    await source.start(t.ctx);
    for (let i = 0; i < 3; i++) {
      await source.settle();
      source.pollOnce();
    }
    await source.settle();
    expect(t.lastIngests().present).toEqual([expect.objectContaining({ digest: layer, offset: 4, total: 10, manifestDigest: m })]);
    expect(t.lastIngests().present[0]?.registry).toBeUndefined();
    expect(t.health.snapshot()).toEqual([expect.objectContaining({ cause: 'containerd-socket-unreachable', count: 1 })]);
    expect(t.observations.filter((o) => o.kind === 'runtime')).toEqual([]);
  });
});

describe.each(['1.6.20', '1.7.24'])('ContainerdIngestSource on the recorded containerd %s CRI pull', (version) => {
  it('reports the held layer at its on-disk offset, attributed to the recorded manifest', async () => {
    const fixture = join(import.meta.dirname, `../../fixtures/sources/containerd-${version}-cri`);
    const { store, t, source } = setup({ init: false });
    cpSync(join(fixture, 'io.containerd.content.v1.content'), store.content, { recursive: true });
    const [dirName, size] = readFileSync(join(fixture, 'data-size.txt'), 'utf8').trim().split(' ') as [string, string];
    writeFileSync(join(store.ingest, dirName, 'data'), '');
    truncateSync(join(store.ingest, dirName, 'data'), Number(size));
    const manifestDigest = readFileSync(join(fixture, 'manifest-digest.txt'), 'utf8').trim();
    const ref = readFileSync(join(store.ingest, dirName, 'ref'), 'utf8');
    await source.start(t.ctx);
    await source.settle();
    source.pollOnce();
    const [s, ...rest] = t.lastIngests().present;
    expect(rest).toEqual([]);
    expect(s).toMatchObject({
      key: dirName, ref, namespace: 'k8s.io', blobKind: 'layer', digest: ref.slice('k8s.io/1/layer-'.length),
      offset: 1048576, total: Number(readFileSync(join(store.ingest, dirName, 'total'), 'utf8')), manifestDigest,
    });
    assertSane(s!);
    expect(t.health.snapshot()).toEqual([]);
    // The label containerd put on the manifest (ctr content ls), as the gRPC Info call returns it.
    const lsLine = readFileSync(join(fixture, 'ctr-content-ls.txt'), 'utf8').split('\n').find((l) => l.startsWith(manifestDigest));
    const labels = Object.fromEntries((lsLine?.split('\t').at(-1) ?? '').split(',').map((kv) => kv.split('=') as [string, string]));
    expect(distributionSources(labels)).toEqual([{ registry: '127.0.0.1', repositories: ['pullwatch/fixture'] }]);
  });
});
