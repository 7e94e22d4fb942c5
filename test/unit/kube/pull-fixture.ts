import type { LayerRecord, PodRef, PullRecord, Transition, TransitionKind, PullState } from '../../../agent/model/pulls.js';

/** A pull record as the detector would hand it to sinks: one layer stalled at 4.2 MB of 40 MB. */
export function stalledPull(pods: PodRef[], over: Partial<PullRecord> = {}): PullRecord {
  const layer: LayerRecord = {
    digest: 'sha256:ab12cd34ef5678901234567890abcdef1234567890abcdef1234567890abcdef',
    kind: 'layer',
    state: 'stalled',
    bytesDone: 4_200_000,
    bytesTotal: 40_000_000,
    idleSeconds: 75,
    rateBytesPerSecond: 0,
    startedAt: '2024-11-07T14:02:11.000Z',
  };
  const done: LayerRecord = { ...layer, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000001', state: 'committed', bytesDone: 1000, bytesTotal: 1000 };
  return {
    id: 'registry.example.com/team/web:1.4.2@1730988131000',
    image: 'registry.example.com/team/web:1.4.2',
    registry: 'registry.example.com',
    repository: 'team/web',
    state: 'stalled',
    startedAt: '2024-11-07T14:02:11.000Z',
    updatedAt: '2024-11-07T14:03:26.000Z',
    lastProgressAt: '2024-11-07T14:02:11.000Z',
    idleSeconds: 75,
    rateBytesPerSecond: 0,
    bytesDone: 4_201_000,
    bytesTotal: 40_001_000,
    layers: [done, layer],
    runtime: { name: 'containerd', version: '1.7.24' },
    runtimeDeadlineMs: 300_000,
    pods,
    idleGapsMs: [],
    ...over,
  };
}

export function transition(kind: TransitionKind, pull: PullRecord, at = '2024-11-07T14:03:26.000Z'): Transition {
  const to: Record<TransitionKind, PullState> = {
    started: 'downloading', slow: 'slow', stalled: 'stalled', resumed: 'downloading', unpacking: 'unpacking',
    completed: 'completed', failed: 'failed', cancelled: 'cancelled-by-runtime',
  };
  return { kind, from: 'downloading', to: to[kind], at, pull: { ...pull, state: to[kind] } };
}
