import { describe, expect, it } from 'vitest';
import { recommendDeadline, percentile, evidenceByRegistry, checkOverride, K, MIN_COMPLETED } from '../../../agent/tune/recommend.js';
import { TuneError, type HistoryPull } from '../../../agent/tune/types.js';
import type { PullRecord } from '../../../agent/model/pulls.js';
import { pulls } from './helpers.js';

describe('percentile', () => {
  it('uses nearest rank', () => {
    expect(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 99)).toBe(10);
    expect(percentile([5], 99)).toBe(5);
    expect(percentile(Array.from({ length: 200 }, (_, i) => i + 1), 99)).toBe(198);
    expect(percentile([], 99)).toBe(0);
  });
});

describe('recommendDeadline', () => {
  const base = { runtime: 'containerd' as const, family: '1.7.10+' as const };

  it('falls back to 5m with no history and says why', () => {
    const r = recommendDeadline({ ...base, history: null, historyNote: 'no history (agent unreachable)' });
    expect(r.valueMs).toBe(300_000);
    expect(r.basis).toBe('default');
    expect(r.reason).toContain('agent unreachable');
  });

  it('falls back to 5m with fewer than 20 completed pulls', () => {
    const r = recommendDeadline({ ...base, history: pulls('r.example', MIN_COMPLETED - 1, [90_000]) });
    expect(r.basis).toBe('default');
    expect(r.valueMs).toBe(300_000);
    expect(r.reason).toContain(`${MIN_COMPLETED - 1} completed`);
  });

  it('counts only completed pulls (failed and in-flight do not count)', () => {
    const h = [...pulls('r', 19, [10_000]), ...pulls('r', 10, [500_000], { state: 'failed' })];
    expect(recommendDeadline({ ...base, history: h }).basis).toBe('default');
  });

  it('K × p99 idle gap, rounded up to 30s', () => {
    // gaps of 70s in every pull: 3 × 70s = 3m30s exactly
    const r = recommendDeadline({ ...base, history: pulls('quay.io', 25, [2_000, 70_000]) });
    expect(r.basis).toBe('evidence');
    expect(r.p99IdleGapMs).toBe(70_000);
    expect(r.valueMs).toBe(K * 70_000);
    const r2 = recommendDeadline({ ...base, history: pulls('quay.io', 25, [71_000]) });
    expect(r2.valueMs).toBe(240_000); // 3m33s → 4m0s
  });

  it('clamps to 1m and 30m', () => {
    expect(recommendDeadline({ ...base, history: pulls('a', 30, [1_500]) }).valueMs).toBe(60_000);
    expect(recommendDeadline({ ...base, history: pulls('a', 30, []) }).valueMs).toBe(60_000);
    const big = recommendDeadline({ ...base, history: pulls('a', 30, [20 * 60_000]) });
    expect(big.valueMs).toBe(30 * 60_000);
    expect(big.reason).toContain('capped at 30m');
  });

  it('takes the slowest registry, per registry', () => {
    const h = [...pulls('fast.example', 40, [2_000]), ...pulls('slow.example', 5, [120_000])];
    const r = recommendDeadline({ ...base, history: h });
    expect(r.perRegistry.map((x) => x.registry)).toEqual(['slow.example', 'fast.example']);
    expect(r.valueMs).toBe(360_000);
    expect(r.reason).toContain('slow.example');
    expect(r.notes.join(' ')).toContain('slow.example: only 5 completed');
  });

  it('override wins, harmful overrides are refused', () => {
    expect(recommendDeadline({ ...base, history: null, overrideMs: 600_000 })).toMatchObject({ valueMs: 600_000, basis: 'override' });
    expect(() => recommendDeadline({ runtime: 'containerd', family: '2.1+', history: null, overrideMs: 0 })).toThrow(TuneError);
    expect(() => recommendDeadline({ runtime: 'containerd', family: '2.1+', history: null, overrideMs: 0 })).toThrow(/14158/);
    expect(() => checkOverride(5_000, 'containerd', '1.7.10+')).toThrow(/below 10s/);
    expect(checkOverride(0, 'cri-o', 'crio-default-0s').join(' ')).toContain('disables');
    const short = recommendDeadline({ ...base, history: pulls('a', 30, [90_000]), overrideMs: 60_000 });
    expect(short.notes.join(' ')).toContain('shorter than the p99 idle gap');
  });
});

describe('types', () => {
  it('the agent\'s PullRecord[] is accepted as history', () => {
    const records: PullRecord[] = [];
    const h: HistoryPull[] = records;
    expect(recommendDeadline({ runtime: 'containerd', family: '2.0', history: h }).basis).toBe('default');
  });
});

describe('evidenceByRegistry', () => {
  it('reports rates, largest layer and runtime cancels', () => {
    const h = [...pulls('r', 3, [5_000]), ...pulls('r', 2, [], { state: 'cancelled-by-runtime' })];
    const [e] = evidenceByRegistry(h);
    expect(e).toMatchObject({ registry: 'r', completedPulls: 3, idleGaps: 3, largestLayerBytes: 30_000_000, cancelledByRuntime: 2, medianRateBytesPerSecond: 5_000_000 });
  });
});
