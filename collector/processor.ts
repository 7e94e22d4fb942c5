/**
 * One incident-processing step: the stored engine state + unprocessed events + overdue nodes go
 * through the pure engine; its notices become one outbox row per configured notifier.
 */
import { IncidentEngine, type EngineConfig } from './incidents.js';
import type { Notice } from './model.js';
import type { ProcessInput, ProcessOutput } from './store/store.js';

export function processStep(cfg: Partial<EngineConfig>, notifiers: readonly string[], nowMs: number,
  onNotice?: (n: Notice) => void): (input: ProcessInput) => ProcessOutput {
  return (input) => {
    const engine = new IncidentEngine(cfg, input.state);
    for (const e of input.events) engine.applyEvent(e.node, e.event, nowMs);
    engine.tick(nowMs, input.overdue);
    const { notices, changed } = engine.takeOutput();
    if (onNotice) for (const n of notices) onNotice(n);
    return {
      state: engine.state(),
      incidents: changed,
      outbox: notices.flatMap((notice) => notifiers.map((notifier) => ({ notifier, notice }))),
    };
  };
}
