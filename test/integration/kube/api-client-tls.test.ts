/**
 * The agent's Kubernetes client against a real HTTPS server (127.0.0.1) with a self-signed CA made by
 * openssl: TLS verification, client certificates, bearer tokens and their rotation, keep-alive,
 * JSON GET / POST / PATCH, Status errors, timeouts, and the streaming watch (events split across
 * chunks anywhere, even inside a UTF-8 character; abort; HTTP 410; garbage).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeApiError, KubeClient, loadKubeConfig } from '../../../agent/kube/api-client.js';
import { httpStatusOf } from '../../../agent/kube/client.js';

let dir: string;
let server: Server;
let base: string;
let pem: { ca: Buffer; otherCa: Buffer; serverCert: Buffer; serverKey: Buffer; clientCert: Buffer; clientKey: Buffer };
let connections = 0;
/** The TCP sockets under the TLS ones, by client port (a TLS socket cannot send an RST itself). */
const rawSockets = new Map<number, Socket>();
let acceptedToken = 'token-1';
type Handler = (req: IncomingMessage, body: string, res: ServerResponse) => void;
let handler: Handler;
const seen: Array<{ method: string; url: string; headers: IncomingMessage['headers']; body: string; clientCN?: string }> = [];

function openssl(args: string[]): void {
  try {
    execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: Buffer };
    if (e.code === 'ENOENT') throw new Error('openssl is required for this test (Debian package openssl; scripts/ensure-test-deps.sh installs it)', { cause: err });
    throw new Error(`openssl ${args.join(' ')} failed: ${e.stderr?.toString() ?? e.message}`, { cause: err });
  }
}

function makeCa(name: string): void {
  openssl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2',
    '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.crt`]);
}

function makeLeaf(name: string, ca: string, ext: string): void {
  writeFileSync(join(dir, `${name}.ext`), ext);
  openssl(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.csr`]);
  openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`, '-CAcreateserial', '-days', '2',
    '-extfile', `${name}.ext`, '-out', `${name}.crt`]);
}

function kubeconfig(cluster: string[], user: string[]): string {
  const p = join(dir, `kc-${Math.random().toString(36).slice(2)}`);
  writeFileSync(p, [
    'apiVersion: v1', 'kind: Config', 'current-context: t',
    'clusters:', '- name: c', '  cluster:', `    server: ${base}`, ...cluster.map((l) => `    ${l}`),
    'users:', '- name: u', '  user:', ...(user.length ? user.map((l) => `    ${l}`) : ['    {}']),
    'contexts:', '- name: t', '  context: {cluster: c, user: u}', '',
  ].join('\n'));
  return p;
}

const b64 = (b: Buffer): string => b.toString('base64');

function json(res: ServerResponse, status: number, obj: unknown): void {
  const body = JSON.stringify(obj);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

function statusObj(code: number, reason: string, message: string): Record<string, unknown> {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pw-kube-tls-'));
  makeCa('ca');
  makeCa('other-ca');
  makeLeaf('server', 'ca', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  makeLeaf('client', 'ca', 'extendedKeyUsage=clientAuth\n');
  const r = (f: string): Buffer => readFileSync(join(dir, f));
  pem = {
    ca: r('ca.crt'), otherCa: r('other-ca.crt'), serverCert: r('server.crt'), serverKey: r('server.key'),
    clientCert: r('client.crt'), clientKey: r('client.key'),
  };
  server = createServer({ cert: pem.serverCert, key: pem.serverKey, ca: pem.ca, requestCert: true, rejectUnauthorized: false }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const sock = req.socket as TLSSocket;
      const clientCN = sock.authorized ? String(sock.getPeerCertificate().subject?.CN ?? '') : undefined;
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body, clientCN });
      handler(req, body, res);
    });
  });
  server.on('secureConnection', () => { connections++; });
  server.on('connection', (raw: Socket) => {
    const port = raw.remotePort;
    if (port === undefined) return;
    rawSockets.set(port, raw);
    raw.on('close', () => rawSockets.delete(port));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  if (!addr || typeof addr !== 'object') throw new Error('no server address');
  base = `https://127.0.0.1:${addr.port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  seen.length = 0;
  acceptedToken = 'token-1';
  handler = (req, _body, res) => {
    if (req.headers.authorization !== `Bearer ${acceptedToken}`) { json(res, 401, statusObj(401, 'Unauthorized', 'Unauthorized')); return; }
    json(res, 200, { kind: 'Node', apiVersion: 'v1', metadata: { name: 'n1' } });
  };
});

function caClient(over: Partial<{ user: string[]; cluster: string[] }> = {}, opts: ConstructorParameters<typeof KubeClient>[1] = {}): KubeClient {
  return new KubeClient(loadKubeConfig(kubeconfig(over.cluster ?? [`certificate-authority-data: ${b64(pem.ca)}`], over.user ?? ['token: token-1'])), opts);
}

describe('TLS and credentials', { timeout: 20_000 }, () => {
  it('verifies the server against the kubeconfig CA, sends the bearer token, reuses one keep-alive connection', async () => {
    const client = caClient();
    const before = connections;
    await expect(client.getJson('/api/v1/nodes/n1', { timeoutMs: 5000 })).resolves.toMatchObject({ kind: 'Node', metadata: { name: 'n1' } });
    await expect(client.getJson('/api/v1/nodes/n1', { timeoutMs: 5000 })).resolves.toMatchObject({ kind: 'Node' });
    expect(connections - before).toBe(1);
    expect(seen[0]?.headers.authorization).toBe('Bearer token-1');
    expect(seen[0]?.headers.accept).toBe('application/json');
    client.close();
  });

  it('refuses a server its CA did not sign, unless insecure-skip-tls-verify', async () => {
    const wrong = caClient({ cluster: [`certificate-authority-data: ${b64(pem.otherCa)}`] });
    const err = await wrong.getJson('/api/v1/nodes/n1', { timeoutMs: 5000 }).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(String((err as Error).message)).toMatch(/certificate|self.signed|issuer/i);
    expect(httpStatusOf(err)).toBeUndefined();
    wrong.close();
    const system = caClient({ cluster: [] }); // system trust store: does not know our CA either
    await expect(system.getJson('/api/v1/nodes/n1', { timeoutMs: 5000 })).rejects.toThrow(/certificate|issuer/i);
    system.close();
    const insecure = caClient({ cluster: ['insecure-skip-tls-verify: true'] });
    await expect(insecure.getJson('/api/v1/nodes/n1', { timeoutMs: 5000 })).resolves.toMatchObject({ kind: 'Node' });
    insecure.close();
  });

  it('CA from a certificate-authority file; client certificate authentication from -data fields', async () => {
    writeFileSync(join(dir, 'ca-copy.crt'), pem.ca);
    handler = (req, _b, res) => json(res, 200, { kind: 'Node', metadata: { name: 'n1' }, sawAuth: req.headers.authorization ?? null });
    const client = caClient({
      cluster: ['certificate-authority: ca-copy.crt'],
      user: [`client-certificate-data: ${b64(pem.clientCert)}`, `client-key-data: ${b64(pem.clientKey)}`],
    });
    await expect(client.getJson('/api/v1/nodes/n1', { timeoutMs: 5000 })).resolves.toMatchObject({ sawAuth: null });
    expect(seen[0]?.clientCN).toBe('client');
    client.close();
  });

  it('basic auth', async () => {
    handler = (req, _b, res) => json(res, 200, { auth: req.headers.authorization });
    const client = caClient({ user: ['username: admin', 'password: "p:w"'] });
    await expect(client.getJson('/x', { timeoutMs: 5000 })).resolves.toEqual({ auth: `Basic ${Buffer.from('admin:p:w').toString('base64')}` });
    client.close();
  });

  it('a rotated token file is read again at once after a 401', async () => {
    const tokenPath = join(dir, 'sa-token');
    writeFileSync(tokenPath, 'token-1\n');
    const client = caClient({ user: [`tokenFile: ${tokenPath}`] }, { tokenRefreshMs: 3_600_000 });
    await expect(client.getJson('/api/v1/nodes/n1', { timeoutMs: 5000 })).resolves.toMatchObject({ kind: 'Node' });
    writeFileSync(tokenPath, 'token-2\n');
    acceptedToken = 'token-2';
    const err = await client.getJson('/api/v1/nodes/n1', { timeoutMs: 5000 }).then(() => undefined, (e: unknown) => e);
    expect(httpStatusOf(err)).toBe(401);
    await expect(client.getJson('/api/v1/nodes/n1', { timeoutMs: 5000 })).resolves.toMatchObject({ kind: 'Node' });
    expect(seen.map((s) => s.headers.authorization)).toEqual(['Bearer token-1', 'Bearer token-1', 'Bearer token-2']);
    client.close();
  });
});

describe('requests', { timeout: 20_000 }, () => {
  it('query strings, POST JSON, merge and strategic merge PATCH', async () => {
    handler = (req, body, res) => json(res, req.method === 'POST' ? 201 : 200, { method: req.method, echo: body ? JSON.parse(body) as unknown : null });
    const client = caClient();
    await client.getJson('/api/v1/pods', { timeoutMs: 5000, query: { fieldSelector: 'spec.nodeName=n 1', resourceVersion: '0', skipped: undefined } });
    expect(seen[0]?.url).toBe('/api/v1/pods?fieldSelector=spec.nodeName%3Dn+1&resourceVersion=0');
    await expect(client.postJson('/apis/events.k8s.io/v1/namespaces/ns/events', { note: 'é' }, { timeoutMs: 5000 })).resolves.toEqual({ method: 'POST', echo: { note: 'é' } });
    expect(seen[1]?.headers['content-type']).toBe('application/json');
    await client.patch('/apis/events.k8s.io/v1/namespaces/ns/events/e1', { series: { count: 2 } }, 'merge', { timeoutMs: 5000 });
    expect(seen[2]?.method).toBe('PATCH');
    expect(seen[2]?.headers['content-type']).toBe('application/merge-patch+json');
    await client.patch('/api/v1/nodes/n1', { metadata: { labels: { a: 'b' } } }, 'strategic', { timeoutMs: 5000 });
    expect(seen[3]?.headers['content-type']).toBe('application/strategic-merge-patch+json');
    expect(JSON.parse(seen[3]?.body ?? '')).toEqual({ metadata: { labels: { a: 'b' } } });
    client.close();
  });

  it('errors carry the HTTP status and the Status object; non-JSON answers are errors too', async () => {
    handler = (req, _b, res) => {
      if (req.url?.startsWith('/404')) json(res, 404, statusObj(404, 'NotFound', 'nodes "n9" not found'));
      else if (req.url?.startsWith('/409')) json(res, 409, statusObj(409, 'AlreadyExists', 'events "e1" already exists'));
      else if (req.url?.startsWith('/502')) { res.writeHead(502, { 'Content-Type': 'text/html' }); res.end('<html>bad gateway</html>'); }
      else { res.writeHead(200, { 'Content-Type': 'application/json' }); res.end('{"truncated": '); }
    };
    const client = caClient();
    const e404 = await client.getJson('/404', { timeoutMs: 5000 }).then(() => undefined, (e: unknown) => e);
    expect(e404).toBeInstanceOf(KubeApiError);
    expect(httpStatusOf(e404)).toBe(404);
    expect((e404 as KubeApiError).status?.reason).toBe('NotFound');
    expect((e404 as Error).message).toBe('GET /404: HTTP 404 NotFound: nodes "n9" not found');
    const e409 = await client.postJson('/409', {}, { timeoutMs: 5000 }).then(() => undefined, (e: unknown) => e);
    expect(httpStatusOf(e409)).toBe(409);
    const e502 = await client.getJson('/502', { timeoutMs: 5000 }).then(() => undefined, (e: unknown) => e);
    expect(httpStatusOf(e502)).toBe(502);
    expect((e502 as Error).message).toContain('bad gateway');
    await expect(client.getJson('/bad', { timeoutMs: 5000 })).rejects.toThrow(/not JSON/);
    client.close();
  });

  it('an API server that never answers times out (TimeoutError), no hang', async () => {
    handler = () => { /* never answers */ };
    const client = caClient();
    const t0 = Date.now();
    const err = await client.getJson('/slow', { timeoutMs: 300 }).then(() => undefined, (e: unknown) => e);
    expect((err as Error).name).toBe('TimeoutError');
    expect(Date.now() - t0).toBeLessThan(5000);
    client.close();
  });
});

describe('watch', { timeout: 20_000 }, () => {
  const pod = (name: string, rv: string): Record<string, unknown> => ({ kind: 'Pod', apiVersion: 'v1', metadata: { name, namespace: 'ns', resourceVersion: rv, annotations: { note: 'ünïcödé ✓' } } });

  it('newline-delimited events split across chunks anywhere (mid-line, mid-UTF-8 character), then a clean end', async () => {
    const lines = [
      { type: 'ADDED', object: pod('a', '10') },
      { type: 'MODIFIED', object: pod('a', '11') },
      { type: 'BOOKMARK', object: { kind: 'Pod', apiVersion: 'v1', metadata: { resourceVersion: '12' } } },
      { type: 'DELETED', object: pod('a', '13') },
    ].map((l) => JSON.stringify(l)).join('\n');
    const bytes = Buffer.from(`${lines}\n\n{"type":"ADDED","object":${JSON.stringify(pod('b', '14'))}}`); // last line without \n
    handler = (_req, _b, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
      // 7-byte chunks: cuts lines and the multi-byte characters of the annotation.
      let off = 0;
      const tick = (): void => {
        if (off >= bytes.length) { res.end(); return; }
        res.write(bytes.subarray(off, off + 7));
        off += 7;
        setImmediate(tick);
      };
      tick();
    };
    const client = caClient();
    const got: Array<[string, unknown]> = [];
    await client.watch('/api/v1/pods', (type, obj) => got.push([type, obj]), {
      query: { fieldSelector: 'spec.nodeName=n', allowWatchBookmarks: true, resourceVersion: '9', timeoutSeconds: 180 },
    });
    expect(got.map(([t]) => t)).toEqual(['ADDED', 'MODIFIED', 'BOOKMARK', 'DELETED', 'ADDED']);
    expect(got[0]?.[1]).toEqual(pod('a', '10'));
    expect(got[4]?.[1]).toEqual(pod('b', '14'));
    const url = new URL(seen[0]?.url ?? '', base);
    expect(Object.fromEntries(url.searchParams)).toEqual({ fieldSelector: 'spec.nodeName=n', allowWatchBookmarks: 'true', resourceVersion: '9', timeoutSeconds: '180', watch: 'true' });
    client.close();
  });

  it('abort ends an open watch at once; onOpen fires on the 200 headers', async () => {
    handler = (_req, _b, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write(`${JSON.stringify({ type: 'ADDED', object: pod('a', '1') })}\n`);
    };
    const client = caClient();
    const ac = new AbortController();
    let opened = false;
    let events = 0;
    const p = client.watch('/api/v1/pods', () => { events++; if (events === 1) ac.abort(); }, { signal: ac.signal, onOpen: () => { opened = true; } });
    const t0 = Date.now();
    await expect(p).resolves.toBeUndefined();
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(opened).toBe(true);
    expect(events).toBe(1);
    client.close();
  });

  it('HTTP 410 with a Status, a reset mid-stream, and a line that is not a watch event are errors', async () => {
    const client = caClient();
    handler = (_req, _b, res) => json(res, 410, statusObj(410, 'Expired', 'too old resource version: 1 (48000)'));
    const gone = await client.watch('/api/v1/pods', () => undefined).then(() => undefined, (e: unknown) => e);
    expect(httpStatusOf(gone)).toBe(410);
    expect((gone as Error).message).toContain('too old resource version');

    handler = (req, _b, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write(`${JSON.stringify({ type: 'ADDED', object: pod('a', '1') })}\n{"type":"MOD`);
      setTimeout(() => rawSockets.get(req.socket.remotePort ?? -1)?.resetAndDestroy(), 50);
    };
    const got: string[] = [];
    const reset = await client.watch('/api/v1/pods', (t) => got.push(t)).then(() => undefined, (e: unknown) => e);
    expect(reset).toBeInstanceOf(Error);
    expect(got).toEqual(['ADDED']);

    handler = (_req, _b, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write('{"kind":"Status","code":500}\n');
    };
    await expect(client.watch('/api/v1/pods', () => undefined)).rejects.toThrow(/not a watch event/);
    handler = (_req, _b, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write('<html>proxy error</html>\n');
    };
    await expect(client.watch('/api/v1/pods', () => undefined)).rejects.toThrow(/not JSON/);
    client.close();
  });
});
