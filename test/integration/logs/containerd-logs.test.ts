/**
 * The real thing: containerd 1.6 and 1.7 pull images over CRI (as kubelet does) from a real
 * registry; a FileLogSource follows containerd's own log file and must report the pull start,
 * success, a failure, and on 1.7 the runtime's progress-timeout cancel with its deadline.
 *
 * With PULLWATCH_RECORD_LOG_FIXTURES=1 the pull lines containerd wrote are saved as
 * test/fixtures/logs/containerd-<version>-captured.txt (checked by the unit tests).
 */
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PullLogEvent } from '../../../agent/model/observations.js';
import { FileLogSource } from '../../../agent/sources/logs/index.js';
import { parseLogLine } from '../../../agent/sources/logs/parse/index.js';
import { startContainerd, type ContainerdVersion, type RunningContainerd } from '../../harness/containerd.js';
import { CriError, createCriClient, type CriClient } from '../../harness/cri.js';
import { buildAndPush, refVia, type PushedImage } from '../../harness/images.js';
import { startRegistry, type RunningRegistry } from '../../harness/registry.js';
import { startStallProxy, type StallProxy } from '../../harness/stall-proxy.js';
import { FIXTURES } from '../../unit/logs/fixtures.js';
import { testContext, waitFor, type TestContext } from './helpers.js';

const MiB = 1 << 20;

function suite(version: ContainerdVersion): void {
  describe(`containerd ${version} log lines, followed live`, () => {
    let registry: RunningRegistry;
    let proxy: StallProxy;
    let containerd: RunningContainerd;
    let cri: CriClient;
    let src: FileLogSource;
    let ctx: TestContext;
    const images: PushedImage[] = [];
    const of = (image: string) => ctx.events().filter((e) => e.image === image);

    beforeAll(async () => {
      registry = await startRegistry();
      proxy = await startStallProxy({ upstream: registry });
      containerd = await startContainerd({
        version,
        registryHosts: [registry.host, proxy.host],
        ...(version === '1.7' ? { pullProgressTimeout: '4s' } : {}),
      });
      cri = createCriClient(containerd.socket);
      ctx = testContext();
      src = new FileLogSource(containerd.logFile, { pollMs: 100, component: 'containerd' });
      await src.start(ctx);
    });
    afterAll(async () => {
      await src?.stop();
      cri?.close();
      if (process.env.PULLWATCH_RECORD_LOG_FIXTURES === '1' && containerd) {
        const lines = (await containerd.readLog()).split('\n').filter((l) => parseLogLine(l, { fallbackAt: Date.now() }) !== null);
        writeFileSync(`${FIXTURES}containerd-${version}-captured.txt`, [
          `# REAL lines captured from containerd ${containerd.fullVersion} (${containerd.binary}) by`,
          '# test/integration/logs/containerd-logs.test.ts with PULLWATCH_RECORD_LOG_FIXTURES=1: CRI PullImage of an image',
          '# from a local docker-registry, of a missing tag' + (version === '1.7' ? ', and of an image whose layer a proxy holds (image_pull_progress_timeout = "4s").' : '.'),
          ...lines, '',
        ].join('\n'));
      }
      await containerd?.stop();
      await proxy?.close();
      await registry?.stop();
      await Promise.all(images.map((i) => i.image.remove()));
    });

    it('a successful CRI pull: start and success with the image id containerd returned', async () => {
      const img = await buildAndPush(registry, { layers: [64 * 1024, MiB] });
      images.push(img);
      const imageRef = await cri.pullImage(img.ref, { pod: { name: 'web-0', namespace: 'default', uid: 'uid-1' } });
      await waitFor('success line', () => of(img.ref).some((e) => e.type === 'pull-succeeded' && e.imageId === imageRef));
      const evs = of(img.ref);
      expect(evs[0]).toEqual({ type: 'pull-started', component: 'containerd', image: img.ref });
      const last = evs.at(-1) as Extract<PullLogEvent, { type: 'pull-succeeded' }>;
      expect(last).toMatchObject({ type: 'pull-succeeded', component: 'containerd', image: img.ref, imageId: imageRef });
      if (version === '1.7') {
        const detailed = evs.find((e) => e.type === 'pull-succeeded' && e.sizeBytes !== undefined) as Extract<PullLogEvent, { type: 'pull-succeeded' }>;
        expect(detailed.repoDigest).toBe(`${img.host}/${img.repo}@${img.manifestDigest}`);
        expect(detailed.sizeBytes).toBeGreaterThan(MiB);
        expect(detailed.durationMs).toBeGreaterThan(0);
        expect(evs.some((e) => e.type === 'pull-stopped')).toBe(true);
      }
      const startObs = ctx.observations.find((o) => o.event.image === img.ref);
      expect(Math.abs((startObs?.at ?? 0) - Date.now())).toBeLessThan(60_000); // time from containerd's own stamp
    });

    it('a pull of a missing tag: failure with containerd\'s error', async () => {
      const ref = `${registry.host}/pullwatch/missing:nope`;
      const err = await cri.pullImage(ref).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(CriError);
      await waitFor('failure line', () => of(ref).some((e) => e.type === 'pull-failed'));
      const failed = of(ref).find((e) => e.type === 'pull-failed') as Extract<PullLogEvent, { type: 'pull-failed' }>;
      expect(failed.error).toContain('not found');
      expect(of(ref)[0]?.type).toBe('pull-started');
    });

    if (version === '1.7') {
      it('image_pull_progress_timeout fires on a held layer: cancelled with the 4s deadline, then failed', async () => {
        const img = await buildAndPush(registry, { layers: [64 * 1024, 3 * MiB] });
        images.push(img);
        const layer = img.layers[1]!;
        proxy.hold(layer.digest, MiB);
        const ref = refVia(img, proxy);
        try {
          const err = await cri.pullImage(ref).then(() => undefined, (e: unknown) => e);
          expect((err as CriError).code).toBe(1); // CANCELLED
          await waitFor('cancel and failure lines', () =>
            of(ref).some((e) => e.type === 'pull-cancelled') && of(ref).some((e) => e.type === 'pull-failed'), 20_000);
          expect(of(ref).find((e) => e.type === 'pull-cancelled')).toEqual({ type: 'pull-cancelled', component: 'containerd', image: ref, deadlineMs: 4000 });
          expect((of(ref).find((e) => e.type === 'pull-failed') as { error?: string }).error).toContain('context canceled');
        } finally {
          proxy.release(layer.digest);
        }
      });
    }
  });
}

suite('1.6');
suite('1.7');
