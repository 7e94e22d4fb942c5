import type { Logger } from '../common/log.js';
import type { PullTracker } from './detector/pull-tracker.js';
import type { Observation, RuntimeName } from './model/observations.js';
import type { TunePlan } from './tune/types.js';

const RUNTIMES: ReadonlySet<string> = new Set<RuntimeName>(['containerd', 'docker', 'cri-o']);

/** The runtime's effective pull-progress deadline from a plan: ms, or null when there is none. */
export function runtimeDeadlineMs(plan: TunePlan): number | null | undefined {
  const s = plan.settings.find((x) => x.id === 'runtime.pullProgressTimeout');
  if (!s) return undefined;
  if (!s.supported) return null;
  const v = s.effective.value;
  if (typeof v !== 'number') return undefined;
  return v > 0 ? v : null;
}

/**
 * The agent's view of `pullwatch tune plan`: computed lazily (the tune code loads only when asked
 * or once shortly after start), cached for a minute, and fed back to the detector as the runtime's
 * deadline so records and Events can say "runtime deadline 5m0s".
 */
export function createTunePlanner(o: {
  hostRoot: string; tracker: PullTracker; observe: (obs: Observation) => void; logger: Logger; cacheMs?: number;
}): { plan(): Promise<TunePlan>; stop(): void } {
  let cached: { at: number; plan: Promise<TunePlan> } | undefined;
  const cacheMs = o.cacheMs ?? 60_000;
  const plan = (): Promise<TunePlan> => {
    const now = Date.now();
    if (cached && now - cached.at < cacheMs) return cached.plan;
    const p = (async () => {
      const { computeTunePlan } = await import('./tune/plan.js');
      const result = await computeTunePlan({ hostRoot: o.hostRoot, history: o.tracker.records(true), now: new Date() });
      const name = result.runtime.name;
      if (RUNTIMES.has(name)) {
        const deadline = runtimeDeadlineMs(result);
        o.observe({
          kind: 'runtime', at: Date.now(),
          // Only the deadline: the version the runtime itself reports (socket) is better evidence
          // than the binary found under --host-root.
          info: { name: name as RuntimeName, ...(deadline !== undefined ? { pullDeadlineMs: deadline } : {}) },
        });
      }
      return result;
    })();
    cached = { at: now, plan: p };
    p.catch((err: unknown) => { o.logger.warn({ err: (err as Error).message }, 'tune plan failed'); cached = undefined; });
    return p;
  };
  const first = setTimeout(() => { plan().catch(() => undefined); }, 2000);
  first.unref();
  return { plan, stop: () => clearTimeout(first) };
}
