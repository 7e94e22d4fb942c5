/**
 * Incident grouping: pure logic, no I/O. Fed agent events (in ingest order) and periodic ticks with
 * an injected clock; emits notices (firing / update / resolved) and the incidents that changed.
 *
 * - pull-stall: one per (node, image); opened by stalled / slow / cancelled, resolved by
 *   resumed / unpacking / completed.
 * - registry: when ≥ registryNodes distinct nodes stall on one registry within registryWindowMs. It
 *   absorbs those nodes' pull-stall incidents (already-fired ones get one "resolved: grouped into …"
 *   notice; later stalls on that registry only join the registry incident, no separate alerts).
 * - agent-down: a node that missed its heartbeats (the caller decides who is overdue).
 * - flap suppression: a resolve waits flapWindowMs; a re-stall within it continues the incident.
 *   Updates are throttled to one per updateThrottleMs.
 * The whole state is a plain JSON value (state()/restore) so the store can persist it.
 */
import { randomUUID } from 'node:crypto';
import type { AgentEvent } from '../common/wire.js';
import { parseImageRef } from '../common/image-ref.js';
import { formatDuration } from '../common/duration.js';
import type { Incident, IncidentMember, Notice, NoticeType } from './model.js';

export interface EngineConfig {
  registryNodes: number;
  registryWindowMs: number;
  flapWindowMs: number;
  updateThrottleMs: number;
  /** Id generator (tests inject a deterministic one). */
  newId?: () => string;
}

export const DEFAULT_ENGINE_CONFIG: EngineConfig = {
  registryNodes: 3,
  registryWindowMs: 5 * 60_000,
  flapWindowMs: 60_000,
  updateThrottleMs: 5 * 60_000,
};

export interface EngineState {
  version: 1;
  /** Open incidents (including ones waiting out the flap window). */
  incidents: Incident[];
  /** registry → "node|image" → last stall time (ms). */
  registryStalls: Record<string, Record<string, number>>;
}

export interface OverdueNode { node: string; lastHeartbeatAt: string }

const MAX_MEMBERS = 200;
const MAX_NODES = 1000;
const MAX_PODS = 20;
const BAD = new Set(['stalled', 'slow', 'cancelled']);
const GOOD = new Set(['resumed', 'unpacking', 'completed']);

export class IncidentEngine {
  private readonly cfg: EngineConfig;
  private readonly newId: () => string;
  private incidents = new Map<string, Incident>(); // by key
  private registryStalls = new Map<string, Map<string, number>>();
  private notices: Notice[] = [];
  private changed = new Map<string, Incident>(); // by id

  constructor(cfg: Partial<EngineConfig> = {}, state?: EngineState | null) {
    this.cfg = { ...DEFAULT_ENGINE_CONFIG, ...cfg };
    this.newId = this.cfg.newId ?? randomUUID;
    if (state && state.version === 1) {
      for (const inc of state.incidents) this.incidents.set(inc.key, inc);
      for (const [reg, m] of Object.entries(state.registryStalls)) this.registryStalls.set(reg, new Map(Object.entries(m)));
    }
  }

  state(): EngineState {
    const registryStalls: EngineState['registryStalls'] = {};
    for (const [reg, m] of this.registryStalls) if (m.size) registryStalls[reg] = Object.fromEntries(m);
    return { version: 1, incidents: [...this.incidents.values()], registryStalls };
  }

  openIncidents(): Incident[] { return [...this.incidents.values()]; }

  /** Notices and changed incidents since the last call. */
  takeOutput(): { notices: Notice[]; changed: Incident[] } {
    const out = { notices: this.notices, changed: [...this.changed.values()] };
    this.notices = [];
    this.changed = new Map();
    return out;
  }

  applyEvent(node: string, ev: AgentEvent, nowMs: number): void {
    const pull = ev.pull;
    const registry = pull.registry || parseImageRef(pull.image).registry;
    const memberKey = `${node}|${pull.image}`;
    const member = toMember(node, ev);
    const atMs = clampTime(Date.parse(ev.at), nowMs);
    const regInc = this.incidents.get(`registry:${registry}`);
    const nodeKey = `pull-stall:${memberKey}`;

    if (BAD.has(ev.kind)) {
      this.stallsOf(registry).set(memberKey, atMs);
      if (regInc) {
        this.upsertMember(regInc, member, nowMs);
        return;
      }
      const existing = this.incidents.get(nodeKey);
      if (existing) {
        this.upsertMember(existing, member, nowMs);
        this.checkRegistry(registry, nowMs);
      } else {
        const inc = this.open('pull-stall', nodeKey, nowMs, { registry, image: pull.image, node, members: [member] });
        this.checkRegistry(registry, nowMs);
        // fire only if it was not grouped into a registry incident right away
        if (inc.state === 'open') this.emit(inc, 'firing', nowMs);
      }
      return;
    }

    const good = GOOD.has(ev.kind);
    if (good) this.stallsOf(registry).delete(memberKey);
    const inc = regInc?.members.some((m) => keyOf(m) === memberKey) ? regInc : this.incidents.get(nodeKey);
    if (!inc) return;
    if (!good) {
      // started / failed: refresh the facts, keep the member's stalled-ness
      member.active = inc.members.find((m) => keyOf(m) === memberKey)?.active ?? false;
    }
    this.upsertMember(inc, member, nowMs);
    if (good && inc.members.every((m) => !m.active) && !inc.resolvingSince) {
      inc.resolvingSince = iso(nowMs);
      inc.resolution = ev.kind === 'completed' ? 'pull completed' : ev.kind === 'unpacking' ? 'download finished' : 'bytes flowing again';
      this.touch(inc, nowMs);
      if (this.cfg.flapWindowMs <= 0) this.resolve(inc, nowMs, inc.resolution);
    }
  }

  /** Periodic: finalize resolves past the flap window, flush throttled updates, agent-down. */
  tick(nowMs: number, overdue: OverdueNode[]): void {
    const overdueNodes = new Map(overdue.map((o) => [o.node, o]));
    for (const inc of [...this.incidents.values()]) {
      if (inc.kind === 'agent-down') {
        if (inc.node && !overdueNodes.has(inc.node)) this.resolve(inc, nowMs, 'heartbeats resumed');
        continue;
      }
      if (inc.resolvingSince && nowMs - Date.parse(inc.resolvingSince) >= this.cfg.flapWindowMs) {
        this.resolve(inc, nowMs, inc.resolution ?? 'resolved');
      } else if (inc.pendingUpdate) {
        this.maybeUpdate(inc, nowMs);
      }
    }
    for (const o of overdue) {
      const key = `agent-down:${o.node}`;
      if (this.incidents.has(key)) continue;
      const inc = this.open('agent-down', key, nowMs, { node: o.node, members: [] });
      inc.summary = `pullwatch agent on ${o.node} stopped sending heartbeats (last at ${o.lastHeartbeatAt})`;
      this.emit(inc, 'firing', nowMs);
    }
    for (const [reg, m] of this.registryStalls) {
      for (const [k, at] of m) if (nowMs - at > this.cfg.registryWindowMs && !this.isActive(reg, k)) m.delete(k);
      if (!m.size) this.registryStalls.delete(reg);
    }
  }

  // ---------------------------------------------------------------------------------------------

  private isActive(registry: string, memberKey: string): boolean {
    const inc = this.incidents.get(`registry:${registry}`) ?? this.incidents.get(`pull-stall:${memberKey}`);
    return !!inc?.members.some((m) => keyOf(m) === memberKey && m.active);
  }

  private stallsOf(registry: string): Map<string, number> {
    let m = this.registryStalls.get(registry);
    if (!m) { m = new Map(); this.registryStalls.set(registry, m); }
    return m;
  }

  private checkRegistry(registry: string, nowMs: number): void {
    const stalls = this.registryStalls.get(registry);
    if (!stalls) return;
    const nodes = new Set<string>();
    const keys: string[] = [];
    for (const [k, at] of stalls) {
      if (nowMs - at > this.cfg.registryWindowMs) continue;
      const inc = this.incidents.get(`pull-stall:${k}`);
      if (!inc || !inc.members.some((m) => m.active)) continue;
      nodes.add(k.slice(0, k.indexOf('|')));
      keys.push(k);
    }
    if (nodes.size < this.cfg.registryNodes) return;
    const members: IncidentMember[] = [];
    for (const k of keys) {
      const inc = this.incidents.get(`pull-stall:${k}`);
      if (inc) members.push(...inc.members);
    }
    const reg = this.open('registry', `registry:${registry}`, nowMs, { registry, members });
    for (const k of keys) {
      const inc = this.incidents.get(`pull-stall:${k}`);
      if (!inc) continue;
      inc.absorbedBy = reg.id;
      this.resolve(inc, nowMs, `grouped into registry incident ${reg.id} (${registry})`, inc.noticeSeq > 0);
    }
    this.emit(reg, 'firing', nowMs);
  }

  private open(kind: Incident['kind'], key: string, nowMs: number,
    f: { registry?: string; image?: string; node?: string; members: IncidentMember[] }): Incident {
    const inc: Incident = {
      id: this.newId(), kind, key, state: 'open', openedAt: iso(nowMs), updatedAt: iso(nowMs),
      nodes: [], members: [], summary: '', noticeSeq: 0,
      ...(f.registry !== undefined ? { registry: f.registry } : {}),
      ...(f.image !== undefined ? { image: f.image } : {}),
      ...(f.node !== undefined ? { node: f.node, nodes: [f.node] } : {}),
    };
    for (const m of f.members) addMember(inc, m);
    inc.summary = summarize(inc);
    this.incidents.set(key, inc);
    this.touch(inc, nowMs);
    return inc;
  }

  private upsertMember(inc: Incident, m: IncidentMember, nowMs: number): void {
    const i = inc.members.findIndex((x) => keyOf(x) === keyOf(m));
    const prev = i >= 0 ? inc.members[i] : undefined;
    const meaningful = !prev || prev.state !== m.state || prev.active !== m.active || prev.lastEvent !== m.lastEvent;
    if (prev) {
      inc.members[i] = { ...m, recommendation: m.recommendation ?? prev.recommendation };
    } else {
      addMember(inc, m);
    }
    if (m.active && inc.resolvingSince) {
      // flap: the pull stalled again before the resolve was final — same incident, no new alert
      delete inc.resolvingSince;
      delete inc.resolution;
    }
    if (meaningful) inc.summary = summarize(inc);
    this.touch(inc, nowMs);
    // a member going quiet is not an update: when all are quiet the resolve path speaks
    if (meaningful && !inc.resolvingSince && inc.members.some((x) => x.active)) this.maybeUpdate(inc, nowMs, true);
  }

  private maybeUpdate(inc: Incident, nowMs: number, changed = false): void {
    if (changed) inc.pendingUpdate = true;
    if (!inc.pendingUpdate || inc.noticeSeq === 0 || inc.absorbedBy) return;
    const last = inc.lastNoticeAt ? Date.parse(inc.lastNoticeAt) : 0;
    if (nowMs - last >= this.cfg.updateThrottleMs) this.emit(inc, 'update', nowMs);
  }

  private resolve(inc: Incident, nowMs: number, why: string, notify = true): void {
    inc.state = 'resolved';
    inc.resolvedAt = iso(nowMs);
    inc.resolution = why;
    delete inc.resolvingSince;
    delete inc.pendingUpdate;
    for (const m of inc.members) m.active = false;
    this.incidents.delete(inc.key);
    this.touch(inc, nowMs);
    if (notify && inc.noticeSeq > 0) this.emit(inc, 'resolved', nowMs);
  }

  private emit(inc: Incident, type: NoticeType, nowMs: number): void {
    inc.noticeSeq += 1;
    inc.lastNoticeAt = iso(nowMs);
    delete inc.pendingUpdate;
    this.touch(inc, nowMs);
    this.notices.push({ type, id: `${inc.id}:${inc.noticeSeq}`, at: iso(nowMs), incident: structuredClone(inc) });
  }

  private touch(inc: Incident, nowMs: number): void {
    inc.updatedAt = iso(nowMs);
    this.changed.set(inc.id, inc);
  }
}

function addMember(inc: Incident, m: IncidentMember): void {
  if (inc.members.length < MAX_MEMBERS) inc.members.push(m);
  if (!inc.nodes.includes(m.node) && inc.nodes.length < MAX_NODES) inc.nodes.push(m.node);
}

function keyOf(m: IncidentMember): string { return `${m.node}|${m.image}`; }

function toMember(node: string, ev: AgentEvent): IncidentMember {
  const p = ev.pull;
  const m: IncidentMember = {
    node, image: p.image, pullId: p.id, state: p.state, lastEvent: ev.kind,
    bytesDone: p.bytesDone, bytesTotal: p.bytesTotal, lastProgressAt: p.lastProgressAt,
    pods: p.pods.slice(0, MAX_PODS), runtime: p.runtime, active: BAD.has(ev.kind),
  };
  if (p.runtimeDeadlineMs !== undefined) m.runtimeDeadlineMs = p.runtimeDeadlineMs;
  const rec = recommendationOf(ev.capture);
  if (rec) m.recommendation = rec;
  return m;
}

/** The agent's recommendation from a stall capture: `recommendation` (text) or `recommendedDeadlineMs`. */
export function recommendationOf(capture: Record<string, unknown> | undefined): string | undefined {
  if (!capture) return undefined;
  const r = capture.recommendation;
  if (typeof r === 'string' && r.trim()) return r.trim().slice(0, 500);
  const ms = capture.recommendedDeadlineMs;
  if (typeof ms === 'number' && Number.isFinite(ms) && ms > 0) return `set the runtime's pull progress deadline to ${formatDuration(ms)}`;
  return undefined;
}

function summarize(inc: Incident): string {
  const active = inc.members.filter((m) => m.active);
  switch (inc.kind) {
    case 'registry':
      return `${new Set((active.length ? active : inc.members).map((m) => m.node)).size} nodes stalled pulling from ${inc.registry}`;
    case 'pull-stall': {
      const m = inc.members[0];
      const verb = m?.lastEvent === 'cancelled' ? `was cancelled by ${m.runtime.name} after stalling`
        : m?.state === 'slow' ? 'is crawling' : 'stalled';
      return `Pull of ${inc.image} ${verb} on ${inc.node}`;
    }
    case 'agent-down':
      return inc.summary || `pullwatch agent on ${inc.node} stopped sending heartbeats`;
  }
}

function clampTime(ms: number, nowMs: number): number {
  return Number.isFinite(ms) ? Math.min(ms, nowMs) : nowMs;
}

function iso(ms: number): string { return new Date(ms).toISOString(); }
