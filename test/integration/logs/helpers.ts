import { silentLogger } from '../../../common/log.js';
import type { Observation, PullLogEvent } from '../../../agent/model/observations.js';
import { SourceHealth } from '../../../agent/sources/health.js';
import type { SourceContext } from '../../../agent/sources/source.js';

export interface TestContext extends SourceContext {
  observations: Array<Extract<Observation, { kind: 'log' }>>;
  events(): PullLogEvent[];
  healthCount(cause: string): number;
}

export function testContext(): TestContext {
  const observations: TestContext['observations'] = [];
  const health = new SourceHealth(silentLogger());
  return {
    observations,
    emit: (o) => { if (o.kind === 'log') observations.push(o); },
    health,
    logger: silentLogger(),
    now: () => Date.now(),
    events: () => observations.map((o) => o.event),
    healthCount: (cause) => health.snapshot().filter((e) => e.cause === cause).reduce((n, e) => n + e.count, 0),
  };
}

/** Polls `cond` until true or the deadline; fails with `what` (generous for a loaded 2-core CI machine). */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 15_000, stepMs = 25): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
