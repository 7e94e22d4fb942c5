/**
 * Versioned schema migrations for both stores. Applied at start, in order, each in a transaction,
 * recorded in schema_migrations. On PostgreSQL the runner holds an advisory lock so replicas
 * starting together apply each migration once. Times are epoch milliseconds (BIGINT) everywhere so
 * the same queries work on both databases. Never edit a released migration: add a new one.
 */
export type Dialect = 'sqlite' | 'postgres';

export interface Migration { version: number; name: string; statements: (d: Dialect) => string[] }

const serial = (d: Dialect) => (d === 'sqlite' ? 'INTEGER PRIMARY KEY AUTOINCREMENT' : 'BIGSERIAL PRIMARY KEY');
const real = (d: Dialect) => (d === 'sqlite' ? 'REAL' : 'DOUBLE PRECISION');

export const MIGRATIONS: Migration[] = [
  {
    version: 1,
    name: 'events, nodes, pulls, incidents, engine state, outbox',
    statements: (d) => [
      `CREATE TABLE events (
        seq ${serial(d)},
        node TEXT NOT NULL,
        event_id TEXT NOT NULL,
        at_ms BIGINT NOT NULL,
        received_ms BIGINT NOT NULL,
        kind TEXT NOT NULL,
        registry TEXT NOT NULL,
        image TEXT NOT NULL,
        pull_id TEXT NOT NULL,
        agent_version TEXT NOT NULL,
        body TEXT NOT NULL,
        processed INTEGER NOT NULL DEFAULT 0,
        UNIQUE (node, event_id)
      )`,
      `CREATE INDEX events_unprocessed ON events (seq) WHERE processed = 0`,
      `CREATE INDEX events_stalls ON events (at_ms) WHERE kind IN ('stalled', 'cancelled')`,
      `CREATE INDEX events_received ON events (received_ms)`,
      `CREATE TABLE nodes (
        node TEXT PRIMARY KEY,
        agent_version TEXT NOT NULL,
        last_heartbeat_ms BIGINT NOT NULL,
        interval_s ${real(d)} NOT NULL,
        runtime TEXT,
        pulls_in_flight INTEGER NOT NULL,
        events_dropped BIGINT NOT NULL,
        queue_depth BIGINT NOT NULL,
        source_errors BIGINT NOT NULL
      )`,
      `CREATE TABLE pulls (
        node TEXT NOT NULL,
        pull_id TEXT NOT NULL,
        updated_ms BIGINT NOT NULL,
        seen_ms BIGINT NOT NULL,
        state TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (node, pull_id)
      )`,
      `CREATE INDEX pulls_state ON pulls (state, updated_ms)`,
      `CREATE TABLE incidents (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        state TEXT NOT NULL,
        opened_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        resolved_ms BIGINT,
        body TEXT NOT NULL
      )`,
      `CREATE INDEX incidents_state ON incidents (state, updated_ms)`,
      `CREATE TABLE engine_state (
        id INTEGER PRIMARY KEY,
        version BIGINT NOT NULL,
        body TEXT NOT NULL
      )`,
      `CREATE TABLE outbox (
        id ${serial(d)},
        notifier TEXT NOT NULL,
        incident_id TEXT NOT NULL,
        notice_id TEXT NOT NULL,
        body TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_ms BIGINT NOT NULL,
        lease_owner TEXT,
        lease_until_ms BIGINT,
        last_error TEXT,
        created_ms BIGINT NOT NULL,
        done_ms BIGINT,
        UNIQUE (notifier, notice_id)
      )`,
      `CREATE INDEX outbox_due ON outbox (status, next_attempt_ms)`,
      `CREATE INDEX outbox_order ON outbox (notifier, incident_id, id) WHERE status = 'pending'`,
    ],
  },
];

export const SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]?.version ?? 0;
