/**
 * Capture on stall: when the detector says a pull stalled, record what a support engineer would
 * want from that moment: the runtime's ingest and unpack state, recent kubelet/runtime log lines,
 * and a probe of the stalled image's own registry (DNS, TCP connect, TLS handshake with certificate
 * expiry, GET /v2/ and its auth challenge, anonymous token, timed ranged read of the stalled blob).
 * Every step has a duration and an error and is bounded by a timeout; nothing here throws.
 * No credentials are used; an anonymous token, when fetched, is never stored.
 */
import { promises as dnsp } from 'node:dns';
import { promises as fsp } from 'node:fs';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect as netConnect, isIP } from 'node:net';
import { join } from 'node:path';
import { connect as tlsConnect, type PeerCertificate } from 'node:tls';
import type { Logger } from '../../common/log.js';
import type { PullRecord } from '../model/pulls.js';
import { redactText } from '../bundle/redact.js';
import { runCommand } from '../bundle/io.js';
import { readIngests, type IngestOnDisk } from './ingests.js';

export const CAPTURE_KIND = 'pullwatch.stall-capture';
export const CAPTURE_VERSION = 1;

export interface CaptureDeps {
  /** Where the host's filesystem is (as for the bundle). */
  hostRoot: string;
  /** containerd root as this process sees it (default <hostRoot>/var/lib/containerd). */
  containerdRoot?: string;
  /** Kubelet and runtime log lines since a time (epoch ms), e.g. from the agent's log source. */
  logLines?: (sinceMs: number) => Promise<string[]>;
  logger: Logger;
  /** Bound for the whole capture (ms). Each probe step gets at most min(this/4, 10s). */
  timeoutMs: number;
  /** For the `extract-…` snapshots: ctr and the containerd socket (optional). */
  ctr?: { binary: string; socket: string; namespace?: string };
  /** Registries (host[:port]) known to be plain HTTP. Also read from certs.d hosts.toml; TLS failures that look like plain HTTP fall back too. */
  plainHttp?: string[];
  /** Extra CA certificates (PEM) trusted for the TLS check, e.g. the registry's private CA. */
  ca?: string | Buffer;
  /** Max log lines kept (default 200). */
  maxLogLines?: number;
}

export type ProbeStepName = 'dns' | 'tcp' | 'tls' | 'v2' | 'token' | 'blob-range';

export interface ProbeStep {
  name: ProbeStepName;
  ok: boolean;
  skipped?: boolean;
  durationMs: number;
  error?: string;
  note?: string;
  detail?: Record<string, unknown>;
}

export interface StallCapture {
  kind: typeof CAPTURE_KIND;
  version: number;
  pullId: string;
  capturedAt: string;
  durationMs: number;
  image: string;
  registry: string;
  repository: string;
  pull: {
    state: string; idleSeconds: number; bytesDone: number; bytesTotal: number | null; startedAt: string; lastProgressAt: string;
    layers: { digest: string; state: string; bytesDone: number; bytesTotal: number | null; idleSeconds: number }[];
  };
  ingests: { dir: string; entries: IngestOnDisk[]; error?: string };
  unpack: { activeExtractSnapshots: string[] | null; note?: string; error?: string };
  logs: { since: string; lines: string[]; error?: string } | null;
  probe: { endpoint: string; scheme: 'https' | 'http'; blobDigest: string | null; steps: ProbeStep[] };
}

/** Where a registry name is actually served (docker.io's API host). */
export function registryEndpointHost(registry: string): string {
  return registry === 'docker.io' || registry === 'index.docker.io' ? 'registry-1.docker.io' : registry;
}

function splitHostPort(hostPort: string, defPort: number): { host: string; port: number } {
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(hostPort) ?? /^([^:]+)(?::(\d+))?$/.exec(hostPort);
  if (!m) return { host: hostPort, port: defPort };
  return { host: m[1]!, port: m[2] ? Number(m[2]) : defPort };
}

async function timed<T>(name: ProbeStepName, timeoutMs: number, fn: (signal: AbortSignal) => Promise<{ ok: boolean; detail?: Record<string, unknown>; note?: string; error?: string; value?: T }>): Promise<{ step: ProbeStep; value?: T }> {
  const t0 = performance.now();
  const ac = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  try {
    const r = await Promise.race([
      fn(ac.signal),
      new Promise<never>((_, reject) => { timer = setTimeout(() => { ac.abort(); reject(new Error(`timed out after ${timeoutMs} ms`)); }, timeoutMs); }),
    ]);
    const step: ProbeStep = { name, ok: r.ok, durationMs: Math.round(performance.now() - t0) };
    if (r.detail) step.detail = r.detail;
    if (r.note) step.note = r.note;
    if (r.error) step.error = r.error;
    return r.value !== undefined ? { step, value: r.value } : { step };
  } catch (e) {
    ac.abort();
    return { step: { name, ok: false, durationMs: Math.round(performance.now() - t0), error: (e as Error).message } };
  } finally { clearTimeout(timer); }
}

function skipped(name: ProbeStepName, note: string): ProbeStep {
  return { name, ok: false, skipped: true, durationMs: 0, note };
}

interface HttpResult { status: number; headers: IncomingHttpHeaders; body: Buffer; ttfbMs: number; bodyMs: number }

function httpGet(url: string, opts: { headers?: Record<string, string>; ca?: string | Buffer; signal: AbortSignal; maxBody: number }): Promise<HttpResult> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const t0 = performance.now();
    const req = (u.protocol === 'https:' ? httpsRequest : httpRequest)(u, {
      method: 'GET', headers: { 'user-agent': 'pullwatch-capture', ...(opts.headers ?? {}) }, signal: opts.signal,
      ...(u.protocol === 'https:' ? { rejectUnauthorized: false, ...(opts.ca ? { ca: opts.ca } : {}) } : {}),
    }, (res) => {
      const ttfbMs = performance.now() - t0;
      const chunks: Buffer[] = [];
      let n = 0;
      res.on('data', (b: Buffer) => {
        if (n < opts.maxBody) { chunks.push(b.subarray(0, opts.maxBody - n)); }
        n += b.length;
        if (n >= opts.maxBody) res.destroy();
      });
      const done = (): void => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), ttfbMs, bodyMs: performance.now() - t0 - ttfbMs });
      res.on('end', done);
      res.on('close', done);
      res.on('error', (e) => (n > 0 ? done() : reject(e)));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Parses `Bearer realm="…",service="…",scope="…"` (RFC 6750 style, as Distribution sends it). */
export function parseChallenge(h: string | undefined): { scheme: string; params: Record<string, string> } | null {
  if (!h) return null;
  const m = /^\s*(\w+)\s*(.*)$/.exec(h);
  if (!m) return null;
  const params: Record<string, string> = {};
  for (const p of m[2]!.matchAll(/(\w+)\s*=\s*(?:"([^"]*)"|([^,\s]*))/g)) params[p[1]!.toLowerCase()] = p[2] ?? p[3] ?? '';
  return { scheme: m[1]!.toLowerCase(), params };
}

async function hostsTomlSaysHttp(hostRoot: string, registry: string): Promise<boolean> {
  for (const dir of ['/etc/containerd/certs.d', '/etc/docker/certs.d']) {
    const p = join(hostRoot === '/' ? dir : join(hostRoot, dir), registry, 'hosts.toml');
    try {
      const t = await fsp.readFile(p, 'utf8');
      if (/^\s*server\s*=\s*["']http:\/\//m.test(t) || /\[host\.["']http:\/\//.test(t)) return true;
    } catch { /* none */ }
  }
  return false;
}

function certDetail(c: PeerCertificate | undefined, now: number): Record<string, unknown> {
  if (!c || !c.valid_to) return { certificate: null };
  const validTo = new Date(c.valid_to);
  return {
    subject: c.subject?.CN ?? null,
    issuer: c.issuer?.CN ?? c.issuer?.O ?? null,
    subjectAltName: c.subjectaltname ?? null,
    validFrom: new Date(c.valid_from).toISOString(),
    validTo: validTo.toISOString(),
    daysToExpiry: Math.round(((validTo.getTime() - now) / 86_400_000) * 10) / 10,
    expired: validTo.getTime() < now,
    fingerprint256: c.fingerprint256,
  };
}

function isPlainHttpError(msg: string): boolean {
  return /wrong version number|packet length too long|unknown protocol|EPROTO|http request/i.test(msg);
}

/** The layer to probe: the stalled one, else the one idle longest, else any. */
function stalledBlob(pull: PullRecord): string | null {
  const layers = [...pull.layers];
  const stalled = layers.find((l) => l.state === 'stalled') ?? layers.sort((a, b) => b.idleSeconds - a.idleSeconds)[0];
  return stalled?.digest ?? null;
}

async function probeRegistry(pull: PullRecord, deps: CaptureDeps, deadline: number): Promise<StallCapture['probe']> {
  const steps: ProbeStep[] = [];
  const stepTimeout = (): number => Math.max(200, Math.min(10_000, deps.timeoutMs / 4, deadline - Date.now()));
  const endpointHost = registryEndpointHost(pull.registry);
  let plain = (deps.plainHttp ?? []).includes(pull.registry) || (await hostsTomlSaysHttp(deps.hostRoot, pull.registry));
  const hp = splitHostPort(endpointHost, plain ? 80 : 443);
  const host = hp.host;
  let port = hp.port;
  const digest = stalledBlob(pull);

  // DNS
  const dns = await timed<string>('dns', stepTimeout(), async () => {
    if (isIP(host)) return { ok: true, detail: { addresses: [host], literal: true }, value: host };
    const addrs = await dnsp.lookup(host, { all: true });
    return { ok: addrs.length > 0, detail: { addresses: addrs.map((a) => a.address) }, ...(addrs[0] ? { value: addrs[0].address } : { error: 'no addresses' }) };
  });
  steps.push(dns.step);
  const addr = dns.value;
  if (!addr) {
    for (const n of ['tcp', 'tls', 'v2', 'token', 'blob-range'] as const) steps.push(skipped(n, 'DNS failed'));
    return { endpoint: `${plain ? 'http' : 'https'}://${endpointHost}`, scheme: plain ? 'http' : 'https', blobDigest: digest, steps };
  }

  // TCP connect
  const tcp = await timed<boolean>('tcp', stepTimeout(), (signal) => new Promise((resolve, reject) => {
    const s = netConnect({ host: addr, port });
    signal.addEventListener('abort', () => s.destroy());
    s.once('connect', () => { s.destroy(); resolve({ ok: true, detail: { address: addr, port }, value: true }); });
    s.once('error', reject);
  }));
  steps.push(tcp.step);

  // TLS handshake (skipped for plain-HTTP registries)
  if (plain) steps.push(skipped('tls', 'plain-HTTP registry (configured): no TLS'));
  else if (!tcp.value) steps.push(skipped('tls', 'TCP connect failed'));
  else {
    const tls = await timed<boolean>('tls', stepTimeout(), (signal) => new Promise((resolve, reject) => {
      const s = tlsConnect({ host: addr, port, ...(isIP(host) ? {} : { servername: host }), rejectUnauthorized: false, ...(deps.ca ? { ca: deps.ca } : {}) });
      signal.addEventListener('abort', () => s.destroy());
      s.once('secureConnect', () => {
        const detail = { ...certDetail(s.getPeerCertificate(), Date.now()), protocol: s.getProtocol(), cipher: s.getCipher()?.name, authorized: s.authorized, authorizationError: s.authorizationError ? String(s.authorizationError) : null };
        s.destroy();
        resolve({ ok: true, detail, value: true });
      });
      s.once('error', reject);
    }));
    if (!tls.step.ok && tls.step.error && isPlainHttpError(tls.step.error)) {
      plain = true;
      if (port === 443 && !/:\d+$/.test(endpointHost)) port = 80;
      tls.step.note = 'server does not speak TLS: treated as a plain-HTTP registry';
      tls.step.skipped = true;
    }
    steps.push(tls.step);
  }

  const scheme = plain ? 'http' : 'https';
  const base = `${scheme}://${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
  if (!tcp.value) {
    for (const n of ['v2', 'token', 'blob-range'] as const) steps.push(skipped(n, 'TCP connect failed'));
    return { endpoint: base, scheme, blobDigest: digest, steps };
  }

  // GET /v2/ and its challenge
  const v2 = await timed<{ status: number; challenge?: string }>('v2', stepTimeout(), async (signal) => {
    const r = await httpGet(`${base}/v2/`, { signal, maxBody: 4096, ...(deps.ca ? { ca: deps.ca } : {}) });
    const challenge = typeof r.headers['www-authenticate'] === 'string' ? r.headers['www-authenticate'] : undefined;
    return {
      ok: r.status === 200 || r.status === 401,
      detail: { status: r.status, wwwAuthenticate: challenge ?? null, apiVersion: r.headers['docker-distribution-api-version'] ?? null, ttfbMs: Math.round(r.ttfbMs) },
      value: { status: r.status, ...(challenge ? { challenge } : {}) },
      ...(r.status === 200 || r.status === 401 ? {} : { error: `unexpected HTTP ${r.status}` }),
    };
  });
  steps.push(v2.step);

  // Anonymous token (Bearer challenge with a realm)
  let token: string | undefined;
  const ch = parseChallenge(v2.value?.challenge);
  if (ch?.scheme === 'bearer' && ch.params.realm) {
    const tok = await timed<string>('token', stepTimeout(), async (signal) => {
      const u = new URL(ch.params.realm!);
      if (ch.params.service) u.searchParams.set('service', ch.params.service);
      u.searchParams.set('scope', `repository:${pull.repository}:pull`);
      const r = await httpGet(u.toString(), { signal, maxBody: 64 * 1024, ...(deps.ca ? { ca: deps.ca } : {}) });
      let t: string | undefined;
      try { const j = JSON.parse(r.body.toString('utf8')) as { token?: string; access_token?: string }; t = j.token ?? j.access_token; } catch { /* not JSON */ }
      return { ok: r.status === 200 && !!t, detail: { status: r.status, realmHost: u.host, tokenReceived: !!t }, ...(t ? { value: t } : { error: `HTTP ${r.status}, no token` }) };
    });
    token = tok.value;
    steps.push(tok.step);
  } else {
    steps.push(skipped('token', ch ? `challenge scheme ${ch.scheme}: no anonymous token flow` : 'no challenge (anonymous access)'));
  }

  // Timed ranged read of the stalled blob
  if (!digest) steps.push(skipped('blob-range', 'no layer digest known for this pull'));
  else {
    const blob = await timed<boolean>('blob-range', stepTimeout(), async (signal) => {
      let url = `${base}/v2/${pull.repository}/blobs/${digest}`;
      const origin = new URL(url).host;
      const redirects: string[] = [];
      const t0 = performance.now();
      for (let i = 0; i < 4; i++) {
        const headers: Record<string, string> = { range: 'bytes=0-65535' };
        if (token && new URL(url).host === origin) headers.authorization = `Bearer ${token}`;
        const r = await httpGet(url, { headers, signal, maxBody: 65536, ...(deps.ca ? { ca: deps.ca } : {}) });
        if ([301, 302, 303, 307, 308].includes(r.status) && typeof r.headers.location === 'string') {
          const next = new URL(r.headers.location, url);
          redirects.push(next.host);
          url = next.toString();
          continue;
        }
        const ms = performance.now() - t0;
        const ok = r.status === 206 || r.status === 200;
        return {
          ok,
          detail: {
            status: r.status, bytes: r.body.length, ttfbMs: Math.round(r.ttfbMs), totalMs: Math.round(ms),
            bytesPerSecond: r.bodyMs > 0 ? Math.round(r.body.length / (r.bodyMs / 1000)) : null,
            contentRange: r.headers['content-range'] ?? null, redirectedTo: redirects,
          },
          ...(ok ? {} : { error: `HTTP ${r.status}` }),
          value: ok,
        };
      }
      return { ok: false, error: 'too many redirects', detail: { redirectedTo: redirects } };
    });
    steps.push(blob.step);
  }
  return { endpoint: base, scheme, blobDigest: digest, steps };
}

async function unpackState(deps: CaptureDeps, timeoutMs: number): Promise<StallCapture['unpack']> {
  if (!deps.ctr) return { activeExtractSnapshots: null, note: 'no containerd socket given: active extract-… snapshots not visible' };
  const r = await runCommand([deps.ctr.binary, '--address', deps.ctr.socket, '--connect-timeout', '3s', '--namespace', deps.ctr.namespace ?? 'k8s.io', 'snapshots', 'list'], { timeoutMs, cap: 1 << 20 });
  if (r.status !== 'ok') return { activeExtractSnapshots: null, error: r.error ?? r.status };
  const lines = r.stdout.toBuffer().toString('utf8').split('\n');
  return { activeExtractSnapshots: lines.filter((l) => /^extract-/.test(l.trim())).map((l) => l.trim().split(/\s+/).slice(0, 3).join(' ')) };
}

/** Records a capture for a stalled pull. Never throws; bounded by deps.timeoutMs (plus a little). */
export async function captureOnStall(pull: PullRecord, deps: CaptureDeps): Promise<StallCapture> {
  const t0 = Date.now();
  const deadline = t0 + deps.timeoutMs;
  const containerdRoot = deps.containerdRoot ?? (deps.hostRoot === '/' ? '/var/lib/containerd' : join(deps.hostRoot, 'var/lib/containerd'));
  const digests = new Set(pull.layers.map((l) => l.digest));

  const [ing, unpack, logs, probe] = await Promise.all([
    readIngests(containerdRoot).catch((e: unknown) => ({ dir: containerdRoot, ingests: [] as IngestOnDisk[], error: (e as Error).message })),
    unpackState(deps, Math.min(5000, deps.timeoutMs)).catch((e: unknown) => ({ activeExtractSnapshots: null, error: (e as Error).message })),
    (async (): Promise<StallCapture['logs']> => {
      if (!deps.logLines) return null;
      const since = Date.parse(pull.startedAt) - 60_000;
      try {
        const lines = await Promise.race([
          deps.logLines(since),
          new Promise<never>((_, rej) => setTimeout(() => rej(new Error('log lines timed out')), Math.min(5000, deps.timeoutMs)).unref()),
        ]);
        const max = deps.maxLogLines ?? 200;
        return { since: new Date(since).toISOString(), lines: lines.slice(-max).map((l) => redactText(l.slice(0, 4096))) };
      } catch (e) { return { since: new Date(since).toISOString(), lines: [], error: (e as Error).message }; }
    })(),
    probeRegistry(pull, deps, deadline).catch((e: unknown): StallCapture['probe'] => ({ endpoint: pull.registry, scheme: 'https' as const, blobDigest: null, steps: [{ name: 'dns' as const, ok: false, durationMs: 0, error: (e as Error).message }] })),
  ]);
  // ingests of this pull first, then the others (bounded)
  const mine = ing.ingests.filter((i) => i.ref && [...digests].some((d) => i.ref!.endsWith(d)));
  const others = ing.ingests.filter((i) => !mine.includes(i)).slice(0, 50);
  const capture: StallCapture = {
    kind: CAPTURE_KIND, version: CAPTURE_VERSION, pullId: pull.id, capturedAt: new Date(t0).toISOString(), durationMs: Date.now() - t0,
    image: pull.image, registry: pull.registry, repository: pull.repository,
    pull: {
      state: pull.state, idleSeconds: pull.idleSeconds, bytesDone: pull.bytesDone, bytesTotal: pull.bytesTotal, startedAt: pull.startedAt, lastProgressAt: pull.lastProgressAt,
      layers: pull.layers.map((l) => ({ digest: l.digest, state: l.state, bytesDone: l.bytesDone, bytesTotal: l.bytesTotal, idleSeconds: l.idleSeconds })),
    },
    ingests: { dir: ing.dir, entries: [...mine, ...others], ...(ing.error ? { error: ing.error } : {}) },
    unpack, logs, probe,
  };
  deps.logger.info({ pull: pull.id, image: pull.image, durationMs: capture.durationMs, probe: probe.steps.map((s) => `${s.name}:${s.skipped ? 'skip' : s.ok ? 'ok' : 'fail'}`).join(' ') }, 'stall capture recorded');
  return capture;
}
