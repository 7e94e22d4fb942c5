import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const BIN = resolve(import.meta.dirname, '../../../bin/pullwatch.js');
const DIGEST = `sha256:${'ab12'.repeat(16)}`;

function run(args: string[], env: Record<string, string> = {}) {
  return spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 30_000 });
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < end) {
    try { const v = await fn(); if (v !== undefined) return v; } catch (e) { last = e; }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
}

describe('pullwatch agent (real process, real ingest layout on disk)', () => {
  let dir: string;
  let agent: ChildProcess;
  let url: string;
  let data: string;
  let logs = '';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'pullwatch-cli-'));
    const ingest = join(dir, 'containerd', 'io.containerd.content.v1.content', 'ingest', 'f'.repeat(64));
    mkdirSync(ingest, { recursive: true });
    mkdirSync(join(dir, 'containerd', 'io.containerd.content.v1.content', 'blobs', 'sha256'), { recursive: true });
    const now = new Date().toISOString();
    writeFileSync(join(ingest, 'ref'), `k8s.io/1/layer-${DIGEST}`);
    writeFileSync(join(ingest, 'total'), '40000000');
    writeFileSync(join(ingest, 'startedat'), now);
    writeFileSync(join(ingest, 'updatedat'), now);
    data = join(ingest, 'data');
    writeFileSync(data, Buffer.alloc(1_000_000));
    agent = spawn(process.execPath, [
      BIN, 'agent', '--kube', 'off', '--listen', '127.0.0.1:0', '--containerd-root', join(dir, 'containerd'),
      '--containerd-socket', join(dir, 'no.sock'), '--docker-root', join(dir, 'no-docker'), '--log-source', `file:${join(dir, 'none.log')}`,
      '--queue-dir', join(dir, 'q'), '--poll', '500ms', '--node-name', 'node-a',
    ], { env: { ...process.env, PULLWATCH_STALL_AFTER: '3s' }, stdio: ['ignore', 'ignore', 'pipe'] });
    agent.stderr?.on('data', (b: Buffer) => { logs += b.toString(); });
    url = await waitFor('agent address', async () => /"address":"(http:[^"]+)"/.exec(logs)?.[1], 20_000);
  });

  afterAll(() => {
    if (agent?.pid) { try { process.kill(agent.pid, 'SIGKILL'); } catch { /* gone */ } }
    rmSync(dir, { recursive: true, force: true });
  });

  it('sees the growing ingest, then reports it stalled within stall-after + 2s (PULLWATCH_STALL_AFTER honoured)', async () => {
    const grow = setInterval(() => appendFileSync(data, Buffer.alloc(100_000)), 200);
    await waitFor('downloading pull', async () => {
      const body = await (await fetch(`${url}/v1/pulls`)).json() as { pulls: Array<{ state: string }> };
      return body.pulls.find((p) => p.state === 'downloading');
    }, 15_000);
    await new Promise((r) => setTimeout(r, 1000));
    clearInterval(grow);
    const stoppedAt = Date.now();
    const stalled = await waitFor('stalled pull', async () => {
      const body = await (await fetch(`${url}/v1/pulls`)).json() as { node: string; pulls: Array<{ state: string; layers: Array<{ digest: string; bytesDone: number; bytesTotal: number }> }> };
      expect(body.node).toBe('node-a');
      return body.pulls.find((p) => p.state === 'stalled');
    }, 10_000);
    expect(Date.now() - stoppedAt).toBeLessThanOrEqual(3000 + 2000);
    expect(stalled.layers[0]).toMatchObject({ digest: DIGEST, bytesTotal: 40_000_000 });
    expect(stalled.layers[0]?.bytesDone).toBeGreaterThan(1_000_000);
    expect(logs).toMatch(/pull stalled/);
  });

  it('records a capture of the stall for the bundle (beside the queue dir)', async () => {
    const { readdirSync, readFileSync } = await import('node:fs');
    const file = await waitFor('capture file', async () => {
      try { return readdirSync(join(dir, 'captures')).find((f) => f.endsWith('.json')); } catch { return undefined; }
    }, 30_000);
    const cap = JSON.parse(readFileSync(join(dir, 'captures', file), 'utf8')) as { pullId: string; ingests: { entries: Array<{ ref: string }> }; probe: unknown };
    expect(cap.pullId).toBeTruthy();
    expect(JSON.stringify(cap.ingests)).toContain(DIGEST);
    expect(cap.probe).toBeDefined();
  });

  it('pullwatch status --json prints the documented shape', () => {
    const r = run(['status', '--json', '--agent-url', url]);
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout) as { pulls: Array<Record<string, unknown>> };
    expect(Object.keys(out.pulls[0] ?? {}).sort()).toEqual(['idleSeconds', 'image', 'layers', 'pods', 'registry', 'state']);
    expect(out.pulls[0]).toMatchObject({ state: 'stalled', layers: [{ digest: DIGEST, bytesTotal: 40_000_000 }] });
    const text = run(['status', '--once', '--agent-url', url]);
    expect(text.stdout).toMatch(/STALLED/);
    expect(text.stdout).toMatch(/sha256:ab12ab12ab12 \[#*>? *\]/);
  });

  it('exports Prometheus metrics for stalls', async () => {
    const text = await (await fetch(`${url}/metrics`)).text();
    expect(text).toMatch(/pullwatch_stalls_total\{[^}]*\} 1/);
    expect(text).toMatch(/pullwatch_pulls_in_flight\{[^}]*state="stalled"[^}]*\} 1/);
    expect(text).toMatch(/pullwatch_source_errors_total/);
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
  });

  it('serves this node\'s tune plan at /v1/tune', async () => {
    const res = await fetch(`${url}/v1/tune`);
    expect(res.status).toBe(200);
    const plan = await res.json() as { schemaVersion: number; settings: Array<{ id: string }> };
    expect(plan.schemaVersion).toBe(1);
    expect(plan.settings.map((x) => x.id)).toContain('runtime.pullProgressTimeout');
  });

  it('status against no agent fails with a clear message', () => {
    const r = run(['status', '--json', '--agent-url', 'http://127.0.0.1:1']);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/cannot read http:\/\/127\.0\.0\.1:1\/v1\/pulls/);
  });
});

describe('pullwatch CLI', () => {
  it('--version and --help on every command', () => {
    expect(run(['--version']).stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
    for (const cmd of ['agent', 'collector', 'start', 'status', 'bundle', 'tune']) {
      const r = run([cmd, '--help']);
      expect(r.status, `${cmd} --help`).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`Usage: pullwatch ${cmd}`));
    }
  });

  it('rejects bad flag values with a clear error, from flags and from the environment', () => {
    const a = run(['agent', '--stall-after', 'soon']);
    expect(a.status).not.toBe(0);
    expect(a.stderr).toMatch(/invalid duration "soon"/);
    const b = run(['agent', '--kube', 'off', '--listen', '127.0.0.1:0'], { PULLWATCH_SLOW_BELOW: 'fast' });
    expect(b.status).not.toBe(0);
    expect(b.stderr).toMatch(/invalid size "fast"/);
  });
});
