import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { mkdtemp, rm } from 'node:fs/promises';
import { describe, expect, test } from 'vitest';
import { buildImage, writeOciArchive } from '../../harness/images.js';
import { createCriClient } from '../../harness/cri.js';
import { isAlive } from '../../harness/processes.js';
import { containerdSmoke, MiB, push, stopLeavesNothing } from './containerd-suite.js';

const env = containerdSmoke('1.6');

describe('containerd 1.6: ctr path', () => {
  test('ctr images import of an OCI archive + ctr images push --plain-http reaches the registry', async () => {
    const image = await buildImage({ layers: [256 * 1024, MiB], format: 'oci' });
    const dir = await mkdtemp(join(tmpdir(), 'pw-ctr-'));
    try {
      const name = `${env.registry.host}/pullwatch/ctr-pushed:v1`;
      const archive = join(dir, 'image.tar');
      await writeOciArchive(image, archive, name);
      await env.containerd.ctr(['images', 'import', '--no-unpack', archive]);
      const listed = await env.containerd.ctr(['images', 'ls', '-q']);
      expect(listed.stdout.split('\n')).toContain(name);
      await env.containerd.ctr(['images', 'push', '--plain-http', name]);
      const res = await fetch(`${env.registry.url}/v2/pullwatch/ctr-pushed/manifests/v1`, {
        headers: { accept: 'application/vnd.oci.image.manifest.v1+json' },
      });
      expect(res.status).toBe(200);
      expect(res.headers.get('docker-content-digest')).toBe(image.manifest.digest);
      await res.body?.cancel();
      const digest = image.layers[1]!.digest;
      const blob = await fetch(`${env.registry.url}/v2/pullwatch/ctr-pushed/blobs/${digest}`);
      expect(`sha256:${createHash('sha256').update(Buffer.from(await blob.arrayBuffer())).digest('hex')}`).toBe(digest);
    } finally {
      await rm(dir, { recursive: true, force: true });
      await image.remove();
    }
  });
});

describe('containerd 1.6: restart', () => {
  test('restart() keeps root/state (pulled images survive), changes the pid and appends to the same log', async () => {
    const img = await push(env, [64 * 1024]);
    const imageRef = await env.cri.pullImage(img.ref);
    const oldPid = env.containerd.pid;
    const logBefore = (await env.containerd.readLog()).length;
    await env.containerd.restart();
    expect(env.containerd.pid).not.toBe(oldPid);
    expect(isAlive(oldPid)).toBe(false);
    const cri = createCriClient(env.containerd.socket);
    try {
      expect((await cri.imageStatus(img.ref))?.id).toBe(imageRef);
    } finally {
      cri.close();
    }
    const log = await env.containerd.readLog();
    expect(log.length).toBeGreaterThan(logBefore);
    expect(log.split('containerd successfully booted').length - 1).toBe(2);
  });
});

stopLeavesNothing(() => env.containerd);
