/**
 * PostgreSQL store (pg): for several collector replicas on one database.
 * - migrations under an advisory lock (replicas starting together apply each once);
 * - unique (node, event id) with INSERT … ON CONFLICT DO NOTHING;
 * - incident processing under a transaction-scoped advisory lock (one replica at a time);
 * - outbox rows leased with FOR UPDATE SKIP LOCKED and a lease expiry, so each notice is sent once.
 */
import pg from 'pg';
import type { AgentEvent, Heartbeat } from '../../common/wire.js';
import type { Incident, Notice, StallBucket } from '../model.js';
import type { EngineState } from '../incidents.js';
import { MIGRATIONS } from './migrations.js';
import { eventRow, incidentRow, latestPulls, nodeInfo, nodeRow, parseJson, persistedState, type NodeRowOut } from './rows.js';
import type {
  InsertResult, OutboxResult, OutboxRow, OutboxStats, ProcessInput, ProcessOutput, PullView, RetentionResult, Store,
} from './store.js';
import type { PullRecord } from '../../agent/model/pulls.js';

const MIGRATE_LOCK = 7_391_001;
const PROCESS_LOCK = 7_391_002;

export class PostgresStore implements Store {
  readonly kind = 'postgres' as const;
  readonly pool: pg.Pool;
  private cache: { version: number; state: EngineState } | null = null;

  constructor(url: string, opts: { max?: number } = {}) {
    this.pool = new pg.Pool({ connectionString: url, max: opts.max ?? 10, connectionTimeoutMillis: 10_000 });
    // an idle client losing its connection must not crash the process
    this.pool.on('error', () => undefined);
  }

  private async tx<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    const c = await this.pool.connect();
    try {
      await c.query('BEGIN');
      const out = await fn(c);
      await c.query('COMMIT');
      return out;
    } catch (e) {
      await c.query('ROLLBACK').catch(() => undefined);
      throw e;
    } finally {
      c.release();
    }
  }

  async migrate(): Promise<void> {
    const c = await this.pool.connect();
    try {
      await c.query('SELECT pg_advisory_lock($1)', [MIGRATE_LOCK]);
      await c.query('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_ms BIGINT NOT NULL)');
      const done = new Set((await c.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((r) => Number(r.version)));
      for (const m of MIGRATIONS) {
        if (done.has(m.version)) continue;
        await c.query('BEGIN');
        try {
          for (const s of m.statements('postgres')) await c.query(s);
          await c.query('INSERT INTO schema_migrations (version, name, applied_ms) VALUES ($1, $2, $3)', [m.version, m.name, Date.now()]);
          await c.query('COMMIT');
        } catch (e) {
          await c.query('ROLLBACK').catch(() => undefined);
          throw e;
        }
      }
    } finally {
      await c.query('SELECT pg_advisory_unlock($1)', [MIGRATE_LOCK]).catch(() => undefined);
      c.release();
    }
  }

  async insertEvents(node: string, agentVersion: string, events: AgentEvent[], receivedMs: number): Promise<InsertResult> {
    if (!events.length) return { accepted: 0, duplicates: 0 };
    const rows = events.map((e) => eventRow(node, agentVersion, e, receivedMs));
    const pulls = latestPulls(node, events.map((e) => e.pull), receivedMs);
    // one round trip: events (ignoring repeats) and the pulls they describe
    const r = await this.pool.query<{ n: string }>(`WITH ins AS (
        INSERT INTO events (node, event_id, at_ms, received_ms, kind, registry, image, pull_id, agent_version, body)
        SELECT node, event_id, at_ms, received_ms, kind, registry, image, pull_id, agent_version, body
        FROM jsonb_to_recordset($1::jsonb) AS x(node text, event_id text, at_ms bigint, received_ms bigint, kind text,
          registry text, image text, pull_id text, agent_version text, body text)
        ON CONFLICT (node, event_id) DO NOTHING RETURNING 1),
      up AS (
        INSERT INTO pulls (node, pull_id, updated_ms, seen_ms, state, body)
        SELECT node, pull_id, updated_ms, seen_ms, state, body
        FROM jsonb_to_recordset($2::jsonb) AS x(node text, pull_id text, updated_ms bigint, seen_ms bigint, state text, body text)
        ON CONFLICT (node, pull_id) DO UPDATE SET updated_ms = excluded.updated_ms, seen_ms = excluded.seen_ms,
          state = excluded.state, body = excluded.body WHERE excluded.updated_ms >= pulls.updated_ms
        RETURNING 1)
      SELECT (SELECT COUNT(*) FROM ins) AS n, (SELECT COUNT(*) FROM up) AS p`, [JSON.stringify(rows), JSON.stringify(pulls)]);
    const accepted = Number(r.rows[0]?.n ?? 0);
    return { accepted, duplicates: events.length - accepted };
  }

  private async upsertPulls(q: pg.Pool | pg.PoolClient, rows: ReturnType<typeof latestPulls>): Promise<void> {
    if (!rows.length) return;
    await q.query(`INSERT INTO pulls (node, pull_id, updated_ms, seen_ms, state, body)
      SELECT node, pull_id, updated_ms, seen_ms, state, body
      FROM jsonb_to_recordset($1::jsonb) AS x(node text, pull_id text, updated_ms bigint, seen_ms bigint, state text, body text)
      ON CONFLICT (node, pull_id) DO UPDATE SET updated_ms = excluded.updated_ms, seen_ms = excluded.seen_ms,
        state = excluded.state, body = excluded.body WHERE excluded.updated_ms >= pulls.updated_ms`, [JSON.stringify(rows)]);
  }

  async recordHeartbeat(hb: Heartbeat, receivedMs: number): Promise<void> {
    const n = nodeRow(hb, receivedMs);
    const hbAt = Math.min(Date.parse(hb.at) || receivedMs, receivedMs);
    const pulls = latestPulls(hb.node, hb.pullsInFlight, receivedMs);
    await this.pool.query(`INSERT INTO nodes (node, agent_version, last_heartbeat_ms, interval_s, runtime, pulls_in_flight, events_dropped, queue_depth, source_errors)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
      ON CONFLICT (node) DO UPDATE SET agent_version = excluded.agent_version, last_heartbeat_ms = excluded.last_heartbeat_ms,
        interval_s = excluded.interval_s, runtime = excluded.runtime, pulls_in_flight = excluded.pulls_in_flight,
        events_dropped = excluded.events_dropped, queue_depth = excluded.queue_depth, source_errors = excluded.source_errors`,
    [n.node, n.agent_version, n.last_heartbeat_ms, n.interval_s, n.runtime, n.pulls_in_flight, n.events_dropped, n.queue_depth, n.source_errors]);
    await this.upsertPulls(this.pool, pulls);
    await this.pool.query(`DELETE FROM pulls WHERE node = $1 AND NOT (pull_id = ANY($2::text[])) AND updated_ms <= $3
      AND state NOT IN ('completed', 'failed', 'cancelled-by-runtime')`, [hb.node, pulls.map((p) => p.pull_id), hbAt]);
  }

  async processIncidents(opts: { nowMs: number; missedHeartbeats: number; limit: number },
    fn: (input: ProcessInput) => ProcessOutput): Promise<number | null> {
    try {
      return await this.tx(async (c) => {
        const lock = await c.query<{ ok: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS ok', [PROCESS_LOCK]);
        if (!lock.rows[0]?.ok) return null;
        const rows = (await c.query<{ seq: string; node: string; received_ms: string; body: string }>(
          'SELECT seq, node, received_ms, body FROM events WHERE processed = 0 ORDER BY seq LIMIT $1', [opts.limit])).rows;
        const sv = (await c.query<{ version: string; body?: string }>('SELECT version FROM engine_state WHERE id = 1')).rows[0];
        const v = sv ? Number(sv.version) : 0;
        let state: EngineState | null = null;
        if (this.cache && this.cache.version === v) state = this.cache.state;
        else if (v > 0) {
          const b = (await c.query<{ body: string }>('SELECT body FROM engine_state WHERE id = 1')).rows[0];
          state = b ? parseJson<EngineState>(b.body) : null;
          // open incidents live in their table (saved as they change); the state row holds the rest
          if (state) state.incidents = (await c.query<{ body: string }>("SELECT body FROM incidents WHERE state = 'open'")).rows.map((r) => parseJson<Incident>(r.body));
        }
        const overdue = (await c.query<{ node: string; last_heartbeat_ms: string }>(
          'SELECT node, last_heartbeat_ms FROM nodes WHERE last_heartbeat_ms + interval_s * 1000 * $1 < $2',
          [opts.missedHeartbeats, opts.nowMs])).rows
          .map((r) => ({ node: r.node, lastHeartbeatAt: new Date(Number(r.last_heartbeat_ms)).toISOString() }));
        const events = rows.map((r) => ({ seq: Number(r.seq), node: r.node, receivedMs: Number(r.received_ms), event: parseJson<AgentEvent>(r.body) }));
        this.cache = null;
        const out = fn({ events, state, overdue });
        let version = v;
        if (rows.length || out.incidents.length || out.outbox.length || v === 0) {
          version = v + 1;
          await c.query(`INSERT INTO engine_state (id, version, body) VALUES (1, $1, $2)
            ON CONFLICT (id) DO UPDATE SET version = excluded.version, body = excluded.body`, [version, persistedState(out.state)]);
        }
        if (out.incidents.length) {
          await c.query(`INSERT INTO incidents (id, kind, key, state, opened_ms, updated_ms, resolved_ms, body)
            SELECT id, kind, key, state, opened_ms, updated_ms, resolved_ms, body FROM jsonb_to_recordset($1::jsonb)
              AS x(id text, kind text, key text, state text, opened_ms bigint, updated_ms bigint, resolved_ms bigint, body text)
            ON CONFLICT (id) DO UPDATE SET state = excluded.state, updated_ms = excluded.updated_ms,
              resolved_ms = excluded.resolved_ms, body = excluded.body`, [JSON.stringify(out.incidents.map(incidentRow))]);
        }
        if (out.outbox.length) {
          const ob = out.outbox.map((o) => ({
            notifier: o.notifier, incident_id: o.notice.incident.id, notice_id: o.notice.id, body: JSON.stringify(o.notice),
          }));
          await c.query(`INSERT INTO outbox (notifier, incident_id, notice_id, body, next_attempt_ms, created_ms)
            SELECT notifier, incident_id, notice_id, body, $2, $2 FROM jsonb_to_recordset($1::jsonb)
              AS x(notifier text, incident_id text, notice_id text, body text)
            ORDER BY notice_id
            ON CONFLICT (notifier, notice_id) DO NOTHING`, [JSON.stringify(ob), opts.nowMs]);
        }
        if (rows.length) await c.query('UPDATE events SET processed = 1 WHERE seq = ANY($1::bigint[])', [rows.map((r) => r.seq)]);
        this.cache = { version, state: out.state };
        return rows.length;
      });
    } catch (e) {
      this.cache = null;
      throw e;
    }
  }

  async claimOutbox(owner: string, nowMs: number, leaseMs: number, limit: number): Promise<OutboxRow[]> {
    const r = await this.pool.query<{ id: string; notifier: string; incident_id: string; body: string; attempts: number; created_ms: string }>(
      `UPDATE outbox SET lease_owner = $1, lease_until_ms = $2, attempts = attempts + 1
       WHERE id IN (SELECT o.id FROM outbox o
         WHERE o.status = 'pending' AND o.next_attempt_ms <= $3 AND (o.lease_until_ms IS NULL OR o.lease_until_ms < $3)
           AND NOT EXISTS (SELECT 1 FROM outbox p WHERE p.status = 'pending' AND p.notifier = o.notifier
             AND p.incident_id = o.incident_id AND p.id < o.id)
         ORDER BY o.id LIMIT $4 FOR UPDATE OF o SKIP LOCKED)
       RETURNING id, notifier, incident_id, body, attempts, created_ms`, [owner, nowMs + leaseMs, nowMs, limit]);
    return r.rows.map((x) => ({
      id: Number(x.id), notifier: x.notifier, incidentId: x.incident_id, notice: parseJson<Notice>(x.body),
      attempts: Number(x.attempts), createdMs: Number(x.created_ms),
    })).sort((a, b) => a.id - b.id);
  }

  async completeOutbox(id: number, owner: string, result: OutboxResult, nowMs: number): Promise<void> {
    if (result.status === 'sent') {
      await this.pool.query(`UPDATE outbox SET status = 'sent', done_ms = $1, lease_owner = NULL, lease_until_ms = NULL, last_error = NULL
        WHERE id = $2 AND lease_owner = $3`, [nowMs, id, owner]);
    } else if (result.status === 'retry') {
      await this.pool.query(`UPDATE outbox SET next_attempt_ms = $1, last_error = $2, lease_owner = NULL, lease_until_ms = NULL
        WHERE id = $3 AND lease_owner = $4`, [result.nextAttemptMs, result.error.slice(0, 1000), id, owner]);
    } else {
      await this.pool.query(`UPDATE outbox SET status = 'dead', done_ms = $1, last_error = $2, lease_owner = NULL, lease_until_ms = NULL
        WHERE id = $3 AND lease_owner = $4`, [nowMs, result.error.slice(0, 1000), id, owner]);
    }
  }

  async outboxStats(): Promise<OutboxStats> {
    const r = await this.pool.query<{ status: string; n: string }>('SELECT status, COUNT(*) AS n FROM outbox GROUP BY status');
    const out: OutboxStats = { pending: 0, sent: 0, dead: 0 };
    for (const x of r.rows) if (x.status === 'pending' || x.status === 'sent' || x.status === 'dead') out[x.status] = Number(x.n);
    return out;
  }

  async listIncidents(q: { state?: 'open' | 'resolved'; limit?: number }): Promise<Incident[]> {
    const limit = Math.min(Math.max(q.limit ?? 100, 1), 1000);
    const r = q.state
      ? await this.pool.query<{ body: string }>('SELECT body FROM incidents WHERE state = $1 ORDER BY updated_ms DESC LIMIT $2', [q.state, limit])
      : await this.pool.query<{ body: string }>('SELECT body FROM incidents ORDER BY updated_ms DESC LIMIT $1', [limit]);
    return r.rows.map((x) => parseJson<Incident>(x.body));
  }

  async listNodes(nowMs: number, missed: number) {
    const r = await this.pool.query<NodeRowOut>('SELECT * FROM nodes ORDER BY node');
    return r.rows.map((x) => nodeInfo(x, nowMs, missed));
  }

  async listPulls(limit = 500): Promise<PullView[]> {
    const r = await this.pool.query<{ node: string; updated_ms: string; body: string }>(`SELECT node, updated_ms, body FROM pulls
      WHERE state NOT IN ('completed', 'failed', 'cancelled-by-runtime') ORDER BY updated_ms DESC LIMIT $1`, [limit]);
    return r.rows.map((x) => ({ node: x.node, updatedMs: Number(x.updated_ms), pull: parseJson<PullRecord>(x.body) }));
  }

  async stallStats(sinceMs: number): Promise<StallBucket[]> {
    const r = await this.pool.query<{ h: string; registry: string; n: string }>(`SELECT at_ms / 3600000 AS h, registry, COUNT(*) AS n FROM events
      WHERE kind IN ('stalled', 'cancelled') AND at_ms >= $1 GROUP BY h, registry ORDER BY h, registry`, [sinceMs]);
    return r.rows.map((x) => ({ hour: new Date(Number(x.h) * 3_600_000).toISOString(), registry: x.registry, stalls: Number(x.n) }));
  }

  async countEvents(): Promise<number> {
    return Number((await this.pool.query<{ n: string }>('SELECT COUNT(*) AS n FROM events')).rows[0]?.n ?? 0);
  }

  async eventIds(node?: string): Promise<string[]> {
    const r = node
      ? await this.pool.query<{ event_id: string }>('SELECT event_id FROM events WHERE node = $1 ORDER BY seq', [node])
      : await this.pool.query<{ event_id: string }>('SELECT event_id FROM events ORDER BY seq');
    return r.rows.map((x) => x.event_id);
  }

  async retention(nowMs: number, retentionMs: number): Promise<RetentionResult> {
    const cutoff = nowMs - retentionMs;
    const pullCutoff = nowMs - Math.min(retentionMs, 3_600_000);
    return this.tx(async (c) => ({
      events: (await c.query('DELETE FROM events WHERE received_ms < $1 AND processed = 1', [cutoff])).rowCount ?? 0,
      incidents: (await c.query("DELETE FROM incidents WHERE state = 'resolved' AND resolved_ms < $1", [cutoff])).rowCount ?? 0,
      outbox: (await c.query("DELETE FROM outbox WHERE status IN ('sent', 'dead') AND done_ms < $1", [cutoff])).rowCount ?? 0,
      nodes: (await c.query('DELETE FROM nodes WHERE last_heartbeat_ms < $1', [cutoff])).rowCount ?? 0,
      pulls: (await c.query('DELETE FROM pulls WHERE seen_ms < $1', [pullCutoff])).rowCount ?? 0,
    }));
  }

  async ping(): Promise<void> { await this.pool.query('SELECT 1'); }

  async close(): Promise<void> { await this.pool.end(); }
}
