/**
 * SQLite store (better-sqlite3, WAL): the default, embedded, for one collector process.
 * better-sqlite3 is synchronous; each method is one short transaction.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import type { AgentEvent, Heartbeat } from '../../common/wire.js';
import type { Incident, StallBucket } from '../model.js';
import type { EngineState } from '../incidents.js';
import { MIGRATIONS } from './migrations.js';
import {
  eventRow, incidentRow, latestPulls, nodeInfo, nodeRow, parseJson, persistedState, type NodeRowOut,
} from './rows.js';
import type {
  InsertResult, OutboxResult, OutboxRow, OutboxStats, ProcessInput, ProcessOutput, PullView, RetentionResult, Store,
} from './store.js';
import type { Notice } from '../model.js';
import type { PullRecord } from '../../agent/model/pulls.js';

interface OutboxDbRow { id: number; notifier: string; incident_id: string; body: string; attempts: number; created_ms: number }

export class SqliteStore implements Store {
  readonly kind = 'sqlite' as const;
  private readonly db: Database.Database;
  private cache: { version: number; state: EngineState } | null = null;
  private stmts: ReturnType<SqliteStore['prepare']> | null = null;

  constructor(path: string) {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    this.db = new Database(path);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.pragma('busy_timeout = 5000');
  }

  async migrate(): Promise<void> {
    this.db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_ms BIGINT NOT NULL)');
    const apply = this.db.transaction(() => {
      const done = new Set((this.db.prepare('SELECT version FROM schema_migrations').all() as { version: number }[]).map((r) => r.version));
      for (const m of MIGRATIONS) {
        if (done.has(m.version)) continue;
        for (const s of m.statements('sqlite')) this.db.exec(s);
        this.db.prepare('INSERT INTO schema_migrations (version, name, applied_ms) VALUES (?, ?, ?)').run(m.version, m.name, Date.now());
      }
    });
    apply.immediate();
    this.stmts = this.prepare();
  }

  private prepare() {
    const db = this.db;
    return {
      insertEvent: db.prepare(`INSERT INTO events (node, event_id, at_ms, received_ms, kind, registry, image, pull_id, agent_version, body)
        VALUES (@node, @event_id, @at_ms, @received_ms, @kind, @registry, @image, @pull_id, @agent_version, @body)
        ON CONFLICT (node, event_id) DO NOTHING`),
      upsertPull: db.prepare(`INSERT INTO pulls (node, pull_id, updated_ms, seen_ms, state, body)
        VALUES (@node, @pull_id, @updated_ms, @seen_ms, @state, @body)
        ON CONFLICT (node, pull_id) DO UPDATE SET updated_ms = excluded.updated_ms, seen_ms = excluded.seen_ms,
          state = excluded.state, body = excluded.body WHERE excluded.updated_ms >= pulls.updated_ms`),
      upsertNode: db.prepare(`INSERT INTO nodes (node, agent_version, last_heartbeat_ms, interval_s, runtime, pulls_in_flight, events_dropped, queue_depth, source_errors)
        VALUES (@node, @agent_version, @last_heartbeat_ms, @interval_s, @runtime, @pulls_in_flight, @events_dropped, @queue_depth, @source_errors)
        ON CONFLICT (node) DO UPDATE SET agent_version = excluded.agent_version, last_heartbeat_ms = excluded.last_heartbeat_ms,
          interval_s = excluded.interval_s, runtime = excluded.runtime, pulls_in_flight = excluded.pulls_in_flight,
          events_dropped = excluded.events_dropped, queue_depth = excluded.queue_depth, source_errors = excluded.source_errors`),
      nodePulls: db.prepare(`SELECT pull_id, updated_ms FROM pulls WHERE node = ? AND state NOT IN ('completed', 'failed', 'cancelled-by-runtime')`),
      deletePull: db.prepare('DELETE FROM pulls WHERE node = ? AND pull_id = ?'),
      unprocessed: db.prepare('SELECT seq, node, received_ms, body FROM events WHERE processed = 0 ORDER BY seq LIMIT ?'),
      markProcessed: db.prepare('UPDATE events SET processed = 1 WHERE processed = 0 AND seq <= ?'),
      openIncidents: db.prepare("SELECT body FROM incidents WHERE state = 'open'"),
      stateVersion: db.prepare('SELECT version FROM engine_state WHERE id = 1'),
      stateBody: db.prepare('SELECT version, body FROM engine_state WHERE id = 1'),
      saveState: db.prepare(`INSERT INTO engine_state (id, version, body) VALUES (1, ?, ?)
        ON CONFLICT (id) DO UPDATE SET version = excluded.version, body = excluded.body`),
      overdue: db.prepare('SELECT node, last_heartbeat_ms FROM nodes WHERE last_heartbeat_ms + interval_s * 1000 * ? < ?'),
      upsertIncident: db.prepare(`INSERT INTO incidents (id, kind, key, state, opened_ms, updated_ms, resolved_ms, body)
        VALUES (@id, @kind, @key, @state, @opened_ms, @updated_ms, @resolved_ms, @body)
        ON CONFLICT (id) DO UPDATE SET state = excluded.state, updated_ms = excluded.updated_ms,
          resolved_ms = excluded.resolved_ms, body = excluded.body`),
      insertOutbox: db.prepare(`INSERT INTO outbox (notifier, incident_id, notice_id, body, next_attempt_ms, created_ms)
        VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (notifier, notice_id) DO NOTHING`),
      claim: db.prepare(`UPDATE outbox SET lease_owner = ?, lease_until_ms = ?, attempts = attempts + 1
        WHERE id IN (SELECT o.id FROM outbox o
          WHERE o.status = 'pending' AND o.next_attempt_ms <= ? AND (o.lease_until_ms IS NULL OR o.lease_until_ms < ?)
            AND NOT EXISTS (SELECT 1 FROM outbox p WHERE p.status = 'pending' AND p.notifier = o.notifier
              AND p.incident_id = o.incident_id AND p.id < o.id)
          ORDER BY o.id LIMIT ?)
        RETURNING id, notifier, incident_id, body, attempts, created_ms`),
      sent: db.prepare(`UPDATE outbox SET status = 'sent', done_ms = ?, lease_owner = NULL, lease_until_ms = NULL, last_error = NULL
        WHERE id = ? AND lease_owner = ?`),
      retry: db.prepare(`UPDATE outbox SET next_attempt_ms = ?, last_error = ?, lease_owner = NULL, lease_until_ms = NULL
        WHERE id = ? AND lease_owner = ?`),
      dead: db.prepare(`UPDATE outbox SET status = 'dead', done_ms = ?, last_error = ?, lease_owner = NULL, lease_until_ms = NULL
        WHERE id = ? AND lease_owner = ?`),
    };
  }

  private get s(): NonNullable<SqliteStore['stmts']> {
    if (!this.stmts) throw new Error('store not migrated: call migrate() first');
    return this.stmts;
  }

  async insertEvents(node: string, agentVersion: string, events: AgentEvent[], receivedMs: number): Promise<InsertResult> {
    const s = this.s;
    const run = this.db.transaction(() => {
      let accepted = 0;
      for (const ev of events) accepted += s.insertEvent.run(eventRow(node, agentVersion, ev, receivedMs)).changes;
      for (const p of latestPulls(node, events.map((e) => e.pull), receivedMs)) s.upsertPull.run(p);
      return accepted;
    });
    const accepted = run.immediate();
    return { accepted, duplicates: events.length - accepted };
  }

  async recordHeartbeat(hb: Heartbeat, receivedMs: number): Promise<void> {
    const s = this.s;
    const hbAt = Math.min(Date.parse(hb.at) || receivedMs, receivedMs);
    this.db.transaction(() => {
      s.upsertNode.run(nodeRow(hb, receivedMs));
      const rows = latestPulls(hb.node, hb.pullsInFlight, receivedMs);
      for (const p of rows) s.upsertPull.run(p);
      const present = new Set(rows.map((r) => r.pull_id));
      for (const r of s.nodePulls.all(hb.node) as { pull_id: string; updated_ms: number }[]) {
        if (!present.has(r.pull_id) && r.updated_ms <= hbAt) s.deletePull.run(hb.node, r.pull_id);
      }
    }).immediate();
  }

  async processIncidents(opts: { nowMs: number; missedHeartbeats: number; limit: number },
    fn: (input: ProcessInput) => ProcessOutput): Promise<number | null> {
    const s = this.s;
    const run = this.db.transaction(() => {
      const rows = s.unprocessed.all(opts.limit) as { seq: number; node: string; received_ms: number; body: string }[];
      const v = (s.stateVersion.get() as { version: number } | undefined)?.version ?? 0;
      let state: EngineState | null = null;
      if (this.cache && this.cache.version === v) state = this.cache.state;
      else if (v > 0) {
        // open incidents live in their table (saved as they change); the state row holds the rest
        state = parseJson<EngineState>((s.stateBody.get() as { body: string }).body);
        state.incidents = (s.openIncidents.all() as { body: string }[]).map((r) => parseJson<Incident>(r.body));
      }
      const overdue = (s.overdue.all(opts.missedHeartbeats, opts.nowMs) as { node: string; last_heartbeat_ms: number }[])
        .map((r) => ({ node: r.node, lastHeartbeatAt: new Date(r.last_heartbeat_ms).toISOString() }));
      const events = rows.map((r) => ({ seq: r.seq, node: r.node, receivedMs: r.received_ms, event: parseJson<AgentEvent>(r.body) }));
      this.cache = null;
      const out = fn({ events, state, overdue });
      let version = v;
      if (rows.length || out.incidents.length || out.outbox.length || v === 0) {
        version = v + 1;
        s.saveState.run(version, persistedState(out.state));
      }
      for (const inc of out.incidents) s.upsertIncident.run(incidentRow(inc));
      for (const o of out.outbox) {
        s.insertOutbox.run(o.notifier, o.notice.incident.id, o.notice.id, JSON.stringify(o.notice), opts.nowMs, opts.nowMs);
      }
      // one writer (IMMEDIATE transaction): every unprocessed row up to the last one read was read
      const last = rows[rows.length - 1];
      if (last) s.markProcessed.run(last.seq);
      this.cache = { version, state: out.state };
      return rows.length;
    });
    try {
      return run.immediate();
    } catch (e) {
      this.cache = null;
      throw e;
    }
  }

  async claimOutbox(owner: string, nowMs: number, leaseMs: number, limit: number): Promise<OutboxRow[]> {
    const rows = this.s.claim.all(owner, nowMs + leaseMs, nowMs, nowMs, limit) as OutboxDbRow[];
    return rows.sort((a, b) => a.id - b.id).map((r) => ({
      id: r.id, notifier: r.notifier, incidentId: r.incident_id, notice: parseJson<Notice>(r.body), attempts: r.attempts, createdMs: r.created_ms,
    }));
  }

  async completeOutbox(id: number, owner: string, result: OutboxResult, nowMs: number): Promise<void> {
    if (result.status === 'sent') this.s.sent.run(nowMs, id, owner);
    else if (result.status === 'retry') this.s.retry.run(result.nextAttemptMs, result.error.slice(0, 1000), id, owner);
    else this.s.dead.run(nowMs, result.error.slice(0, 1000), id, owner);
  }

  async outboxStats(): Promise<OutboxStats> {
    const rows = this.db.prepare('SELECT status, COUNT(*) AS n FROM outbox GROUP BY status').all() as { status: string; n: number }[];
    const out: OutboxStats = { pending: 0, sent: 0, dead: 0 };
    for (const r of rows) if (r.status === 'pending' || r.status === 'sent' || r.status === 'dead') out[r.status] = Number(r.n);
    return out;
  }

  async listIncidents(q: { state?: 'open' | 'resolved'; limit?: number }): Promise<Incident[]> {
    const limit = Math.min(Math.max(q.limit ?? 100, 1), 1000);
    const rows = (q.state
      ? this.db.prepare('SELECT body FROM incidents WHERE state = ? ORDER BY updated_ms DESC LIMIT ?').all(q.state, limit)
      : this.db.prepare('SELECT body FROM incidents ORDER BY updated_ms DESC LIMIT ?').all(limit)) as { body: string }[];
    return rows.map((r) => parseJson<Incident>(r.body));
  }

  async listNodes(nowMs: number, missed: number) {
    const rows = this.db.prepare('SELECT * FROM nodes ORDER BY node').all() as NodeRowOut[];
    return rows.map((r) => nodeInfo(r, nowMs, missed));
  }

  async listPulls(limit = 500): Promise<PullView[]> {
    const rows = this.db.prepare(`SELECT node, updated_ms, body FROM pulls WHERE state NOT IN ('completed', 'failed', 'cancelled-by-runtime')
      ORDER BY updated_ms DESC LIMIT ?`).all(limit) as { node: string; updated_ms: number; body: string }[];
    return rows.map((r) => ({ node: r.node, updatedMs: r.updated_ms, pull: parseJson<PullRecord>(r.body) }));
  }

  async stallStats(sinceMs: number): Promise<StallBucket[]> {
    const rows = this.db.prepare(`SELECT at_ms / 3600000 AS h, registry, COUNT(*) AS n FROM events
      WHERE kind IN ('stalled', 'cancelled') AND at_ms >= ? GROUP BY h, registry ORDER BY h, registry`).all(sinceMs) as { h: number; registry: string; n: number }[];
    return rows.map((r) => ({ hour: new Date(r.h * 3_600_000).toISOString(), registry: r.registry, stalls: Number(r.n) }));
  }

  async countEvents(): Promise<number> {
    return Number((this.db.prepare('SELECT COUNT(*) AS n FROM events').get() as { n: number }).n);
  }

  async eventIds(node?: string): Promise<string[]> {
    const rows = (node
      ? this.db.prepare('SELECT event_id FROM events WHERE node = ? ORDER BY seq').all(node)
      : this.db.prepare('SELECT event_id FROM events ORDER BY seq').all()) as { event_id: string }[];
    return rows.map((r) => r.event_id);
  }

  async retention(nowMs: number, retentionMs: number): Promise<RetentionResult> {
    const cutoff = nowMs - retentionMs;
    const pullCutoff = nowMs - Math.min(retentionMs, 3_600_000);
    return this.db.transaction(() => ({
      events: this.db.prepare('DELETE FROM events WHERE received_ms < ? AND processed = 1').run(cutoff).changes,
      incidents: this.db.prepare("DELETE FROM incidents WHERE state = 'resolved' AND resolved_ms < ?").run(cutoff).changes,
      outbox: this.db.prepare("DELETE FROM outbox WHERE status IN ('sent', 'dead') AND done_ms < ?").run(cutoff).changes,
      nodes: this.db.prepare('DELETE FROM nodes WHERE last_heartbeat_ms < ?').run(cutoff).changes,
      pulls: this.db.prepare('DELETE FROM pulls WHERE seen_ms < ?').run(pullCutoff).changes,
    })).immediate();
  }

  async ping(): Promise<void> { this.db.prepare('SELECT 1').get(); }

  async close(): Promise<void> { if (this.db.open) this.db.close(); }
}
