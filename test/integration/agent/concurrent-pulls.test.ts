/**
 * Two concurrent pulls of different images from the same registry, each held at a different
 * offset: the agent must attribute every layer and its bytes to the right image (issue 2).
 */
import { describe, expect, test } from 'vitest';
import type { ContainerdVersion } from '../../harness/containerd.js';
import { waitFor } from '../../harness/wait.js';
import { layerOf, MiB, useAgentEnv } from './agent-suite.js';

for (const version of ['1.6', '1.7'] as ContainerdVersion[]) {
  describe(`agent on containerd ${version}`, () => {
    const env = useAgentEnv(version);

    test('two concurrent pulls of different images are each attributed their own layers and bytes', async () => {
      const a = await env.push([64 * 1024, 3 * MiB]);
      const b = await env.push([64 * 1024, 4 * MiB]);
      env.proxy.hold(a.layers[1]!.digest, MiB);
      env.proxy.hold(b.layers[1]!.digest, 3 * MiB);
      const pa = env.startPull(a);
      const pb = env.startPull(b);
      const [ra, rb] = await Promise.all([
        env.agent.waitPull('stalled pull A', (p) => p.image === pa.ref && p.state === 'stalled' && layerOf(p, a.layers[1]!.digest)?.bytesDone === MiB),
        env.agent.waitPull('stalled pull B', (p) => p.image === pb.ref && p.state === 'stalled' && layerOf(p, b.layers[1]!.digest)?.bytesDone === 3 * MiB),
      ]);
      expect(ra.id).not.toBe(rb.id);
      expect(ra.repository).toBe(a.repo);
      expect(rb.repository).toBe(b.repo);
      expect(layerOf(ra, a.layers[1]!.digest)?.bytesDone).toBe(MiB);
      expect(layerOf(rb, b.layers[1]!.digest)?.bytesDone).toBe(3 * MiB);
      const digestsA = new Set([a.config.digest, ...a.layers.map((l) => l.digest)]);
      const digestsB = new Set([b.config.digest, ...b.layers.map((l) => l.digest)]);
      const foreign = (r: typeof ra, own: Set<string>): string[] =>
        r.layers.filter((l) => (l.kind === 'layer' || l.kind === 'config') && !own.has(l.digest)).map((l) => `${l.kind} ${l.digest}${digestsA.has(l.digest) ? ' (of A)' : digestsB.has(l.digest) ? ' (of B)' : ''}`);
      expect(foreign(ra, digestsA), 'blobs in the record of A that are not A\'s').toEqual([]);
      expect(foreign(rb, digestsB), 'blobs in the record of B that are not B\'s').toEqual([]);

      // Only A is released: B stays stalled, A completes.
      env.proxy.release(a.layers[1]!.digest);
      await pa.done;
      await env.agent.waitPull('completed pull A', (p) => p.image === pa.ref && p.state === 'completed', { all: true });
      expect((await env.agent.pulls()).find((p) => p.image === pb.ref)?.state).toBe('stalled');
      env.proxy.release(b.layers[1]!.digest);
      await pb.done;
      await env.agent.waitPull('completed pull B', (p) => p.image === pb.ref && p.state === 'completed', { all: true });
      expect((await env.agent.pulls()).filter((p) => p.state === 'stalled')).toEqual([]);
      // Every layer fetched was someone's: no pull is left in flight (no phantom "(unattributed)"
      // record holding the small layers that were committed before attribution finished).
      await waitFor(async () => (await env.agent.pulls()).length === 0, { timeoutMs: 10_000, what: 'no pull left in flight' })
        .catch(async (err: unknown) => {
          throw new Error(`${(err as Error).message}: ${JSON.stringify((await env.agent.pulls()).map((p) => ({ image: p.image, state: p.state, layers: p.layers.map((l) => `${l.digest.slice(7, 19)} ${l.state}`) })))}`, { cause: err });
        });
      const all = await env.agent.pulls(true);
      for (const l of [...a.layers, ...b.layers]) {
        // A small layer can come and go between two polls and never be seen; one that was seen
        // belongs to its own image only.
        const owners = all.filter((p) => layerOf(p, l.digest)).map((p) => p.image);
        expect(owners.filter((o) => o !== (a.layers.includes(l) ? pa.ref : pb.ref)), `other owners of ${l.digest}`).toEqual([]);
      }
    });
  });
}
