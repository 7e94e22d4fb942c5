import { describe, expect, it } from 'vitest';
import { PullTracker } from '../../../agent/detector/pull-tracker.js';
import type { IngestStatus, Observation, PullLogEvent } from '../../../agent/model/observations.js';
import type { Transition } from '../../../agent/model/pulls.js';

const T0 = Date.parse('2026-11-21T10:00:00Z');
const STALL = 60_000;

/** A scripted node: a clock, a tracker, and helpers that speak like the sources do. */
function scenario(opts: { slowBelow?: number; stallAfter?: number } = {}) {
  let now = T0;
  const tracker = new PullTracker({
    stallAfterMs: opts.stallAfter ?? STALL,
    slowBelowBytesPerSecond: opts.slowBelow ?? 64 * 1024,
    now: () => now,
  });
  const transitions: Transition[] = [];
  const ingests = new Map<string, IngestStatus>();
  const feed = (o: Observation) => transitions.push(...tracker.observe(o));
  return {
    tracker,
    transitions,
    get now() { return now; },
    advance(ms: number, stepMs = 1000) {
      const end = now + ms;
      while (now < end) {
        now = Math.min(now + stepMs, end);
        feed({ kind: 'ingests', at: now, runtime: 'containerd', source: 'fs', present: [...ingests.values()], closed: [] });
        transitions.push(...tracker.tick());
      }
    },
    ingest(key: string, fields: Partial<IngestStatus> & { offset: number }) {
      const prev = ingests.get(key);
      const changed = !prev || prev.offset !== fields.offset;
      ingests.set(key, {
        key, ref: `k8s.io/1/layer-${fields.digest ?? key}`, blobKind: 'layer', startedAt: prev?.startedAt ?? now,
        ...prev, ...fields, lastWriteAt: fields.lastWriteAt ?? (changed ? now : prev?.lastWriteAt),
      });
    },
    close(key: string, committed = true) {
      ingests.delete(key);
      feed({ kind: 'ingests', at: now, runtime: 'containerd', source: 'fs', present: [...ingests.values()], closed: [{ key, committed }] });
    },
    log(event: PullLogEvent, at = now) { feed({ kind: 'log', at, source: 'test', event }); },
    kinds: () => transitions.map((t) => `${t.kind}:${t.pull.image}`),
  };
}

describe('PullTracker', () => {
  it('reports a stall after exactly stall-after of no byte progress, with image, layer and bytes', () => {
    const s = scenario();
    s.log({ type: 'pull-started', component: 'containerd', image: 'registry.example.com/team/app:v1' });
    s.ingest('a', { digest: 'sha256:aaa', offset: 0, total: 40_000_000, registry: 'registry.example.com', repository: 'team/app' });
    for (let i = 1; i <= 10; i++) { s.advance(1000); s.ingest('a', { offset: i * 420_000 }); }
    s.advance(59_000);
    expect(s.tracker.records()[0]?.state).not.toBe('stalled');
    s.advance(1000);
    const stall = s.transitions.find((t) => t.kind === 'stalled');
    expect(stall).toBeDefined();
    expect(stall?.pull).toMatchObject({
      image: 'registry.example.com/team/app:v1', registry: 'registry.example.com', state: 'stalled', bytesDone: 4_200_000, bytesTotal: 40_000_000,
    });
    expect(stall?.pull.layers[0]).toMatchObject({ digest: 'sha256:aaa', state: 'stalled', bytesDone: 4_200_000 });
    expect(stall?.pull.idleSeconds).toBeGreaterThanOrEqual(60);
    expect(Date.parse(stall?.at ?? '') - (T0 + 10_000)).toBe(60_000);
  });

  it('resumes when bytes move again and completes when the runtime says so; idle gaps are kept for tune', () => {
    const s = scenario();
    s.log({ type: 'pull-started', component: 'containerd', image: 'nginx:1.27' });
    s.ingest('a', { digest: 'sha256:aaa', offset: 100, total: 1_000_000, registry: 'docker.io', repository: 'library/nginx' });
    s.advance(1000);
    s.advance(70_000);
    s.ingest('a', { offset: 900_000 });
    s.advance(1000);
    s.close('a', true);
    s.log({ type: 'pull-succeeded', component: 'containerd', image: 'nginx:1.27', durationMs: 73_000 });
    expect(s.transitions.map((t) => t.kind)).toEqual(['started', 'stalled', 'resumed', 'unpacking', 'completed']);
    const done = s.tracker.records(true)[0];
    expect(done).toMatchObject({ state: 'completed', durationMs: 73_000, bytesDone: 1_000_000 });
    expect(done?.idleGapsMs[0]).toBeGreaterThanOrEqual(70_000);
    expect(s.tracker.records()).toHaveLength(0);
  });

  it('calls a trickle slow, not stalled, and leaves slow with hysteresis', () => {
    const s = scenario({ slowBelow: 64 * 1024, stallAfter: 10_000 });
    s.log({ type: 'pull-started', component: 'containerd', image: 'r.example/app:1' });
    let off = 0;
    s.ingest('a', { offset: off, total: 50_000_000, registry: 'r.example', repository: 'app' });
    for (let i = 0; i < 20; i++) { s.advance(1000); off += 8 * 1024; s.ingest('a', { offset: off }); }
    expect(s.transitions.map((t) => t.kind)).toEqual(['started', 'slow']);
    expect(s.tracker.records()[0]?.layers[0]?.state).toBe('slow');
    // 70 KiB/s is above the threshold but inside the hysteresis band: stays slow
    for (let i = 0; i < 15; i++) { s.advance(1000); off += 70 * 1024; s.ingest('a', { offset: off }); }
    expect(s.tracker.records()[0]?.state).toBe('slow');
    for (let i = 0; i < 15; i++) { s.advance(1000); off += 1024 * 1024; s.ingest('a', { offset: off }); }
    expect(s.transitions.map((t) => t.kind)).toEqual(['started', 'slow', 'resumed']);
  });

  it('keeps two concurrent pulls of different images apart by their distribution source', () => {
    const s = scenario({ stallAfter: 5000 });
    s.log({ type: 'pull-started', component: 'containerd', image: '127.0.0.1:5000/one:v1' });
    s.log({ type: 'pull-started', component: 'containerd', image: '127.0.0.1:5000/two:v1' });
    s.ingest('x', { digest: 'sha256:x', offset: 10, total: 100, registry: '127.0.0.1:5000', repository: 'one' });
    s.ingest('y', { digest: 'sha256:y', offset: 20, total: 200, registry: '127.0.0.1:5000', repository: 'two' });
    s.advance(1000);
    for (let i = 0; i < 8; i++) { s.advance(1000); s.ingest('y', { offset: 30 + i }); }
    const recs = s.tracker.records();
    const one = recs.find((r) => r.image.includes('one'));
    const two = recs.find((r) => r.image.includes('two'));
    expect(one).toMatchObject({ state: 'stalled', bytesDone: 10 });
    expect(one?.layers.map((l) => l.digest)).toEqual(['sha256:x']);
    expect(two?.state).not.toBe('stalled');
    expect(two?.layers.map((l) => l.digest)).toEqual(['sha256:y']);
  });

  it('attributes unlabelled blobs only when a single pull is in flight, and by manifest otherwise', () => {
    const s = scenario({ stallAfter: 5000 });
    s.log({ type: 'pull-started', component: 'containerd', image: 'a.example/one:1' });
    s.ingest('m1', { offset: 5, blobKind: 'layer', digest: 'sha256:l1', manifestDigest: 'sha256:m1' });
    s.advance(1000);
    expect(s.tracker.records()[0]?.layers).toHaveLength(1);
    s.log({ type: 'pull-started', component: 'containerd', image: 'b.example/two:1' });
    s.ingest('m1b', { offset: 5, digest: 'sha256:l2', manifestDigest: 'sha256:m1' });
    s.ingest('zz', { offset: 5, digest: 'sha256:l3' });
    s.advance(1000);
    const one = s.tracker.records().find((r) => r.image === 'a.example/one:1');
    expect(one?.layers.map((l) => l.digest).sort()).toEqual(['sha256:l1', 'sha256:l2']);
    const unattributed = s.tracker.records().find((r) => r.image === '(unattributed)');
    expect(unattributed?.layers.map((l) => l.digest)).toEqual(['sha256:l3']);
  });

  it('does not call leftover ingests of earlier cancelled pulls stalled', () => {
    const s = scenario({ stallAfter: 5000 });
    // present at agent start, last written 10 minutes ago
    s.ingest('old', { offset: 1234, total: 9999, lastWriteAt: T0 - 600_000 });
    s.advance(30_000);
    expect(s.transitions).toHaveLength(0);
    expect(s.tracker.records()).toHaveLength(0);
    expect(s.tracker.dormantIngests()).toHaveLength(1);
    // the runtime picks it up again (resume): it moves, so it is a pull in flight
    s.ingest('old', { offset: 5000 });
    s.advance(1000);
    expect(s.tracker.records()).toHaveLength(1);
  });

  it('reports a runtime cancel with its deadline and the last progress seen', () => {
    const s = scenario({ stallAfter: 5000 });
    s.log({ type: 'pull-started', component: 'containerd', image: '127.0.0.1:5000/big:v1' });
    s.ingest('a', { digest: 'sha256:aaa', offset: 1_048_576, total: 8_388_608, registry: '127.0.0.1:5000', repository: 'big' });
    s.advance(25_000);
    s.log({ type: 'pull-cancelled', component: 'containerd', image: '127.0.0.1:5000/big:v1', deadlineMs: 20_000 });
    s.log({ type: 'pull-failed', component: 'containerd', image: '127.0.0.1:5000/big:v1', error: 'context canceled' });
    const cancel = s.transitions.find((t) => t.kind === 'cancelled');
    expect(cancel?.pull).toMatchObject({
      state: 'cancelled-by-runtime',
      cancel: { by: 'containerd', deadlineMs: 20_000, bytesDone: 1_048_576, bytesTotal: 8_388_608 },
    });
    expect(cancel?.pull.cancel?.lastProgress).toContain('1048576 of 8388608');
    expect(s.transitions.filter((t) => t.kind === 'failed')).toHaveLength(0);
    // the ingest stays on disk: not a stall afterwards
    s.advance(20_000);
    expect(s.transitions.filter((t) => t.kind === 'stalled')).toHaveLength(1);
    expect(s.tracker.records()).toHaveLength(0);
  });

  it('treats unpacking as no stall, and completes without logs after a quiet period', () => {
    const s = scenario({ stallAfter: 5000 });
    s.ingest('a', { offset: 10, total: 100, registry: 'r', repository: 'x' });
    s.advance(1000);
    s.ingest('a', { offset: 100 });
    s.advance(1000);
    s.close('a', true);
    s.advance(3000);
    expect(s.tracker.records()[0]?.state).toBe('unpacking');
    s.advance(3000);
    expect(s.transitions.map((t) => t.kind)).toEqual(['started', 'unpacking', 'completed']);
  });

  it('calls a pull that never got its first blob stalled (hang while resolving)', () => {
    const s = scenario({ stallAfter: 5000 });
    s.log({ type: 'pull-started', component: 'kubelet', image: 'quay.io/x/y:1' });
    s.advance(5000);
    expect(s.transitions.map((t) => t.kind)).toEqual(['started', 'stalled']);
  });

  it('ignores pull-started lines replayed from long ago', () => {
    const s = scenario();
    s.log({ type: 'pull-started', component: 'containerd', image: 'x' }, T0 - 3_600_000);
    s.advance(120_000);
    expect(s.transitions).toHaveLength(0);
  });

  it('attaches waiting pods to the pull of their image', () => {
    const s = scenario();
    s.log({ type: 'pull-started', component: 'containerd', image: 'nginx' });
    s.tracker.observe({
      kind: 'pods', at: s.now,
      pods: [
        { namespace: 'web', name: 'a', container: 'c', image: 'docker.io/library/nginx:latest', reason: 'ContainerCreating' },
        { namespace: 'web', name: 'b', container: 'c', image: 'redis', reason: 'ContainerCreating' },
      ],
    });
    expect(s.tracker.records()[0]?.pods).toEqual([{ namespace: 'web', name: 'a', container: 'c', reason: 'ContainerCreating' }]);
  });

  it('carries runtime version and deadline on records', () => {
    const s = scenario();
    s.tracker.observe({ kind: 'runtime', at: s.now, info: { name: 'containerd', version: '1.7.24', pullDeadlineMs: 300_000 } });
    s.log({ type: 'pull-started', component: 'containerd', image: 'nginx' });
    expect(s.tracker.records()[0]).toMatchObject({ runtime: { name: 'containerd', version: '1.7.24' }, runtimeDeadlineMs: 300_000 });
  });
});

describe('PullTracker attribution across sources', () => {
  it('matches containerd labels without the registry port to the image the log named', () => {
    let now = T0;
    const tracker = new PullTracker({ stallAfterMs: 5000, slowBelowBytesPerSecond: 1, now: () => now });
    tracker.observe({ kind: 'log', at: now, source: 't', event: { type: 'pull-started', component: 'containerd', image: '127.0.0.1:5000/app:v1' } });
    tracker.observe({ kind: 'log', at: now, source: 't', event: { type: 'pull-started', component: 'containerd', image: '127.0.0.1:5000/other:v1' } });
    now += 1000;
    tracker.observe({
      kind: 'ingests', at: now, runtime: 'containerd', source: 'fs', closed: [],
      present: [{ key: 'k', ref: 'k8s.io/1/layer-sha256:a', blobKind: 'layer', digest: 'sha256:a', offset: 5, registry: '127.0.0.1', repository: 'app', lastWriteAt: now }],
    });
    const recs = tracker.records();
    expect(recs).toHaveLength(2);
    expect(recs.find((r) => r.image === '127.0.0.1:5000/app:v1')?.layers.map((l) => l.digest)).toEqual(['sha256:a']);
  });

  it('treats a vanished Docker temp file as done, not aborted', () => {
    let now = T0;
    const tracker = new PullTracker({ stallAfterMs: 5000, slowBelowBytesPerSecond: 1, now: () => now });
    const ing = { key: 'GetImageBlob1', ref: 'GetImageBlob1', blobKind: 'layer' as const, offset: 10, lastWriteAt: now };
    tracker.observe({ kind: 'ingests', at: now, runtime: 'docker', source: 'd', present: [ing], closed: [] });
    now += 1000;
    tracker.observe({ kind: 'ingests', at: now, runtime: 'docker', source: 'd', present: [], closed: [{ key: 'GetImageBlob1', committed: null }] });
    expect(tracker.records()[0]?.layers[0]?.state).toBe('committed');
  });
});

describe('PullTracker and pods that arrive late', () => {
  it('announces a stall again (from === to) when pods start waiting on an already stalled pull', () => {
    let now = T0;
    const tracker = new PullTracker({ stallAfterMs: 5000, slowBelowBytesPerSecond: 1, now: () => now });
    tracker.observe({ kind: 'log', at: now, source: 't', event: { type: 'pull-started', component: 'containerd', image: 'nginx:1' } });
    now += 6000;
    expect(tracker.tick().map((t) => t.kind)).toEqual(['stalled']);
    const pods = [{ namespace: 'a', name: 'p', container: 'c', image: 'nginx:1', reason: 'ContainerCreating' }];
    const again = tracker.observe({ kind: 'pods', at: now, pods });
    expect(again).toHaveLength(1);
    expect(again[0]).toMatchObject({ kind: 'stalled', from: 'stalled', to: 'stalled' });
    expect(again[0]?.pull.pods).toEqual([{ namespace: 'a', name: 'p', container: 'c', reason: 'ContainerCreating' }]);
    expect(tracker.observe({ kind: 'pods', at: now, pods })).toHaveLength(0);
  });
});

describe('PullTracker re-attribution', () => {
  it('moves a blob guessed onto the only open pull once its labels name another repository', () => {
    let now = T0;
    const tracker = new PullTracker({ stallAfterMs: 5000, slowBelowBytesPerSecond: 1, now: () => now });
    const log = (image: string) => tracker.observe({ kind: 'log', at: now, source: 't', event: { type: 'pull-started', component: 'containerd', image } });
    const poll = (present: IngestStatus[]) => tracker.observe({ kind: 'ingests', at: now, runtime: 'containerd', source: 'fs', present, closed: [] });
    log('127.0.0.1:5000/a:v1');
    const a = { key: 'ka', ref: 'r', blobKind: 'layer' as const, digest: 'sha256:a', offset: 10, lastWriteAt: now };
    const b = { key: 'kb', ref: 'r', blobKind: 'layer' as const, digest: 'sha256:b', offset: 20, lastWriteAt: now };
    poll([a, b]); // no labels yet, and B's log line is late: both are guessed onto A
    now += 500;
    log('127.0.0.1:5000/b:v1');
    now += 500;
    poll([{ ...a, registry: '127.0.0.1', repository: 'a' }, { ...b, registry: '127.0.0.1', repository: 'b' }]);
    const recs = tracker.records();
    expect(recs.find((r) => r.image.endsWith('/a:v1'))?.layers.map((l) => l.digest)).toEqual(['sha256:a']);
    expect(recs.find((r) => r.image.endsWith('/b:v1'))?.layers.map((l) => l.digest)).toEqual(['sha256:b']);
    expect(recs.find((r) => r.image.endsWith('/b:v1'))?.bytesDone).toBe(20);
  });
});

describe('PullTracker and blobs whose origin is still being looked up', () => {
  it('waits for the labels instead of guessing, and drops a blob that commits before they arrive', () => {
    let now = T0;
    const tracker = new PullTracker({ stallAfterMs: 5000, slowBelowBytesPerSecond: 1, now: () => now, attributionWaitMs: 3000 });
    const poll = (present: IngestStatus[], closed: Array<{ key: string; committed: boolean }> = []) =>
      tracker.observe({ kind: 'ingests', at: now, runtime: 'containerd', source: 'fs', present, closed });
    tracker.observe({ kind: 'log', at: now, source: 't', event: { type: 'pull-started', component: 'containerd', image: '127.0.0.1:5000/b:v1' } });
    const small = { key: 'ks', ref: 'r', blobKind: 'layer' as const, digest: 'sha256:small-of-a', offset: 10, lastWriteAt: now, attributionPending: true };
    poll([small]);
    expect(tracker.records()[0]?.layers).toHaveLength(0); // not guessed onto B, the only open pull
    now += 1000;
    poll([], [{ key: 'ks', committed: true }]);
    expect(tracker.records()[0]?.layers).toHaveLength(0);
    // a pending blob whose labels never come is attributed by guess after the wait
    const big = { key: 'kb', ref: 'r', blobKind: 'layer' as const, digest: 'sha256:big', offset: 10, lastWriteAt: now, attributionPending: true };
    poll([big]);
    now += 3000;
    poll([big]);
    expect(tracker.records()[0]?.layers.map((l) => l.digest)).toEqual(['sha256:big']);
  });
});

describe('PullTracker while a blob waits for its labels', () => {
  it('does not call a pull stalled (or unpacking) while bytes move in a blob not yet attributed', () => {
    let now = T0;
    const tracker = new PullTracker({ stallAfterMs: 4000, slowBelowBytesPerSecond: 1, now: () => now, attributionWaitMs: 5000 });
    const transitions: string[] = [];
    const poll = (present: IngestStatus[]) => transitions.push(...tracker.observe({ kind: 'ingests', at: now, runtime: 'containerd', source: 'fs', present, closed: [] }).map((t) => t.kind));
    tracker.observe({ kind: 'log', at: now, source: 't', event: { type: 'pull-started', component: 'containerd', image: '127.0.0.1:5000/a:v1' } });
    let off = 0;
    for (let i = 0; i < 5; i++) {
      now += 1000; off += 1 << 20;
      poll([{ key: 'k', ref: 'r', blobKind: 'layer', digest: 'sha256:a', offset: off, lastWriteAt: now, attributionPending: true }]);
      transitions.push(...tracker.tick().map((t) => t.kind));
    }
    expect(transitions).not.toContain('stalled');
    expect(transitions).not.toContain('unpacking');
    // labels arrive: attached; then no byte for stall-after → stalled
    poll([{ key: 'k', ref: 'r', blobKind: 'layer', digest: 'sha256:a', offset: off, lastWriteAt: now, registry: '127.0.0.1', repository: 'a' }]);
    const lastByte = now;
    while (!transitions.includes('stalled')) { now += 500; poll([{ key: 'k', ref: 'r', blobKind: 'layer', digest: 'sha256:a', offset: off, lastWriteAt: lastByte, registry: '127.0.0.1', repository: 'a' }]); transitions.push(...tracker.tick().map((t) => t.kind)); }
    expect(now - lastByte).toBe(4000);
  });
});
