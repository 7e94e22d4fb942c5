import { createHash } from 'node:crypto';
import { request } from 'node:http';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { buildAndPush, type PushedImage } from '../../harness/images.js';
import { startRegistry, type RunningRegistry } from '../../harness/registry.js';
import { startStallProxy, type StallProxy } from '../../harness/stall-proxy.js';
import { waitFor } from '../../harness/wait.js';

let registry: RunningRegistry;
let proxy: StallProxy;
let img: PushedImage;

beforeAll(async () => {
  registry = await startRegistry();
  proxy = await startStallProxy({ upstream: registry });
  img = await buildAndPush(registry, { layers: [600 * 1024, 900 * 1024] });
});
afterAll(async () => {
  await proxy?.close();
  await registry?.stop();
  await img?.image.remove();
});

/** A streaming GET of a blob through the proxy that records what arrives. */
function get(digest: string, headers: Record<string, string> = {}) {
  const chunks: Buffer[] = [];
  const state = { received: 0, status: 0, done: false, error: undefined as Error | undefined };
  const req = request(`${proxy.url}/v2/${img.repo}/blobs/${digest}`, { headers }, (res) => {
    state.status = res.statusCode ?? 0;
    res.on('data', (c: Buffer) => { chunks.push(c); state.received += c.length; });
    res.on('end', () => { state.done = true; });
    res.on('error', (e) => { state.error = e; });
  });
  req.on('error', (e) => { state.error = e; });
  req.end();
  return { state, body: () => Buffer.concat(chunks), abort: () => req.destroy() };
}

const sha = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

test('hold forwards exactly N bytes, then nothing; release delivers the rest intact', async () => {
  const layer = img.layers[0]!;
  proxy.hold(layer.digest, 100_000);
  const r = get(layer.digest);
  const held = await proxy.waitHeld(layer.digest);
  await waitFor(() => r.state.received === 100_000, { what: '100000 bytes at the client' });
  await new Promise((res) => setTimeout(res, 300));
  expect(r.state.received).toBe(100_000);
  expect(held.bytesDelivered).toBe(100_000);
  expect(held.lastByteAt).toBeLessThanOrEqual(Date.now());
  proxy.release(layer.digest);
  await waitFor(() => r.state.done, { what: 'blob complete' });
  expect(sha(r.body())).toBe(layer.digest);
  const s = proxy.stats(layer.digest);
  expect(s.bytesDelivered).toBe(layer.size);
  expect(s.holding).toBe(0);
  expect(s.active).toBe(0);
});

test('a Range request is held at the same absolute blob offset', async () => {
  const layer = img.layers[1]!;
  proxy.hold(layer.digest, 300_000);
  const r = get(layer.digest, { range: 'bytes=200000-' });
  await proxy.waitHeld(layer.digest);
  await waitFor(() => r.state.received === 100_000, { what: '100000 bytes after offset 200000' });
  expect(r.state.status).toBe(206);
  const s = proxy.stats(layer.digest);
  expect(s.highestOffset).toBe(300_000);
  expect(s.ranges).toContain('bytes=200000-');
  proxy.release(layer.digest);
  await waitFor(() => r.state.done, { what: 'range complete' });
  expect(r.state.received).toBe(layer.size - 200_000);
});

test('trickle paces a blob at the given rate; release lifts it at once', async () => {
  const layer = img.layers[0]!;
  proxy.trickle(layer.digest, 100_000, 50_000);
  const r = get(layer.digest);
  await waitFor(() => r.state.received >= 50_000, { what: 'unthrottled prefix' });
  const t0 = Date.now();
  const b0 = r.state.received;
  await new Promise((res) => setTimeout(res, 1_500));
  const rate = ((r.state.received - b0) * 1000) / (Date.now() - t0);
  expect(rate).toBeGreaterThan(50_000);
  expect(rate).toBeLessThan(160_000);
  proxy.release(layer.digest);
  await waitFor(() => r.state.done, { timeoutMs: 5_000, what: 'blob complete after release' });
  expect(sha(r.body())).toBe(layer.digest);
});

test('an image target holds all its layers; non-blob requests pass; close() drops held connections', async () => {
  proxy.hold(img, 10_000);
  const rs = img.layers.map((l) => get(l.digest));
  for (const l of img.layers) await proxy.waitHeld(l.digest);
  const manifest = await fetch(`${proxy.url}/v2/${img.repo}/manifests/${img.tag}`, {
    headers: { accept: 'application/vnd.docker.distribution.manifest.v2+json' },
  });
  expect(manifest.status).toBe(200);
  expect(manifest.headers.get('docker-content-digest')).toBe(img.manifestDigest);
  await proxy.close();
  await waitFor(() => rs.every((r) => r.state.error !== undefined || r.state.done), { what: 'held requests to end' });
  for (const r of rs) expect(r.state.done && r.state.received === img.layers[0]!.size).toBe(false);
});
