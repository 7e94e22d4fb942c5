import { appendFileSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DockerTmpSource } from '../../../agent/sources/docker/tmp-source.js';
import { assertSane, tempDir, testCtx } from './helpers.js';

const cleanups: Array<() => unknown> = [];
afterEach(async () => { for (const c of cleanups.splice(0).reverse()) await c(); });

function setup(socket?: string) {
  const tmp = tempDir('pw-docker-');
  const root = join(tmp.path, 'docker');
  const t = testCtx();
  const source = new DockerTmpSource({ dockerRoot: root, pollMs: 60_000, socket });
  cleanups.push(tmp.cleanup, () => source.stop());
  return { root, tmp: join(root, 'tmp'), t, source };
}

describe('DockerTmpSource', () => {
  it('reports GetImageBlob* temp files as layer ingests, follows growth and closes', async () => {
    const { tmp, t, source } = setup();
    mkdirSync(tmp, { recursive: true });
    writeFileSync(join(tmp, 'GetImageBlob123456789'), Buffer.alloc(1000));
    writeFileSync(join(tmp, 'GetImageBlob987654321'), Buffer.alloc(10));
    writeFileSync(join(tmp, 'docker-import-1234'), 'not a blob');
    mkdirSync(join(tmp, 'GetImageBlobDir'));
    await source.start(t.ctx);
    let obs = t.lastIngests();
    expect(obs).toMatchObject({ kind: 'ingests', runtime: 'docker', source: 'docker-tmp', closed: [] });
    expect(obs.present.map((s) => [s.key, s.offset, s.blobKind]).sort()).toEqual([
      ['GetImageBlob123456789', 1000, 'layer'], ['GetImageBlob987654321', 10, 'layer'],
    ]);
    for (const s of obs.present) { assertSane(s); expect(s.lastWriteAt).toBeGreaterThan(0); expect(s.total).toBeUndefined(); }
    const startedAt = obs.present[0]!.startedAt;
    appendFileSync(join(tmp, 'GetImageBlob123456789'), Buffer.alloc(500));
    rmSync(join(tmp, 'GetImageBlob987654321'));
    source.pollOnce();
    obs = t.lastIngests();
    expect(obs.present).toEqual([expect.objectContaining({ key: 'GetImageBlob123456789', offset: 1500, startedAt })]);
    expect(obs.closed).toEqual([{ key: 'GetImageBlob987654321', committed: null }]);
    expect(t.health.snapshot()).toEqual([]);
  });

  it('no docker root: warns once and emits nothing; root appearing later works; tmp/ missing is no error', async () => {
    const { root, tmp, t, source } = setup();
    await source.start(t.ctx);
    source.pollOnce();
    expect(t.ingests()).toEqual([]);
    expect(t.health.snapshot()).toEqual([expect.objectContaining({ cause: 'root-missing', count: 2 })]);
    mkdirSync(root);
    source.pollOnce();
    expect(t.lastIngests().present).toEqual([]);
    mkdirSync(tmp);
    writeFileSync(join(tmp, 'GetImageBlob1'), 'abc');
    source.pollOnce();
    expect(t.lastIngests().present).toEqual([expect.objectContaining({ key: 'GetImageBlob1', offset: 3 })]);
  });

  it('an unreachable docker socket is reported once and does not stop the file watching', async () => {
    const { tmp, t, source } = setup('/nonexistent/docker.sock');
    mkdirSync(tmp, { recursive: true });
    writeFileSync(join(tmp, 'GetImageBlob1'), 'abc');
    await source.start(t.ctx);
    await source.settle();
    source.pollOnce();
    await source.settle();
    expect(t.lastIngests().present).toHaveLength(1);
    expect(t.health.snapshot()).toEqual([expect.objectContaining({ cause: 'docker-socket-unreachable', count: 1 })]);
    expect(t.observations.filter((o) => o.kind === 'runtime')).toEqual([]);
  });
});
