/** `pullwatch collector` from the command line: flags and env, serves, stops on SIGTERM. */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { collectorOptionsFromFlags, registerCollector } from '../../../collector/cli.js';

function program(): Command {
  const p = new Command('pullwatch').exitOverride();
  registerCollector(p);
  return p;
}
import { waitFor } from './fixtures.js';

const dirs: string[] = [];
afterEach(() => { vi.restoreAllMocks(); for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true }); delete process.env.PULLWATCH_REGISTRY_NODES; });

describe('pullwatch collector (CLI)', () => {
  it('maps flags to options', () => {
    expect(collectorOptionsFromFlags({
      listen: '0.0.0.0:8080', db: 'postgres://u@h/db', retention: 86_400_000, registryNodes: 5, registryWindow: 60_000,
      heartbeatInterval: 30_000, flapWindow: 0, updateThrottle: 1000, webhook: ['http://a', 'http://b'], slackWebhook: 'https://hooks.slack.com/x',
    })).toMatchObject({ db: 'postgres://u@h/db', registryNodes: 5, webhooks: ['http://a', 'http://b'], slackWebhook: 'https://hooks.slack.com/x', flapWindowMs: 0 });
  });

  it('starts from flags and env, requires the token, stops on SIGTERM', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pullwatch-cli-'));
    dirs.push(dir);
    writeFileSync(join(dir, 'token'), 'cli-token\n');
    process.env.PULLWATCH_REGISTRY_NODES = '7';
    let stderr = '';
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => { stderr += String(chunk); return true; });
    const run = program().parseAsync([
      'node', 'pullwatch', 'collector', '--listen', '127.0.0.1:0', '--db', join(dir, 'sub', 'c.db'), '--token-file', join(dir, 'token'),
      '--retention', '2d', '--registry-window', '2m',
    ]);
    const url = (await waitFor('listening line', () => /listening on (http:\/\/\S+)/.exec(stderr)?.[1]));
    const noAuth = await fetch(`${url}/v1/heartbeat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(noAuth.status).toBe(401);
    expect((await fetch(`${url}/readyz`)).status).toBe(200);
    const dash = await fetch(`${url}/`); // the dashboard plugin is registered by the server
    expect(dash.status).toBe(200);
    expect(dash.headers.get('content-type')).toMatch(/^text\/html/);
    expect(existsSync(join(dir, 'sub', 'c.db'))).toBe(true);
    process.emit('SIGTERM');
    await run;
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
  });

  it('fails clearly on a bad duration or a missing token file', async () => {
    let stderr = '';
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => { stderr += String(chunk); return true; });
    await expect(program().configureOutput({ writeErr: (s) => { stderr += s; } })
      .parseAsync(['node', 'pullwatch', 'collector', '--retention', 'forever'])).rejects.toThrow(/invalid duration/);
    const prev = process.exitCode;
    await program().parseAsync(['node', 'pullwatch', 'collector', '--listen', '127.0.0.1:0', '--db', ':memory:', '--token-file', '/nonexistent/token']);
    expect(stderr).toContain('cannot read token file /nonexistent/token: ENOENT');
    expect(process.exitCode).toBe(1);
    process.exitCode = prev;
  });
});
