import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { captureOnStall, parseChallenge, type CaptureDeps, type StallCapture } from '../../../agent/capture/capture.js';
import { listCaptures, saveCapture } from '../../../agent/capture/store.js';
import type { PullRecord } from '../../../agent/model/pulls.js';
import { silentLogger } from '../../../common/log.js';

const execFileP = promisify(execFile);
const REGISTRY_BIN = '/usr/bin/docker-registry';

let dir: string;
let registry: ChildProcess | undefined;
let registryHost = '';
let tlsServer: HttpsServer | undefined;
let tlsPort = 0;
let certPem = '';
let blobDigest = '';
const ANON_TOKEN = 'anon-token-must-not-be-stored-0123456789';

async function freePort(): Promise<number> {
  const s = createNetServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const a = s.address();
  await new Promise<void>((r) => s.close(() => r()));
  return typeof a === 'object' && a ? a.port : 0;
}

async function waitFor(fn: () => Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try { if (await fn()) return; } catch { /* not yet */ }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function pull(registryName: string, repository: string, digest: string): PullRecord {
  const now = new Date().toISOString();
  return {
    id: `${registryName}/${repository}:1@1`, image: `${registryName}/${repository}:1`, registry: registryName, repository, state: 'stalled',
    startedAt: new Date(Date.now() - 120_000).toISOString(), updatedAt: now, lastProgressAt: new Date(Date.now() - 90_000).toISOString(),
    idleSeconds: 90, rateBytesPerSecond: 0, bytesDone: 4096, bytesTotal: 200_000,
    layers: [{ digest, kind: 'layer', state: 'stalled', bytesDone: 4096, bytesTotal: 200_000, idleSeconds: 90, rateBytesPerSecond: 0, startedAt: now }],
    runtime: { name: 'containerd' }, pods: [], idleGapsMs: [],
  };
}

function deps(extra: Partial<CaptureDeps> = {}): CaptureDeps {
  return { hostRoot: dir, logger: silentLogger(), timeoutMs: 15_000, ...extra };
}

const step = (c: StallCapture, n: string) => c.probe.steps.find((s) => s.name === n)!;

beforeAll(async () => {
  if (!existsSync(REGISTRY_BIN)) throw new Error(`${REGISTRY_BIN} is required (apt-get install docker-registry)`);
  dir = await mkdtemp(join(tmpdir(), 'pw-capture-'));
  // real Distribution registry on 127.0.0.1:free port, temp storage
  const port = await freePort();
  registryHost = `127.0.0.1:${port}`;
  await writeFile(join(dir, 'registry.yml'), `version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: ${join(dir, 'storage')}\nhttp:\n  addr: ${registryHost}\n`);
  registry = spawn(REGISTRY_BIN, ['serve', join(dir, 'registry.yml')], { stdio: 'ignore' });
  await waitFor(async () => (await fetch(`http://${registryHost}/v2/`)).status === 200, 'docker-registry');
  // push one blob (monolithic upload)
  const blob = Buffer.alloc(200_000, 7);
  blobDigest = `sha256:${createHash('sha256').update(blob).digest('hex')}`;
  const start = await fetch(`http://${registryHost}/v2/test/app/blobs/uploads/`, { method: 'POST' });
  const loc = new URL(start.headers.get('location')!, `http://${registryHost}`);
  loc.searchParams.set('digest', blobDigest);
  const put = await fetch(loc, { method: 'PUT', body: blob, headers: { 'content-type': 'application/octet-stream' } });
  expect(put.status).toBe(201);

  // TLS "registry" with a self-signed cert, a Bearer challenge and an anonymous token endpoint
  await execFileP('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=pullwatch-test',
    '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')]);
  certPem = await readFile(join(dir, 'cert.pem'), 'utf8');
  tlsServer = createHttpsServer({ key: await readFile(join(dir, 'key.pem')), cert: certPem }, (req, res) => {
    const u = new URL(req.url ?? '/', `https://127.0.0.1:${tlsPort}`);
    if (u.pathname === '/v2/') {
      res.statusCode = 401;
      res.setHeader('www-authenticate', `Bearer realm="https://127.0.0.1:${tlsPort}/token",service="test-registry"`);
      res.end('{}');
    } else if (u.pathname === '/token') {
      const ok = u.searchParams.get('scope') === 'repository:team/app:pull' && !req.headers.authorization;
      res.statusCode = ok ? 200 : 400;
      res.end(JSON.stringify(ok ? { token: ANON_TOKEN } : {}));
    } else if (u.pathname.startsWith('/v2/team/app/blobs/')) {
      if (req.headers.authorization !== `Bearer ${ANON_TOKEN}`) { res.statusCode = 401; res.end(); return; }
      if (req.headers.range !== 'bytes=0-65535') { res.statusCode = 400; res.end(); return; }
      res.statusCode = 206;
      res.setHeader('content-range', 'bytes 0-65535/200000');
      res.end(Buffer.alloc(65536, 1));
    } else { res.statusCode = 404; res.end(); }
  });
  await new Promise<void>((r) => tlsServer!.listen(0, '127.0.0.1', r));
  const a = tlsServer.address();
  tlsPort = typeof a === 'object' && a ? a.port : 0;

  // an ingest of the stalled layer on disk
  const ing = join(dir, 'var/lib/containerd/io.containerd.content.v1.content/ingest/abc');
  await mkdir(ing, { recursive: true });
  await writeFile(join(ing, 'ref'), `k8s.io/7/layer-${blobDigest}`);
  await writeFile(join(ing, 'total'), '200000');
  await writeFile(join(ing, 'data'), Buffer.alloc(4096));
}, 60_000);

afterAll(async () => {
  if (registry?.pid) { try { process.kill(registry.pid, 'SIGKILL'); } catch { /* gone */ } }
  tlsServer?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('captureOnStall', () => {
  it('probes a real plain-HTTP registry (docker-registry): TLS skipped and noted, ranged read of the stalled blob', async () => {
    const c = await captureOnStall(pull(registryHost, 'test/app', blobDigest), deps({
      logLines: async () => ['I1121 kubelet "Pulling image" image="x"', 'containerd msg="PullImage" password=Planted-Log-Pa55'],
    }));
    expect(c.kind).toBe('pullwatch.stall-capture');
    expect(step(c, 'dns')).toMatchObject({ ok: true });
    expect(step(c, 'tcp')).toMatchObject({ ok: true });
    expect(step(c, 'tls')).toMatchObject({ skipped: true });
    expect(step(c, 'tls').note).toMatch(/plain HTTP|plain-HTTP/i);
    expect(c.probe.scheme).toBe('http');
    expect(step(c, 'v2')).toMatchObject({ ok: true, detail: { status: 200 } });
    expect(step(c, 'token')).toMatchObject({ skipped: true });
    expect(step(c, 'blob-range')).toMatchObject({ ok: true, detail: { status: 206, bytes: 65536 } });
    for (const s of c.probe.steps) expect(typeof s.durationMs).toBe('number');
    expect(c.ingests.entries[0]).toMatchObject({ ref: `k8s.io/7/layer-${blobDigest}`, offset: 4096, total: 200000 });
    expect(c.unpack.activeExtractSnapshots).toBeNull();
    expect(c.logs!.lines).toHaveLength(2);
    expect(JSON.stringify(c)).not.toContain('Planted-Log-Pa55');
  });

  it('TLS registry: certificate expiry, Bearer challenge, anonymous token (never stored), authorized ranged read', async () => {
    const c = await captureOnStall(pull(`127.0.0.1:${tlsPort}`, 'team/app', 'sha256:' + 'b'.repeat(64)), deps());
    const tls = step(c, 'tls');
    expect(tls.ok).toBe(true);
    expect(tls.detail!.authorized).toBe(false);
    expect(tls.detail!.daysToExpiry as number).toBeGreaterThan(1.5);
    expect(tls.detail!.daysToExpiry as number).toBeLessThanOrEqual(2);
    expect(tls.detail!.subject).toBe('pullwatch-test');
    expect(step(c, 'v2').detail).toMatchObject({ status: 401 });
    expect(String(step(c, 'v2').detail!.wwwAuthenticate)).toMatch(/^Bearer realm=/);
    expect(step(c, 'token')).toMatchObject({ ok: true, detail: { tokenReceived: true } });
    expect(step(c, 'blob-range')).toMatchObject({ ok: true, detail: { status: 206, bytes: 65536, contentRange: 'bytes 0-65535/200000' } });
    expect(JSON.stringify(c)).not.toContain(ANON_TOKEN);

    const trusted = await captureOnStall(pull(`127.0.0.1:${tlsPort}`, 'team/app', 'sha256:' + 'b'.repeat(64)), deps({ ca: certPem }));
    expect(step(trusted, 'tls').detail!.authorized).toBe(true);
  });

  it('unreachable registry: every step bounded, errors recorded, never throws', async () => {
    const port = await freePort();
    const t0 = Date.now();
    const c = await captureOnStall(pull(`127.0.0.1:${port}`, 'x/y', 'sha256:' + 'c'.repeat(64)), deps({ timeoutMs: 4000 }));
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(step(c, 'tcp')).toMatchObject({ ok: false });
    expect(step(c, 'tcp').error).toMatch(/ECONNREFUSED/);
    expect(step(c, 'blob-range')).toMatchObject({ skipped: true });
    const bad = await captureOnStall(pull('does-not-exist.invalid', 'x/y', 'sha256:' + 'c'.repeat(64)), deps({ timeoutMs: 4000 }));
    expect(step(bad, 'dns')).toMatchObject({ ok: false });
  });

  it('parses registry challenges', () => {
    expect(parseChallenge('Bearer realm="https://auth.docker.io/token",service="registry.docker.io"')).toEqual({ scheme: 'bearer', params: { realm: 'https://auth.docker.io/token', service: 'registry.docker.io' } });
    expect(parseChallenge('Basic realm="Registry"')!.scheme).toBe('basic');
    expect(parseChallenge(undefined)).toBeNull();
  });

  it('saveCapture/listCaptures round-trip, oldest pruned', async () => {
    const d = join(dir, 'captures');
    for (let i = 0; i < 4; i++) await saveCapture(d, { pullId: `img:${i}@x`, capturedAt: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString() }, 3);
    const list = await listCaptures(d);
    expect(list).toHaveLength(3);
    expect(list[0]!.name).toMatch(/^2026-01-01T00-00-01/);
    expect(await listCaptures(join(dir, 'none'))).toEqual([]);
  });
});
