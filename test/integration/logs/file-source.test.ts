import { appendFileSync, mkdtempSync, renameSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FileLogSource } from '../../../agent/sources/logs/index.js';
import { sleep, testContext, waitFor, type TestContext } from './helpers.js';

const start = (image: string) => `time="2026-11-21T09:00:00Z" level=info msg="PullImage \\"${image}\\""\n`;
const kubeletPulling = (image: string) =>
  `I1121 09:00:01.000000    1234 event.go:389] "Event occurred" object="default/p" kind="Pod" reason="Pulling" message="Pulling image \\"${image}\\""\n`;

describe('FileLogSource on real files', () => {
  let dir: string;
  let src: FileLogSource | null = null;
  let ctx: TestContext;
  const images = () => ctx.events().map((e) => e.image);

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'pw-logs-'));
    ctx = testContext();
  });
  afterEach(async () => {
    await src?.stop();
    src = null;
    rmSync(dir, { recursive: true, force: true });
  });

  it('reads back the tail at start (dropping the cut first line), then follows appends', async () => {
    const f = join(dir, 'containerd.log');
    writeFileSync(f, start('old:outside-tail') + 'x'.repeat(300) + '\n' + start('a:1') + 'partial-no-newline');
    src = new FileLogSource(f, { pollMs: 50, tailBytes: 200 });
    await src.start(ctx);
    expect(images()).toEqual(['a:1']);
    appendFileSync(f, ' end\n' + start('b:2') + kubeletPulling('c:3'));
    await waitFor('b:2 and c:3', () => images().length === 3);
    expect(images()).toEqual(['a:1', 'b:2', 'c:3']);
    expect(ctx.observations[2]).toMatchObject({ kind: 'log', source: `file:${f}`, event: { type: 'pull-started', component: 'kubelet', pod: 'default/p' } });
    expect(ctx.observations[0]?.at).toBe(Date.parse('2026-11-21T09:00:00Z'));
  });

  it('follows rename rotation: finishes the old file, then reads the new one from its start', async () => {
    const f = join(dir, 'kubelet.log');
    writeFileSync(f, start('a:1'));
    src = new FileLogSource(f, { pollMs: 50 });
    await src.start(ctx);
    await waitFor('a:1', () => images().length === 1);
    appendFileSync(f, start('b:2-written-before-rotation'));
    renameSync(f, f + '.1');
    appendFileSync(f + '.1', start('c:3-late-write-to-old-file'));
    writeFileSync(f, start('d:4-new-file'));
    await waitFor('all four', () => images().length === 4);
    expect(images()).toEqual(['a:1', 'b:2-written-before-rotation', 'c:3-late-write-to-old-file', 'd:4-new-file']);
    appendFileSync(f, start('e:5'));
    await waitFor('e:5', () => images().length === 5);
  });

  it('follows copytruncate: the file shrinks in place and is read again from 0', async () => {
    const f = join(dir, 'crio.log');
    writeFileSync(f, start('a:1') + start('b:2'));
    src = new FileLogSource(f, { pollMs: 50 });
    await src.start(ctx);
    await waitFor('a, b', () => images().length === 2);
    truncateSync(f, 0);
    await sleep(150); // let a poll see the empty file
    appendFileSync(f, start('c:3'));
    await waitFor('c:3', () => images().length === 3);
    // truncation and regrowth between two polls: noticed by the changed bytes before our offset
    truncateSync(f, 0);
    appendFileSync(f, start('d:4'));
    await waitFor('d:4', () => images().length === 4);
    expect(images()).toEqual(['a:1', 'b:2', 'c:3', 'd:4']);
  });

  it('waits for a file that does not exist yet (reported once), then reads it from the start', async () => {
    const f = join(dir, 'later.log');
    src = new FileLogSource(f, { pollMs: 50 });
    await src.start(ctx);
    await sleep(200);
    expect(ctx.healthCount('file-missing')).toBe(1);
    writeFileSync(f, start('a:1') + start('b:2'));
    await waitFor('a, b', () => images().length === 2);
    rmSync(f);
    await sleep(200);
    writeFileSync(f, start('c:3'));
    await waitFor('c:3', () => images().length === 3);
    expect(images()).toEqual(['a:1', 'b:2', 'c:3']);
  });

  it('drops a 5 MB line (counted once) and binary junk, and keeps reading after them', async () => {
    const f = join(dir, 'big.log');
    writeFileSync(f, '');
    src = new FileLogSource(f, { pollMs: 50 });
    await src.start(ctx);
    const before = process.memoryUsage().arrayBuffers;
    appendFileSync(f, `time="2026-11-21T09:00:00Z" level=info msg="PullImage \\"${'z'.repeat(5 * 1024 * 1024)}\\""\n`);
    appendFileSync(f, Buffer.from([0xff, 0x00, 0xfe, 0x0a, 0x1b, 0x5b, 0x41, 0xc3, 0x28, 0x0a]));
    appendFileSync(f, start('after:1'));
    await waitFor('after:1', () => images().length === 1, 20_000);
    expect(images()).toEqual(['after:1']);
    expect(ctx.healthCount('line-too-long')).toBe(1);
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(4 * 1024 * 1024);
  });

  it('a directory instead of a file is reported, not fatal', async () => {
    src = new FileLogSource(dir, { pollMs: 50 });
    await src.start(ctx);
    await sleep(150);
    expect(ctx.healthCount('not-a-file')).toBe(1);
  });
});
