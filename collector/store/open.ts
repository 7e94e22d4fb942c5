/** Picks the store from --db: `postgres://…` / `postgresql://…` → PostgreSQL, anything else → SQLite file. */
import type { Store } from './store.js';
import { SqliteStore } from './sqlite.js';
import { PostgresStore } from './postgres.js';

export function isPostgresUrl(db: string): boolean {
  return /^postgres(ql)?:\/\//i.test(db);
}

/** Opens and migrates the store. */
export async function openStore(db: string): Promise<Store> {
  const store: Store = isPostgresUrl(db) ? new PostgresStore(db) : new SqliteStore(db);
  try {
    await store.migrate();
  } catch (e) {
    await store.close().catch(() => undefined);
    throw e;
  }
  return store;
}

/** The database location for logs: the PostgreSQL password never appears. */
export function describeDb(db: string): string {
  if (!isPostgresUrl(db)) return db;
  try {
    const u = new URL(db);
    return `postgres://${u.username ? `${u.username}@` : ''}${u.host}${u.pathname}`;
  } catch {
    return 'postgres://[unparseable]';
  }
}
