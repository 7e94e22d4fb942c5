import { afterAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { silentLogger } from '../../../common/log.js';
import { startAll, dashboardUrl } from '../../../cli/start.js';
import { waitFor } from './helpers.js';

const ROOT = resolve(__dirname, '../../..');
const dirs: string[] = [];
const children: ChildProcess[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'pw-start-'));
  dirs.push(d);
  return d;
}

afterAll(() => {
  for (const c of children) if (c.pid && c.exitCode === null && c.signalCode === null) process.kill(c.pid, 'SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function getJson<T>(url: string): Promise<T> {
  const r = await fetch(url);
  expect(r.status, url).toBe(200);
  return (await r.json()) as T;
}

describe('pullwatch start', () => {
  it('startAll: collector + agent on one host; the agent heartbeats with the generated token; token kept across restarts', async () => {
    const dataDir = tempDir();
    const agent = {
      hostRoot: '/', logSource: [`file:${join(dataDir, 'none.log')}`], stallAfter: 60_000, slowBelow: 65_536, poll: 1000,
      listen: '127.0.0.1:0', nodeName: 'start-node', logLevel: 'silent',
    };
    const first = await startAll({ dataDir, listen: '127.0.0.1:0', agent }, silentLogger());
    try {
      expect(first.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
      await waitFor(async () => {
        const { nodes } = await getJson<{ nodes: Array<{ node: string; status: string }> }>(`${first.url}v1/nodes`);
        return nodes.some((n) => n.node === 'start-node' && n.status === 'up');
      }, 'the local agent heartbeating into the collector');
      const page = await fetch(first.url);
      expect(page.headers.get('content-type')).toContain('text/html');
      // Unauthenticated ingest is refused: the generated token is really in force.
      const anon = await fetch(`${first.url}v1/heartbeat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      expect(anon.status).toBe(401);
    } finally {
      await first.stop();
    }
    const tokenFile = join(dataDir, 'token');
    expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
    const token = readFileSync(tokenFile, 'utf8');
    expect(token.trim().length).toBeGreaterThanOrEqual(40);
    expect(statSync(join(dataDir, 'pullwatch.db')).size).toBeGreaterThan(0);
    expect(statSync(join(dataDir, 'queue', 'meta.json')).isFile()).toBe(true);

    const second = await startAll({ dataDir, listen: '127.0.0.1:0', agent }, silentLogger());
    await second.stop();
    expect(readFileSync(tokenFile, 'utf8')).toBe(token);
  });

  it('the CLI prints the URL, serves the dashboard and stops cleanly on SIGINT', async () => {
    const dataDir = tempDir();
    const child = spawn(process.execPath, [
      '--import', 'tsx', '-e', "import('./cli/main.ts').then((m) => m.main(process.argv.slice(0, 1).concat(process.argv.slice(1))))",
      'pullwatch', 'start', '--data-dir', dataDir, '--listen', '127.0.0.1:0', '--log-source', `file:${join(dataDir, 'none.log')}`,
      '--node-name', 'cli-node', '--log-level', 'warn',
    ], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    let err = '';
    child.stdout!.on('data', (d: Buffer) => { out += d.toString(); });
    child.stderr!.on('data', (d: Buffer) => { err += d.toString(); });
    await waitFor(() => /pullwatch is running: http:\/\/127\.0\.0\.1:\d+\/\n/.test(out) || child.exitCode !== null, 'the URL on stdout', 60_000);
    const url = /pullwatch is running: (\S+)/.exec(out)?.[1];
    expect(url, `stdout: ${out}\nstderr: ${err}`).toBeDefined();
    const page = await fetch(url!);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('pullwatch');
    await waitFor(async () => (await getJson<{ nodes: Array<{ node: string }> }>(`${url}v1/nodes`)).nodes.some((n) => n.node === 'cli-node'), 'cli-node heartbeat');

    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    process.kill(child.pid!, 'SIGINT');
    const code = await Promise.race([exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 15_000))]);
    expect(code, err).toBe(0);
    expect(err).toContain('pullwatch start: stopped');
    expect(out.trim().split('\n')).toEqual([`pullwatch is running: ${url}`]);
  });

  it('dashboardUrl turns a wildcard listen address into a browsable one', () => {
    expect(dashboardUrl('http://0.0.0.0:8080')).toBe('http://127.0.0.1:8080/');
    expect(dashboardUrl('http://127.0.0.1:9')).toBe('http://127.0.0.1:9/');
  });
});
