import { afterAll, describe, expect, test } from 'vitest';
import { findIngest, startContainerd, type RunningContainerd } from '../../harness/containerd.js';
import { CriError, createCriClient } from '../../harness/cri.js';
import { refVia } from '../../harness/images.js';
import { waitFor } from '../../harness/wait.js';
import { containerdSmoke, MiB, push, stopLeavesNothing } from './containerd-suite.js';

const env = containerdSmoke('1.7');

describe('containerd 1.7: image_pull_progress_timeout', () => {
  let strict: RunningContainerd | undefined;
  afterAll(async () => {
    await strict?.stop();
  });

  test('a second instance with a 4s timeout runs beside the first and cancels a held pull; its log says so', async () => {
    strict = await startContainerd({ version: '1.7', pullProgressTimeout: '4s', registryHosts: [env.proxy.host] });
    // Two instances at once, each with its own socket and root.
    expect(strict.pid).not.toBe(env.containerd.pid);
    expect(strict.socket).not.toBe(env.containerd.socket);
    expect((await env.cri.version()).runtimeName).toBe('containerd');

    const img = await push(env, [64 * 1024, 3 * MiB]);
    const layer = img.layers[1]!;
    env.proxy.hold(layer.digest, MiB);
    const cri = createCriClient(strict.socket);
    const ref = refVia(img, env.proxy);
    try {
      const started = Date.now();
      const err = await cri.pullImage(ref).then(() => undefined, (e: unknown) => e);
      const failedAt = Date.now();
      expect(err).toBeInstanceOf(CriError);
      expect((err as CriError).code).toBe(1); // CANCELLED
      expect((err as CriError).details).toContain('context canceled');
      const lastByteAt = env.proxy.stats(layer.digest).lastByteAt ?? started;
      // Fires after >= 4s without progress, checked every timeout/2.
      expect(failedAt - lastByteAt).toBeGreaterThanOrEqual(3_500);
      expect(failedAt - lastByteAt).toBeLessThan(15_000);

      const log = await waitFor(async () => {
        const text = await strict!.readLog();
        return text.includes(`PullImage \\"${ref}\\" failed`) ? text : undefined;
      }, { what: 'PullImage failed line in the containerd log' });
      expect(log).toContain(`level=error msg="cancel pulling image ${ref} because of no progress in 4s"`);
      expect(log).toMatch(/level=error msg="PullImage \\"[^"]+\\" failed" error="rpc error: code = Canceled desc = failed to pull and unpack image \\"[^"]+\\": context canceled"/);
      // The partial ingest of the cancelled pull stays on disk.
      expect((await findIngest(strict, layer.digest))?.dataSize).toBe(MiB);
    } finally {
      env.proxy.release(layer.digest);
      cri.close();
    }
  });
});

stopLeavesNothing(() => env.containerd);
