import { describe, expect, it } from 'vitest';
import { EventBatchSchema, HeartbeatSchema, describeZodError, jsonDepth, WIRE_LIMITS } from '../../../common/wire.js';
import type { PullRecord } from '../../../agent/model/pulls.js';

const now = '2026-11-21T09:00:00.000Z';
export const pull: PullRecord = {
  id: 'p1', image: 'docker.io/library/nginx:latest', registry: 'docker.io', repository: 'library/nginx',
  state: 'stalled', startedAt: now, updatedAt: now, lastProgressAt: now, idleSeconds: 61, rateBytesPerSecond: 0,
  bytesDone: 10, bytesTotal: null, layers: [], runtime: { name: 'containerd' }, pods: [], idleGapsMs: [],
};

describe('wire schemas', () => {
  it('accepts a valid batch and heartbeat', () => {
    expect(EventBatchSchema.safeParse({ node: 'n', agentVersion: '0.1.0', events: [{ id: 'e1', at: now, kind: 'stalled', pull }] }).success).toBe(true);
    expect(HeartbeatSchema.safeParse({ node: 'n', agentVersion: '1', runtime: { name: 'containerd', pullDeadlineMs: null }, pullsInFlight: [pull], eventsDropped: 0, queueDepth: 0, sourceErrors: 0, intervalSeconds: 30, at: now }).success).toBe(true);
  });
  it('names the failing field', () => {
    const r = EventBatchSchema.safeParse({ node: 'n', agentVersion: '0.1.0', events: [{ id: 'e1', at: now, kind: 'stalled', pull: { ...pull, bytesDone: 'a' } }] });
    expect(r.success).toBe(false);
    if (!r.success) expect(describeZodError(r.error)).toMatch(/^events\.0\.pull\.bytesDone: /);
  });
  it('rejects non-finite numbers, bad times, unknown kinds, too many events', () => {
    const bad = [
      { ...pull, idleSeconds: Infinity }, { ...pull, startedAt: 'yesterday' }, { ...pull, layers: new Array(WIRE_LIMITS.maxLayersPerPull + 1).fill(null) },
    ];
    for (const p of bad) expect(EventBatchSchema.safeParse({ node: 'n', agentVersion: '1', events: [{ id: 'e', at: now, kind: 'stalled', pull: p }] }).success).toBe(false);
    expect(EventBatchSchema.safeParse({ node: 'n', agentVersion: '1', events: [{ id: 'e', at: now, kind: 'exploded', pull }] }).success).toBe(false);
    const many = Array.from({ length: WIRE_LIMITS.maxEventsPerBatch + 1 }, (_, i) => ({ id: `e${i}`, at: now, kind: 'stalled', pull }));
    expect(EventBatchSchema.safeParse({ node: 'n', agentVersion: '1', events: many }).success).toBe(false);
  });
  it('bounds capture depth and size', () => {
    let deep: Record<string, unknown> = { leaf: 1 };
    for (let i = 0; i < 20; i++) deep = { d: deep };
    const r = EventBatchSchema.safeParse({ node: 'n', agentVersion: '1', events: [{ id: 'e', at: now, kind: 'stalled', pull, capture: deep }] });
    expect(r.success).toBe(false);
    if (!r.success) expect(describeZodError(r.error)).toContain('events.0.capture');
    const big = { blob: 'x'.repeat(WIRE_LIMITS.maxCaptureBytes) };
    expect(EventBatchSchema.safeParse({ node: 'n', agentVersion: '1', events: [{ id: 'e', at: now, kind: 'stalled', pull, capture: big }] }).success).toBe(false);
    expect(EventBatchSchema.safeParse({ node: 'n', agentVersion: '1', events: [{ id: 'e', at: now, kind: 'stalled', pull, capture: { ok: [1, 2] } }] }).success).toBe(true);
    expect(jsonDepth({ a: [{ b: 1 }] })).toBe(3);
  });
});
