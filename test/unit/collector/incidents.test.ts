import { describe, expect, it } from 'vitest';
import { IncidentEngine, recommendationOf, type EngineConfig } from '../../../collector/incidents.js';
import type { Notice } from '../../../collector/model.js';
import { agentEvent } from '../../integration/collector/fixtures.js';

const T0 = Date.parse('2026-11-21T09:00:00.000Z');
const REG = 'registry.example.com:5000';
const img = (n: number) => `${REG}/team/app${n}:1`;

function engine(over: Partial<EngineConfig> = {}) {
  let n = 0;
  return new IncidentEngine({ registryNodes: 3, registryWindowMs: 300_000, flapWindowMs: 60_000, updateThrottleMs: 300_000, newId: () => `inc-${++n}`, ...over });
}
const types = (ns: Notice[]) => ns.map((n) => `${n.type}:${n.incident.kind}:${n.incident.node ?? n.incident.registry}`);

describe('incident engine', () => {
  it('opens one pull-stall incident per (node, image), resolves after the flap window', () => {
    const e = engine();
    e.applyEvent('n1', agentEvent('stalled', { image: img(1) }, T0), T0);
    e.applyEvent('n1', agentEvent('stalled', { image: img(1) }, T0 + 1000), T0 + 1000); // same pull again: no new alert
    let out = e.takeOutput();
    expect(types(out.notices)).toEqual(['firing:pull-stall:n1']);
    expect(out.notices[0]?.incident.summary).toBe(`Pull of ${img(1)} stalled on n1`);
    e.applyEvent('n1', agentEvent('completed', { image: img(1) }, T0 + 5000), T0 + 5000);
    e.tick(T0 + 30_000, []);
    expect(e.takeOutput().notices).toEqual([]); // waiting out the flap window
    e.tick(T0 + 65_000, []);
    out = e.takeOutput();
    expect(types(out.notices)).toEqual(['resolved:pull-stall:n1']);
    expect(out.notices[0]?.incident.resolution).toBe('pull completed');
    expect(out.notices[0]?.incident.state).toBe('resolved');
    expect(e.openIncidents()).toEqual([]);
  });

  it('flap: a re-stall within the window continues the same incident with no new firing', () => {
    const e = engine();
    e.applyEvent('n1', agentEvent('stalled', { image: img(1) }, T0), T0);
    e.applyEvent('n1', agentEvent('resumed', { image: img(1) }, T0 + 10_000), T0 + 10_000);
    e.applyEvent('n1', agentEvent('stalled', { image: img(1) }, T0 + 20_000), T0 + 20_000);
    e.tick(T0 + 100_000, []);
    const out = e.takeOutput();
    expect(types(out.notices)).toEqual(['firing:pull-stall:n1']);
    expect(e.openIncidents()).toHaveLength(1);
    expect(e.openIncidents()[0]?.id).toBe('inc-1');
  });

  it('throttles updates: one per updateThrottle, flushed on tick', () => {
    const e = engine();
    e.applyEvent('n1', agentEvent('slow', { image: img(1) }, T0), T0);
    e.applyEvent('n1', agentEvent('stalled', { image: img(1) }, T0 + 1000), T0 + 1000);
    e.applyEvent('n1', agentEvent('cancelled', { image: img(1) }, T0 + 2000), T0 + 2000);
    expect(types(e.takeOutput().notices)).toEqual(['firing:pull-stall:n1']);
    e.tick(T0 + 200_000, []);
    expect(e.takeOutput().notices).toEqual([]);
    e.tick(T0 + 301_000, []);
    const out = e.takeOutput().notices;
    expect(types(out)).toEqual(['update:pull-stall:n1']);
    expect(out[0]?.incident.summary).toBe(`Pull of ${img(1)} was cancelled by containerd after stalling on n1`);
  });

  it('groups ≥3 nodes stalling on one registry within the window into one registry incident', () => {
    const e = engine();
    e.applyEvent('n1', agentEvent('stalled', { image: img(1) }, T0), T0);
    e.applyEvent('n2', agentEvent('stalled', { image: img(2) }, T0 + 60_000), T0 + 60_000);
    expect(types(e.takeOutput().notices)).toEqual(['firing:pull-stall:n1', 'firing:pull-stall:n2']);
    e.applyEvent('n3', agentEvent('stalled', { image: img(3) }, T0 + 120_000), T0 + 120_000);
    const out = e.takeOutput().notices;
    // the two fired node incidents say they were grouped; n3 never alerts on its own
    expect(types(out)).toEqual([`resolved:pull-stall:n1`, `resolved:pull-stall:n2`, `firing:registry:${REG}`]);
    expect(out[0]?.incident.absorbedBy).toBe(out[2]?.incident.id);
    expect(out[2]?.incident.nodes).toEqual(['n1', 'n2', 'n3']);
    expect(out[2]?.incident.summary).toBe(`3 nodes stalled pulling from ${REG}`);
    // a fourth node joins the registry incident quietly (update throttled)
    e.applyEvent('n4', agentEvent('stalled', { image: img(4) }, T0 + 130_000), T0 + 130_000);
    expect(e.takeOutput().notices).toEqual([]);
    expect(e.openIncidents().map((i) => i.kind)).toEqual(['registry']);
    // all resume → one resolve after the flap window
    for (const [n, i] of [['n1', 1], ['n2', 2], ['n3', 3], ['n4', 4]] as const) e.applyEvent(n, agentEvent('resumed', { image: img(i) }, T0 + 140_000), T0 + 140_000);
    e.tick(T0 + 201_000, []);
    const res = e.takeOutput().notices;
    expect(types(res)).toEqual([`resolved:registry:${REG}`]);
    expect(res[0]?.incident.nodes).toEqual(['n1', 'n2', 'n3', 'n4']);
  });

  it('does not group stalls further apart than the window, nor one node with many images', () => {
    const e = engine();
    e.applyEvent('n1', agentEvent('stalled', { image: img(1) }, T0), T0);
    e.applyEvent('n1', agentEvent('stalled', { image: img(2) }, T0), T0);
    e.applyEvent('n1', agentEvent('stalled', { image: img(3) }, T0), T0);
    e.applyEvent('n2', agentEvent('stalled', { image: img(1) }, T0 + 400_000), T0 + 400_000);
    e.applyEvent('n3', agentEvent('stalled', { image: img(1) }, T0 + 400_000), T0 + 400_000);
    const kinds = e.takeOutput().notices.map((n) => n.incident.kind);
    expect(kinds).toEqual(['pull-stall', 'pull-stall', 'pull-stall', 'pull-stall', 'pull-stall']);
  });

  it('agent-down when overdue, resolved when heartbeats return; state survives a save/restore', () => {
    const e = engine();
    e.tick(T0, [{ node: 'n9', lastHeartbeatAt: new Date(T0 - 100_000).toISOString() }]);
    e.tick(T0 + 1000, [{ node: 'n9', lastHeartbeatAt: new Date(T0 - 100_000).toISOString() }]);
    expect(types(e.takeOutput().notices)).toEqual(['firing:agent-down:n9']);
    const restored = new IncidentEngine({ newId: () => 'x' }, JSON.parse(JSON.stringify(e.state())));
    restored.tick(T0 + 2000, []);
    const out = restored.takeOutput().notices;
    expect(types(out)).toEqual(['resolved:agent-down:n9']);
    expect(out[0]?.incident.resolution).toBe('heartbeats resumed');
  });

  it('ignores resumes and completions for pulls it never saw stall', () => {
    const e = engine();
    e.applyEvent('n1', agentEvent('started', { image: img(1) }, T0), T0);
    e.applyEvent('n1', agentEvent('resumed', { image: img(1) }, T0), T0);
    e.applyEvent('n1', agentEvent('completed', { image: img(1) }, T0), T0);
    e.tick(T0 + 1_000_000, []);
    expect(e.takeOutput()).toEqual({ notices: [], changed: [] });
  });

  it('keeps a failed pull stalled; flap window 0 resolves at once', () => {
    const e = engine({ flapWindowMs: 0 });
    e.applyEvent('n1', agentEvent('stalled', { image: img(1) }, T0), T0);
    e.applyEvent('n1', agentEvent('failed', { image: img(1) }, T0 + 1), T0 + 1);
    expect(e.openIncidents()[0]?.members[0]?.active).toBe(true);
    e.applyEvent('n1', agentEvent('completed', { image: img(1) }, T0 + 2), T0 + 2);
    expect(types(e.takeOutput().notices)).toEqual(['firing:pull-stall:n1', 'resolved:pull-stall:n1']);
  });

  it('takes the agent recommendation from the capture', () => {
    expect(recommendationOf({ recommendedDeadlineMs: 150_000 })).toBe("set the runtime's pull progress deadline to 2m30s");
    expect(recommendationOf({ recommendation: ' raise image_pull_progress_timeout ' })).toBe('raise image_pull_progress_timeout');
    expect(recommendationOf({ other: 1 })).toBeUndefined();
    const e = engine();
    e.applyEvent('n1', agentEvent('stalled', { image: img(1) }, T0, { capture: { recommendedDeadlineMs: 120_000 } }), T0);
    expect(e.takeOutput().notices[0]?.incident.members[0]?.recommendation).toBe("set the runtime's pull progress deadline to 2m0s");
  });
});
