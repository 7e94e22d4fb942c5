/**
 * Images built inside the test: random (incompressible) layers of chosen sizes, written as an OCI
 * image layout directory, pushed to a registry with the Registry HTTP API v2 (or exported as an
 * OCI archive for `ctr images import` + `ctr images push`).
 */
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { once } from 'node:events';
import { createGzip } from 'node:zlib';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import tar from 'tar-stream';
import { trackDir, untrackDir } from './processes.js';

const execFileP = promisify(execFile);

export const MEDIA = {
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
  dockerLayerGzip: 'application/vnd.docker.image.rootfs.diff.tar.gzip',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
  ociLayerGzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  ociLayer: 'application/vnd.oci.image.layer.v1.tar',
} as const;

export interface Descriptor {
  mediaType: string;
  /** sha256:<hex> */
  digest: string;
  /** Size of the blob in bytes (the compressed size for gzip layers: what a pull transfers). */
  size: number;
}

export interface LayerInfo extends Descriptor {
  /** sha256 of the uncompressed tar. */
  diffId: string;
  /** Bytes of random payload inside the layer (what buildImage was asked for). */
  payloadSize: number;
}

export interface BuildImageOptions {
  /** Random payload size of each layer, in bytes (a layer's blob is slightly larger: tar + gzip framing). */
  layers: number[];
  /** Repository name (default `pullwatch/test-<random>`). */
  repo?: string;
  /** Tag (default `v1`). */
  tag?: string;
  /** Manifest flavour (default 'docker': schema2, pulled by every runtime). */
  format?: 'docker' | 'oci';
  /** Layer compression (default gzip; 'none' needs format 'oci'). */
  compression?: 'gzip' | 'none';
  /** Parent dir for the layout (default os.tmpdir()). */
  parentDir?: string;
}

export interface BuiltImage {
  readonly repo: string;
  readonly tag: string;
  /** OCI image layout directory holding every blob. */
  readonly layoutDir: string;
  readonly manifest: Descriptor & { readonly bytes: Buffer };
  readonly config: Descriptor & { readonly bytes: Buffer };
  readonly layers: readonly LayerInfo[];
  /** Path of a blob in the layout. */
  blobPath(digest: string): string;
  /** Deletes the layout directory. */
  remove(): Promise<void>;
}

export interface PushedImage {
  /** host/repo:tag as a pod spec would name it. */
  readonly ref: string;
  readonly host: string;
  readonly repo: string;
  readonly tag: string;
  readonly manifestDigest: string;
  readonly layers: readonly LayerInfo[];
  readonly config: Descriptor;
  readonly image: BuiltImage;
}

/** The OCI platform architecture of this machine. */
export function hostArchitecture(): string {
  const map: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64' };
  return map[process.arch] ?? process.arch;
}

function sha256Hex(b: Buffer | string): string {
  return createHash('sha256').update(b).digest('hex');
}

function hexOf(digest: string): string {
  const m = /^sha256:([0-9a-f]{64})$/.exec(digest);
  if (!m?.[1]) throw new Error(`not a sha256 digest: ${digest}`);
  return m[1];
}

async function writeLayer(blobsDir: string, index: number, size: number, gzip: boolean, mediaType: string): Promise<LayerInfo> {
  if (!Number.isInteger(size) || size < 0) throw new Error(`layer ${index}: size must be a non-negative integer, got ${size}`);
  const diffHash = createHash('sha256');
  const blobHash = createHash('sha256');
  let blobSize = 0;
  const tmpPath = join(blobsDir, `.layer-${index}-${randomBytes(4).toString('hex')}.tmp`);
  const diffTap = new Transform({
    transform(chunk: Buffer, _enc, cb) { diffHash.update(chunk); cb(null, chunk); },
  });
  const blobTap = new Transform({
    transform(chunk: Buffer, _enc, cb) { blobHash.update(chunk); blobSize += chunk.length; cb(null, chunk); },
  });
  const pack = tar.pack();
  const out = createWriteStream(tmpPath);
  const done = gzip
    ? pipeline(pack, diffTap, createGzip({ level: 1 }), blobTap, out)
    : pipeline(pack, diffTap, blobTap, out);
  const entry = pack.entry({ name: `pullwatch/layer-${index}.bin`, size, mode: 0o644, mtime: new Date(0) });
  const CHUNK = 1 << 20;
  for (let left = size; left > 0; left -= CHUNK) {
    if (!entry.write(randomBytes(Math.min(CHUNK, left)))) await once(entry, 'drain');
  }
  entry.end(() => undefined);
  pack.finalize();
  await done;
  const hex = blobHash.digest('hex');
  await rename(tmpPath, join(blobsDir, hex));
  return { mediaType, digest: `sha256:${hex}`, size: blobSize, diffId: `sha256:${diffHash.digest('hex')}`, payloadSize: size };
}

/** Builds an image with random layers of the given payload sizes into a fresh OCI layout dir. */
export async function buildImage(opts: BuildImageOptions): Promise<BuiltImage> {
  const format = opts.format ?? 'docker';
  const compression = opts.compression ?? 'gzip';
  if (format === 'docker' && compression === 'none') throw new Error("buildImage: uncompressed layers need format 'oci'");
  const repo = opts.repo ?? `pullwatch/test-${randomBytes(4).toString('hex')}`;
  const tag = opts.tag ?? 'v1';
  if (!/^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:\/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$/.test(repo)) throw new Error(`buildImage: invalid repository name ${repo}`);
  const layoutDir = await mkdtemp(join(opts.parentDir ?? tmpdir(), 'pw-image-'));
  trackDir(layoutDir);
  const blobsDir = join(layoutDir, 'blobs', 'sha256');
  await mkdir(blobsDir, { recursive: true });

  const layerMedia = format === 'docker' ? MEDIA.dockerLayerGzip : compression === 'gzip' ? MEDIA.ociLayerGzip : MEDIA.ociLayer;
  const layers: LayerInfo[] = [];
  for (const [i, size] of opts.layers.entries()) {
    layers.push(await writeLayer(blobsDir, i, size, compression === 'gzip', layerMedia));
  }

  const configJson = {
    created: '1970-01-01T00:00:00Z',
    architecture: hostArchitecture(),
    os: 'linux',
    config: {
      Env: ['PATH=/usr/bin:/bin'],
      Cmd: ['/pullwatch/layer-0.bin'],
      // Makes every built image distinct even with identical layer sizes.
      Labels: { 'pullwatch.test/nonce': randomBytes(8).toString('hex') },
    },
    rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffId) },
    history: layers.map((_, i) => ({ created: '1970-01-01T00:00:00Z', created_by: `pullwatch test layer ${i}` })),
  };
  const configBytes = Buffer.from(JSON.stringify(configJson));
  const config = { mediaType: format === 'docker' ? MEDIA.dockerConfig : MEDIA.ociConfig, digest: `sha256:${sha256Hex(configBytes)}`, size: configBytes.length, bytes: configBytes };
  await writeFile(join(blobsDir, hexOf(config.digest)), configBytes);

  const manifestJson = {
    schemaVersion: 2,
    mediaType: format === 'docker' ? MEDIA.dockerManifest : MEDIA.ociManifest,
    config: { mediaType: config.mediaType, digest: config.digest, size: config.size },
    layers: layers.map((l) => ({ mediaType: l.mediaType, digest: l.digest, size: l.size })),
  };
  const manifestBytes = Buffer.from(JSON.stringify(manifestJson));
  const manifest = { mediaType: manifestJson.mediaType, digest: `sha256:${sha256Hex(manifestBytes)}`, size: manifestBytes.length, bytes: manifestBytes };
  await writeFile(join(blobsDir, hexOf(manifest.digest)), manifestBytes);

  await writeFile(join(layoutDir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  await writeIndex(layoutDir, manifest, { 'org.opencontainers.image.ref.name': tag });

  return {
    repo,
    tag,
    layoutDir,
    manifest,
    config,
    layers,
    blobPath: (digest: string) => join(blobsDir, hexOf(digest)),
    remove: async () => {
      await rm(layoutDir, { recursive: true, force: true });
      untrackDir(layoutDir);
    },
  };
}

async function writeIndex(layoutDir: string, manifest: Descriptor, annotations: Record<string, string>): Promise<void> {
  const index = {
    schemaVersion: 2,
    mediaType: MEDIA.ociIndex,
    manifests: [{ mediaType: manifest.mediaType, digest: manifest.digest, size: manifest.size, annotations }],
  };
  await writeFile(join(layoutDir, 'index.json'), JSON.stringify(index));
}

function registryBase(registry: string | { url: string }): URL {
  const raw = typeof registry === 'string' ? registry : registry.url;
  return new URL(/^https?:\/\//.test(raw) ? raw : `http://${raw}`);
}

async function expectStatus(res: Response, ok: number[], what: string): Promise<void> {
  if (!ok.includes(res.status)) {
    const body = await res.text().catch(() => '');
    throw new Error(`${what}: HTTP ${res.status} ${body.slice(0, 500)}`);
  }
}

/**
 * Pushes every blob and the manifest with the Registry HTTP API v2 (monolithic uploads).
 * `registry` is a base URL (http://127.0.0.1:PORT), a host:port, or anything with `url`.
 */
export async function pushImage(
  image: BuiltImage,
  registry: string | { url: string },
  opts: { repo?: string; tag?: string } = {},
): Promise<PushedImage> {
  const base = registryBase(registry);
  const repo = opts.repo ?? image.repo;
  const tag = opts.tag ?? image.tag;
  for (const blob of [image.config, ...image.layers]) {
    const head = await fetch(new URL(`/v2/${repo}/blobs/${blob.digest}`, base), { method: 'HEAD' });
    if (head.status === 200) continue;
    const start = await fetch(new URL(`/v2/${repo}/blobs/uploads/`, base), { method: 'POST' });
    await expectStatus(start, [202], `start upload of ${blob.digest} to ${base.host}/${repo}`);
    const location = start.headers.get('location');
    if (!location) throw new Error(`registry ${base.host} gave no upload Location`);
    const put = new URL(location, base);
    put.searchParams.set('digest', blob.digest);
    const body = await readFile(image.blobPath(blob.digest));
    const res = await fetch(put, { method: 'PUT', body, headers: { 'content-type': 'application/octet-stream' } });
    await expectStatus(res, [201], `upload of ${blob.digest} to ${base.host}/${repo}`);
  }
  const res = await fetch(new URL(`/v2/${repo}/manifests/${tag}`, base), {
    method: 'PUT',
    body: image.manifest.bytes,
    headers: { 'content-type': image.manifest.mediaType },
  });
  await expectStatus(res, [201], `manifest PUT ${base.host}/${repo}:${tag}`);
  const manifestDigest = res.headers.get('docker-content-digest') ?? image.manifest.digest;
  if (manifestDigest !== image.manifest.digest) {
    throw new Error(`registry stored manifest as ${manifestDigest}, expected ${image.manifest.digest}`);
  }
  return {
    ref: `${base.host}/${repo}:${tag}`,
    host: base.host,
    repo,
    tag,
    manifestDigest,
    layers: image.layers,
    config: { mediaType: image.config.mediaType, digest: image.config.digest, size: image.config.size },
    image,
  };
}

/** buildImage + pushImage in one step. */
export async function buildAndPush(registry: string | { url: string }, opts: BuildImageOptions): Promise<PushedImage> {
  return pushImage(await buildImage(opts), registry);
}

/** The same image named through another host (e.g. a stall proxy in front of the registry). */
export function refVia(image: Pick<PushedImage, 'repo' | 'tag'>, host: string | { host: string }): string {
  return `${typeof host === 'string' ? host : host.host}/${image.repo}:${image.tag}`;
}

/**
 * Writes the layout as an OCI archive (tar) that `ctr images import` reads; the image is named
 * `imageName` (annotation io.containerd.image.name).
 */
export async function writeOciArchive(image: BuiltImage, file: string, imageName: string): Promise<void> {
  await writeIndex(image.layoutDir, image.manifest, {
    'org.opencontainers.image.ref.name': image.tag,
    'io.containerd.image.name': imageName,
  });
  await execFileP('tar', ['-C', image.layoutDir, '-cf', file, 'oci-layout', 'index.json', 'blobs']);
}
