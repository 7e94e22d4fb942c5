/** Shared builders for collector tests: pull records, agent events, heartbeats. */
import { randomUUID } from 'node:crypto';
import type { PullRecord, TransitionKind, PullState } from '../../../agent/model/pulls.js';
import type { AgentEvent, Heartbeat } from '../../../common/wire.js';

const STATE_OF: Record<TransitionKind, PullState> = {
  started: 'downloading', slow: 'slow', stalled: 'stalled', resumed: 'downloading', unpacking: 'unpacking',
  completed: 'completed', failed: 'failed', cancelled: 'cancelled-by-runtime',
};

export function pullRecord(over: Partial<PullRecord> = {}, atMs = Date.now()): PullRecord {
  const at = new Date(atMs).toISOString();
  const image = over.image ?? 'registry.example.com:5000/team/app:1.2.3';
  const slash = image.indexOf('/');
  return {
    id: `${image}@${at}`, image, registry: image.slice(0, slash), repository: image.slice(slash + 1).replace(/:.*$/, ''),
    state: 'downloading', startedAt: at, updatedAt: at, lastProgressAt: at, idleSeconds: 0, rateBytesPerSecond: 1000,
    bytesDone: 40_000_000, bytesTotal: 88_270_000, layers: [], runtime: { name: 'containerd', version: '1.6.20' },
    runtimeDeadlineMs: null, pods: [{ namespace: 'default', name: 'web-7d9f', container: 'app', reason: 'ContainerCreating' }],
    idleGapsMs: [], ...over,
  };
}

export function agentEvent(kind: TransitionKind, over: Partial<PullRecord> = {}, atMs = Date.now(), extra: Partial<AgentEvent> = {}): AgentEvent {
  const pull = pullRecord({ state: STATE_OF[kind], ...over }, atMs);
  if (kind === 'stalled') { pull.idleSeconds = 75; pull.rateBytesPerSecond = 0; pull.lastProgressAt = new Date(atMs - 75_000).toISOString(); }
  return { id: randomUUID(), at: new Date(atMs).toISOString(), kind, pull, ...extra };
}

export function heartbeat(node: string, over: Partial<Heartbeat> = {}, atMs = Date.now()): Heartbeat {
  return {
    node, agentVersion: '0.1.0', runtime: { name: 'containerd', version: '1.6.20', pullDeadlineMs: null }, pullsInFlight: [],
    eventsDropped: 0, queueDepth: 0, sourceErrors: 0, intervalSeconds: 30, at: new Date(atMs).toISOString(), ...over,
  };
}

/** Polls until fn returns a truthy value (robust on a loaded machine); throws with `what` on timeout. */
export async function waitFor<T>(what: string, fn: () => Promise<T> | T, timeoutMs = 20_000, everyMs = 25): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v as NonNullable<T>;
    } catch (e) { last = e; }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
