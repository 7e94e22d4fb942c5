import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../../../common/log.js';
import type { IngestStatus, Observation } from '../../../agent/model/observations.js';
import { SourceHealth } from '../../../agent/sources/health.js';
import type { SourceContext } from '../../../agent/sources/source.js';

export interface TestCtx {
  ctx: SourceContext;
  observations: Observation[];
  health: SourceHealth;
  ingests(): Array<Extract<Observation, { kind: 'ingests' }>>;
  lastIngests(): Extract<Observation, { kind: 'ingests' }>;
  causes(): Record<string, number>;
}

export function testCtx(now: () => number = Date.now): TestCtx {
  const observations: Observation[] = [];
  const health = new SourceHealth(silentLogger());
  const ctx: SourceContext = { emit: (o) => observations.push(o), health, logger: silentLogger(), now };
  const ingests = () => observations.filter((o): o is Extract<Observation, { kind: 'ingests' }> => o.kind === 'ingests');
  return {
    ctx, observations, health, ingests,
    lastIngests: () => {
      const all = ingests();
      const last = all[all.length - 1];
      if (!last) throw new Error('no ingests observation emitted');
      return last;
    },
    causes: () => Object.fromEntries(health.snapshot().map((e) => [e.cause, e.count])),
  };
}

export function tempDir(prefix: string): { path: string; cleanup(): void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) };
}

/** Every number an ingest status carries is a finite, non-negative number (never NaN). */
export function assertSane(s: IngestStatus): void {
  for (const k of ['offset', 'total', 'startedAt', 'lastWriteAt'] as const) {
    const v = s[k];
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new Error(`${k} is ${String(v)} in ${JSON.stringify(s)}`);
  }
  if (s.total !== undefined && s.offset > s.total) throw new Error(`offset > total in ${JSON.stringify(s)}`);
}
