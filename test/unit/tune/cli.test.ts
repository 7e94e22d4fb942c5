import { afterEach, describe, expect, it, vi } from 'vitest';
import { readdir, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import path from 'node:path';
import { main } from '../../../cli/main.js';
import { layoutCopy, pulls } from './helpers.js';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => { for (const c of cleanups.splice(0)) await c(); vi.restoreAllMocks(); process.exitCode = undefined; });

async function run(args: string[]): Promise<{ out: string; err: string; code: number | undefined }> {
  let out = '';
  let err = '';
  vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => { out += String(s); return true; });
  vi.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => { err += String(s); return true; });
  process.exitCode = undefined;
  await main(['node', 'pullwatch', ...args]);
  const code = process.exitCode as number | undefined;
  vi.restoreAllMocks();
  return { out, err, code };
}

describe('pullwatch tune CLI', () => {
  it('plan (default subcommand) prints a table; --json is the TunePlan; --history feeds the rule', async () => {
    const l = await layoutCopy('kubeadm-crio');
    cleanups.push(l.cleanup);
    const hist = path.join(l.root, 'history.json');
    await writeFile(hist, JSON.stringify({ pulls: pulls('quay.io', 25, [100_000]) }));
    const table = await run(['tune', '--host-root', l.root, '--agent-url', 'http://127.0.0.1:9']);
    expect(table.code ?? 0).toBe(0);
    expect(table.out).toContain('history: no history (agent unreachable)');
    expect(table.out).toMatch(/runtime pull progress deadline\s+0s \(default\)\s+built-in default\s+danger\s+5m0s\s+\(apply\)/);
    const json = await run(['tune', 'plan', '--json', '--host-root', l.root, '--history', hist]);
    const plan = JSON.parse(json.out);
    expect(plan.schemaVersion).toBe(1);
    expect(plan.deadline).toMatchObject({ basis: 'evidence', valueMs: 300_000 });
    expect(plan.history.source).toBe('file');
  });

  it('reads history from the agent over HTTP', async () => {
    const l = await layoutCopy('kubeadm-crio');
    cleanups.push(l.cleanup);
    const server = createServer((_req, res) => { res.end(JSON.stringify({ pulls: pulls('ghcr.io', 30, [150_000]) })); });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => server.close(() => r())));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    const json = await run(['tune', 'plan', '--json', '--host-root', l.root, '--agent-url', url]);
    const plan = JSON.parse(json.out);
    expect(plan.history).toMatchObject({ source: 'agent', pulls: 30 });
    expect(plan.deadline.valueMs).toBe(450_000);
  });

  it('apply --dry-run prints a unified diff and changes nothing; bad input is a clear error', async () => {
    const l = await layoutCopy('kubeadm-crio');
    cleanups.push(l.cleanup);
    const dry = await run(['tune', 'apply', '--dry-run', '--host-root', l.root, '--agent-url', 'http://127.0.0.1:9']);
    expect(dry.code ?? 0).toBe(0);
    expect(dry.out).toContain('--- /dev/null\n+++ b/etc/crio/crio.conf.d/99-pullwatch-tune.conf');
    expect(dry.out).toContain('+pull_progress_timeout = "5m0s"');
    expect(dry.out).toContain('+serializeImagePulls: false');
    expect(await readdir(path.join(l.root, 'etc/crio/crio.conf.d'))).toEqual(['10-crio.conf']);
    const bad = await run(['tune', 'plan', '--host-root', l.root, '--history', path.join(l.root, 'nope.json')]);
    expect(bad.code).toBe(1);
    expect(bad.err).toContain('--history');
    const badDeadline = await run(['tune', 'plan', '--host-root', l.root, '--deadline', 'soon']);
    expect(badDeadline.code).not.toBe(0);
    const harmful = await run(['tune', 'plan', '--host-root', l.root, '--deadline', '2s', '--agent-url', 'http://127.0.0.1:9']);
    expect(harmful.code).toBe(1);
    expect(harmful.err).toContain('below 10s');
  });
});
