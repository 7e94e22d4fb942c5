/**
 * Starts a real PostgreSQL for a test: initdb into a temp dir, postgres on 127.0.0.1 with a free
 * port, trust auth. As root it runs as the `postgres` user (initdb refuses root). stop() kills the
 * server by pid and removes the data dir. Fails with a clear message when PostgreSQL is missing.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, chownSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export interface PgServer { url: string; pid: number; dataDir: string; stop(): Promise<void> }

function findBin(): string {
  const env = process.env.PULLWATCH_PG_BIN;
  if (env && existsSync(join(env, 'initdb'))) return env;
  const base = '/usr/lib/postgresql';
  if (existsSync(base)) {
    const versions = readdirSync(base).filter((v) => existsSync(join(base, v, 'bin', 'initdb'))).sort((a, b) => Number(b) - Number(a));
    if (versions[0]) return join(base, versions[0], 'bin');
  }
  throw new Error('PostgreSQL not found: install the Debian package "postgresql" (scripts/ensure-test-deps.sh) or set PULLWATCH_PG_BIN');
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

function postgresUser(): { uid: number; gid: number } | undefined {
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return undefined;
  const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
  if (!Number.isFinite(uid) || !Number.isFinite(gid)) throw new Error('running as root but no "postgres" user to run PostgreSQL as');
  return { uid, gid };
}

export async function startPostgres(): Promise<PgServer> {
  const bin = findBin();
  const user = postgresUser();
  const root = mkdtempSync(join(tmpdir(), 'pullwatch-pg-'));
  const dataDir = join(root, 'data');
  if (user) chownSync(root, user.uid, user.gid);
  const asUser = user ? { uid: user.uid, gid: user.gid } : {};
  const env = { ...process.env, LC_ALL: 'C', HOME: root };
  execFileSync(join(bin, 'initdb'), ['-D', dataDir, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--no-sync'], { ...asUser, env, stdio: 'pipe' });

  let lastErr: unknown;
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const child: ChildProcess = spawn(join(bin, 'postgres'), [
      '-D', dataDir, '-k', root, '-p', String(port), '-c', 'listen_addresses=127.0.0.1',
      '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off', '-c', 'max_connections=200',
    ], { ...asUser, env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr?.on('data', (d: Buffer) => { stderr = (stderr + d.toString()).slice(-4000); });
    const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    try {
      await waitReady(url, child, () => stderr);
      const pid = child.pid as number;
      return {
        url, pid, dataDir,
        async stop() {
          if (child.exitCode === null && child.signalCode === null) {
            process.kill(pid, 'SIGINT'); // fast shutdown
            const t = setTimeout(() => { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } }, 10_000);
            await exited;
            clearTimeout(t);
          }
          rmSync(root, { recursive: true, force: true });
        },
      };
    } catch (e) {
      lastErr = e;
      if (child.pid && child.exitCode === null) { try { process.kill(child.pid, 'SIGKILL'); } catch { /* gone */ } }
      await exited;
    }
  }
  rmSync(root, { recursive: true, force: true });
  throw new Error(`PostgreSQL did not start: ${String(lastErr)}`);
}

async function waitReady(url: string, child: ChildProcess, stderr: () => string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`postgres exited (${child.exitCode}): ${stderr()}`);
    const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 });
    try {
      await c.connect();
      await c.query('SELECT 1');
      await c.end();
      return;
    } catch {
      await c.end().catch(() => undefined);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  throw new Error(`postgres not ready in 30s: ${stderr()}`);
}

/** A fresh database on the server (one per test file/suite keeps them independent). */
export async function createDatabase(serverUrl: string, name: string): Promise<string> {
  const c = new pg.Client({ connectionString: serverUrl });
  await c.connect();
  try {
    await c.query(`CREATE DATABASE "${name.replace(/"/g, '')}"`);
  } finally {
    await c.end();
  }
  const u = new URL(serverUrl);
  u.pathname = `/${name}`;
  return u.toString();
}
