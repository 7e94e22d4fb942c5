import { existsSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { startDockerd, type RunningDockerd } from '../../harness/dockerd.js';
import { buildAndPush, refVia, type PushedImage } from '../../harness/images.js';
import { isAlive, pidsMentioning } from '../../harness/processes.js';
import { startRegistry, type RunningRegistry } from '../../harness/registry.js';
import { startStallProxy, type StallProxy } from '../../harness/stall-proxy.js';
import { waitFor } from '../../harness/wait.js';

const MiB = 1 << 20;
let registry: RunningRegistry;
let proxy: StallProxy;
let dockerd: RunningDockerd;
const images: PushedImage[] = [];

beforeAll(async () => {
  registry = await startRegistry();
  proxy = await startStallProxy({ upstream: registry });
  dockerd = await startDockerd({ insecureRegistries: [proxy.host] });
});
afterAll(async () => {
  await dockerd?.stop();
  await proxy?.close();
  await registry?.stop();
  await Promise.all(images.map((i) => i.image.remove()));
});

async function blobTempFiles(): Promise<{ name: string; size: number }[]> {
  const names = await readdir(dockerd.blobTmpDir).catch(() => [] as string[]);
  const out: { name: string; size: number }[] = [];
  for (const name of names.filter((n) => n.startsWith('GetImageBlob'))) {
    const s = await stat(join(dockerd.blobTmpDir, name)).catch(() => undefined);
    if (s) out.push({ name, size: s.size });
  }
  return out;
}

function pull(docker: Docker, ref: string): Promise<unknown[]> {
  return new Promise((resolve, reject) => {
    docker.pull(ref, (err: Error | null, stream: NodeJS.ReadableStream) => {
      if (err) { reject(err); return; }
      docker.modem.followProgress(stream, (e: Error | null, out: unknown[]) => (e ? reject(e) : resolve(out)));
    });
  });
}

test('docker pull through the stall proxy: a held layer is a GetImageBlob* temp file that stops growing; release completes it', async () => {
  const img = await buildAndPush(registry, { layers: [64 * 1024, 3 * MiB] });
  images.push(img);
  const layer = img.layers[1]!;
  const N = MiB + 12345;
  proxy.hold(layer.digest, N);
  const docker = new Docker({ socketPath: dockerd.socket });
  const ref = refVia(img, proxy);
  const pulling = pull(docker, ref);
  pulling.catch(() => undefined);
  await proxy.waitHeld(layer.digest);

  const first = await waitFor(async () => {
    const files = await blobTempFiles();
    return files.length === 1 && files[0]!.size === N ? files[0] : undefined;
  }, { timeoutMs: 15_000, what: `one GetImageBlob* file of ${N} bytes in ${dockerd.blobTmpDir}` });
  await new Promise((r) => setTimeout(r, 1_000));
  const again = await blobTempFiles();
  expect(again).toEqual([first]);

  proxy.release(layer.digest);
  const events = await pulling;
  expect(JSON.stringify(events.at(-1))).toContain('Downloaded newer image');
  const inspected = await docker.getImage(ref).inspect();
  expect(inspected.RepoDigests).toContain(`${proxy.host}/${img.repo}@${img.manifestDigest}`);
  expect(await blobTempFiles()).toEqual([]);
});

test('stop() kills dockerd and its managed containerd and removes the data root', async () => {
  const pid = dockerd.pid;
  expect(pidsMentioning(dockerd.execRoot).length).toBeGreaterThan(0); // the managed containerd
  await dockerd.stop();
  expect(isAlive(pid)).toBe(false);
  expect(pidsMentioning(dockerd.dir)).toEqual([]);
  expect(existsSync(dockerd.dir)).toBe(false);
});
