/**
 * The agent's own Kubernetes API client: just what a node agent needs (JSON GET, a streaming watch,
 * POST and PATCH), on node:https / node:http with one keep-alive Agent.
 *
 * Why not @kubernetes/client-node: loading its module graph (even dist/config.js pulls in every
 * generated model) costs 40–75 MiB of RSS in a process whose whole budget is 80 MiB, on every node
 * of the fleet.
 *
 * Credentials:
 *  - in-cluster (input undefined or "in-cluster"): KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT,
 *    the service account's ca.crt, and its token, re-read every minute like client-go does (bound
 *    service-account tokens rotate, the kubelet rewrites the file) and at once after a 401;
 *  - a kubeconfig file (current-context): server, certificate-authority(-data),
 *    insecure-skip-tls-verify, tls-server-name; user token, tokenFile, client-certificate(-data) +
 *    client-key(-data), username/password. exec and auth-provider plugins are refused with a
 *    clear KubeConfigError.
 */
import { readFileSync } from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import { dirname, isAbsolute, join } from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

/**
 * `undefined` or "in-cluster": the pod's service account. Any other string: path of a kubeconfig file.
 */
export type KubeConfigInput = string | undefined;

export class KubeConfigError extends Error {
  override name = 'KubeConfigError';
}

/** A Kubernetes Status object (the body of every API error). */
export interface KubeStatus {
  kind?: string;
  status?: string;
  message?: string;
  reason?: string;
  code?: number;
}

const statusSchema = z.object({
  kind: z.literal('Status'),
  status: z.string().optional(),
  message: z.string().optional(),
  reason: z.string().optional(),
  code: z.number().int().optional(),
}).passthrough();

/** An answer other than 2xx. `statusCode` is what httpStatusOf (client.ts) reads. */
export class KubeApiError extends Error {
  override name = 'KubeApiError';
  constructor(
    readonly statusCode: number,
    readonly method: string,
    readonly path: string,
    readonly status: KubeStatus | undefined,
    bodySnippet: string,
  ) {
    const detail = status
      ? `${status.reason ?? ''}${status.reason && status.message ? ': ' : ''}${status.message ?? ''}`
      : bodySnippet;
    super(`${method} ${path}: HTTP ${statusCode}${detail ? ` ${detail}` : ''}`);
  }
}

export type KubeAuth =
  | { kind: 'none' }
  | { kind: 'token'; token: string }
  | { kind: 'tokenFile'; path: string }
  | { kind: 'basic'; username: string; password: string };

/** Everything needed to reach one API server, resolved and read from disk. */
export interface ResolvedKubeConfig {
  server: URL;
  /** PEM CA bundle; undefined = the system's trust store. */
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  insecureSkipTlsVerify: boolean;
  tlsServerName?: string;
  auth: KubeAuth;
  /** Where it came from, for messages. */
  origin: string;
}

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export interface LoadKubeConfigOptions {
  env?: NodeJS.ProcessEnv;
  /** Service account directory (tests). */
  serviceAccountDir?: string;
}

// ---- kubeconfig ---------------------------------------------------------------------------------

const str = z.string();
const kubeconfigSchema = z.object({
  'current-context': z.string().optional(),
  clusters: z.array(z.object({
    name: str,
    cluster: z.object({
      server: z.string().min(1, 'server is required'),
      'certificate-authority': z.string().optional(),
      'certificate-authority-data': z.string().optional(),
      'insecure-skip-tls-verify': z.boolean().optional(),
      'tls-server-name': z.string().optional(),
      'proxy-url': z.string().optional(),
    }).passthrough(),
  })).nullish(),
  users: z.array(z.object({
    name: str,
    user: z.object({
      token: z.string().optional(),
      tokenFile: z.string().optional(),
      'client-certificate': z.string().optional(),
      'client-certificate-data': z.string().optional(),
      'client-key': z.string().optional(),
      'client-key-data': z.string().optional(),
      username: z.string().optional(),
      password: z.string().optional(),
      exec: z.unknown().optional(),
      'auth-provider': z.unknown().optional(),
    }).passthrough().nullish(),
  })).nullish(),
  contexts: z.array(z.object({
    name: str,
    context: z.object({ cluster: str, user: z.string().optional(), namespace: z.string().optional() }).passthrough(),
  })).nullish(),
}).passthrough();

function zodMessage(err: z.ZodError): string {
  const first = err.issues[0];
  return first ? `${first.path.join('.') || '(root)'}: ${first.message}` : 'invalid';
}

function base64Field(value: string, field: string, origin: string): Buffer {
  const clean = value.replace(/\s+/g, '');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(clean) || clean.length === 0) {
    throw new KubeConfigError(`${origin}: ${field} is not valid base64`);
  }
  return Buffer.from(clean, 'base64');
}

function readConfigFile(path: string, field: string, origin: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new KubeConfigError(`${origin}: cannot read ${field} ${path}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

function parseServer(server: string, origin: string): URL {
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw new KubeConfigError(`${origin}: server ${JSON.stringify(server)} is not a URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new KubeConfigError(`${origin}: server ${JSON.stringify(server)} must be http:// or https://`);
  }
  return url;
}

/** Parses kubeconfig text (its directory resolves relative file paths, as kubectl does). */
export function parseKubeConfig(text: string, origin: string, baseDir: string): ResolvedKubeConfig {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new KubeConfigError(`${origin}: not valid YAML: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
  }
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) throw new KubeConfigError(`${origin}: not a kubeconfig (expected a mapping)`);
  const parsed = kubeconfigSchema.safeParse(doc);
  if (!parsed.success) throw new KubeConfigError(`${origin}: malformed kubeconfig: ${zodMessage(parsed.error)}`);
  const kc = parsed.data;
  const contextName = kc['current-context'];
  if (!contextName) throw new KubeConfigError(`${origin}: no current-context`);
  const context = kc.contexts?.find((c) => c.name === contextName)?.context;
  if (!context) throw new KubeConfigError(`${origin}: current-context ${JSON.stringify(contextName)} is not in contexts`);
  const cluster = kc.clusters?.find((c) => c.name === context.cluster)?.cluster;
  if (!cluster) throw new KubeConfigError(`${origin}: cluster ${JSON.stringify(context.cluster)} of context ${JSON.stringify(contextName)} is not in clusters`);
  const resolvePath = (p: string): string => (isAbsolute(p) ? p : join(baseDir, p));

  const out: ResolvedKubeConfig = {
    server: parseServer(cluster.server, origin),
    insecureSkipTlsVerify: cluster['insecure-skip-tls-verify'] === true,
    auth: { kind: 'none' },
    origin,
  };
  if (cluster['proxy-url']) throw new KubeConfigError(`${origin}: cluster proxy-url is not supported by the pullwatch agent`);
  if (cluster['certificate-authority-data']) {
    out.ca = base64Field(cluster['certificate-authority-data'], 'certificate-authority-data', origin);
  } else if (cluster['certificate-authority']) {
    out.ca = readConfigFile(resolvePath(cluster['certificate-authority']), 'certificate-authority', origin);
  }
  if (cluster['tls-server-name']) out.tlsServerName = cluster['tls-server-name'];

  if (context.user !== undefined && context.user !== '') {
    const entry = kc.users?.find((u) => u.name === context.user);
    if (!entry) throw new KubeConfigError(`${origin}: user ${JSON.stringify(context.user)} of context ${JSON.stringify(contextName)} is not in users`);
    const user = entry.user ?? {};
    if (user.exec !== undefined && user.exec !== null) {
      throw new KubeConfigError(`${origin}: user ${JSON.stringify(entry.name)} uses an exec credential plugin, which the pullwatch agent does not support; use a token, tokenFile or client certificate (or the in-cluster service account)`);
    }
    if (user['auth-provider'] !== undefined && user['auth-provider'] !== null) {
      throw new KubeConfigError(`${origin}: user ${JSON.stringify(entry.name)} uses an auth-provider plugin, which the pullwatch agent does not support; use a token, tokenFile or client certificate (or the in-cluster service account)`);
    }
    const certData = user['client-certificate-data'];
    const certFile = user['client-certificate'];
    const keyData = user['client-key-data'];
    const keyFile = user['client-key'];
    if (certData) out.cert = base64Field(certData, 'client-certificate-data', origin);
    else if (certFile) out.cert = readConfigFile(resolvePath(certFile), 'client-certificate', origin);
    if (keyData) out.key = base64Field(keyData, 'client-key-data', origin);
    else if (keyFile) out.key = readConfigFile(resolvePath(keyFile), 'client-key', origin);
    if ((out.cert === undefined) !== (out.key === undefined)) {
      throw new KubeConfigError(`${origin}: user ${JSON.stringify(entry.name)} has a client certificate without a key or a key without a certificate`);
    }
    if (user.token) out.auth = { kind: 'token', token: user.token.trim() };
    else if (user.tokenFile) out.auth = { kind: 'tokenFile', path: resolvePath(user.tokenFile) };
    else if (user.username !== undefined || user.password !== undefined) {
      if (!user.username || user.password === undefined) {
        throw new KubeConfigError(`${origin}: user ${JSON.stringify(entry.name)} needs both username and password`);
      }
      out.auth = { kind: 'basic', username: user.username, password: user.password };
    }
  }
  if (out.server.protocol === 'http:' && out.auth.kind !== 'none' && !out.insecureSkipTlsVerify) {
    throw new KubeConfigError(`${origin}: refusing to send credentials to ${out.server.origin} over plain http`);
  }
  return out;
}

/** Loads the in-cluster service account or a kubeconfig file; every problem is a KubeConfigError. */
export function loadKubeConfig(input: KubeConfigInput, opts: LoadKubeConfigOptions = {}): ResolvedKubeConfig {
  if (input === undefined || input === 'in-cluster') return loadInCluster(opts);
  let text: string;
  try {
    text = readFileSync(input, 'utf8');
  } catch (err) {
    throw new KubeConfigError(`cannot load kubeconfig ${input}: ${err instanceof Error ? err.message : String(err)}`);
  }
  return parseKubeConfig(text, `kubeconfig ${input}`, dirname(input));
}

function loadInCluster(opts: LoadKubeConfigOptions): ResolvedKubeConfig {
  const env = opts.env ?? process.env;
  const dir = opts.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host) throw new KubeConfigError('not running in a cluster (KUBERNETES_SERVICE_HOST unset); pass a kubeconfig path or --kube off');
  if (!port || !/^\d{1,5}$/.test(port)) throw new KubeConfigError(`in-cluster: KUBERNETES_SERVICE_PORT ${JSON.stringify(port ?? '')} is not a port`);
  const hostPart = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  const origin = 'in-cluster service account';
  const server = parseServer(`https://${hostPart}:${port}`, origin);
  const ca = readConfigFile(join(dir, 'ca.crt'), 'service account CA', origin);
  const tokenPath = join(dir, 'token');
  // Fail early and clearly when the token is missing; it is re-read on use.
  readConfigFile(tokenPath, 'service account token', origin);
  return { server, ca, insecureSkipTlsVerify: false, auth: { kind: 'tokenFile', path: tokenPath }, origin };
}

// ---- client -------------------------------------------------------------------------------------

export interface KubeClientOptions {
  /** Re-read a token file this often (client-go: 1 min). */
  tokenRefreshMs?: number;
  now?: () => number;
  /** Largest JSON answer accepted (bytes). Default 64 MiB. */
  maxResponseBytes?: number;
  /** Largest single watch event line (bytes). Default 16 MiB. */
  maxWatchLineBytes?: number;
}

export interface RequestOptions {
  timeoutMs: number;
  query?: Record<string, string | number | boolean | undefined>;
}

export type PatchType = 'merge' | 'strategic';
const PATCH_CONTENT_TYPE: Record<PatchType, string> = {
  merge: 'application/merge-patch+json',
  strategic: 'application/strategic-merge-patch+json',
};

export interface WatchOptions {
  query?: Record<string, string | number | boolean | undefined>;
  /** Aborting ends the watch; the returned promise then resolves. */
  signal?: AbortSignal;
  /** Called once the server accepted the watch (HTTP 200 headers). */
  onOpen?: () => void;
}

const watchEventSchema = z.object({ type: z.string().min(1), object: z.unknown() });

export class KubeClient {
  readonly config: ResolvedKubeConfig;
  private readonly agent: http.Agent;
  private readonly transport: typeof http | typeof https;
  private readonly tokenRefreshMs: number;
  private readonly now: () => number;
  private readonly maxResponseBytes: number;
  private readonly maxWatchLineBytes: number;
  private cachedToken: { token: string; readAt: number } | undefined;

  constructor(config: ResolvedKubeConfig, opts: KubeClientOptions = {}) {
    this.config = config;
    this.tokenRefreshMs = opts.tokenRefreshMs ?? 60_000;
    this.now = opts.now ?? Date.now;
    this.maxResponseBytes = opts.maxResponseBytes ?? 64 * 1024 * 1024;
    this.maxWatchLineBytes = opts.maxWatchLineBytes ?? 16 * 1024 * 1024;
    if (config.server.protocol === 'https:') {
      this.transport = https;
      const tls: https.AgentOptions = { keepAlive: true, rejectUnauthorized: !config.insecureSkipTlsVerify };
      if (config.ca) tls.ca = config.ca;
      if (config.cert) tls.cert = config.cert;
      if (config.key) tls.key = config.key;
      if (config.tlsServerName) tls.servername = config.tlsServerName;
      this.agent = new https.Agent(tls);
    } else {
      this.transport = http;
      this.agent = new http.Agent({ keepAlive: true });
    }
  }

  static fromInput(input: KubeConfigInput, opts: KubeClientOptions & LoadKubeConfigOptions = {}): KubeClient {
    return new KubeClient(loadKubeConfig(input, opts), opts);
  }

  /** The bearer token now (re-reading a token file when due). Exposed for tests. */
  currentToken(): string | undefined {
    const auth = this.config.auth;
    if (auth.kind === 'token') return auth.token;
    if (auth.kind !== 'tokenFile') return undefined;
    const now = this.now();
    if (this.cachedToken && now - this.cachedToken.readAt < this.tokenRefreshMs) return this.cachedToken.token;
    try {
      const token = readFileSync(auth.path, 'utf8').trim();
      if (!token) throw new Error('empty');
      this.cachedToken = { token, readAt: now };
    } catch (err) {
      // Keep using the last good token (client-go does too); fail only if there never was one.
      if (!this.cachedToken) throw new KubeConfigError(`${this.config.origin}: cannot read token file ${auth.path}: ${err instanceof Error ? err.message : String(err)}`);
      this.cachedToken.readAt = now;
    }
    return this.cachedToken.token;
  }

  async getJson(path: string, opts: RequestOptions): Promise<unknown> {
    return this.requestJson('GET', path, undefined, undefined, opts);
  }

  async postJson(path: string, body: unknown, opts: RequestOptions): Promise<unknown> {
    return this.requestJson('POST', path, JSON.stringify(body), 'application/json', opts);
  }

  async patch(path: string, body: unknown, patchType: PatchType, opts: RequestOptions): Promise<unknown> {
    return this.requestJson('PATCH', path, JSON.stringify(body), PATCH_CONTENT_TYPE[patchType], opts);
  }

  /**
   * Streams a watch: calls onEvent(type, object) for every newline-delimited JSON event. Resolves
   * when the server ends the stream or the signal aborts; rejects on a non-200 answer (KubeApiError),
   * a network error, or a line that is not a watch event.
   */
  watch(path: string, onEvent: (type: string, object: unknown) => void, opts: WatchOptions = {}): Promise<void> {
    const query = { ...opts.query, watch: true };
    return new Promise<void>((resolve, reject) => {
      let done = false;
      let req: http.ClientRequest | undefined;
      const finish = (err?: unknown): void => {
        if (done) return;
        done = true;
        opts.signal?.removeEventListener('abort', onAbort);
        if (err) reject(err instanceof Error ? err : new Error(String(err)));
        else resolve();
      };
      const onAbort = (): void => {
        finish();
        req?.destroy();
      };
      if (opts.signal?.aborted) { finish(); return; }
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      try {
        req = this.request('GET', path, query, undefined, undefined);
      } catch (err) {
        finish(err);
        return;
      }
      req.on('error', (err) => finish(done ? undefined : err));
      req.on('response', (res) => {
        const status = res.statusCode ?? 0;
        if (status !== 200) {
          this.readBody(res, 64 * 1024).then(
            (body) => finish(this.apiError(status, 'GET', path, body)),
            (err: unknown) => finish(err),
          );
          return;
        }
        opts.onOpen?.();
        const decoder = new StringDecoder('utf8');
        let buf = '';
        const fail = (err: Error): void => {
          finish(err);
          req?.destroy();
        };
        const consume = (text: string): void => {
          buf += text;
          let nl: number;
          while (!done && (nl = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, nl).trim();
            buf = buf.slice(nl + 1);
            if (line) this.dispatchWatchLine(line, onEvent, fail);
          }
          if (buf.length > this.maxWatchLineBytes) fail(new Error(`watch ${path}: event larger than ${this.maxWatchLineBytes} bytes`));
        };
        res.on('data', (chunk: Buffer) => { if (!done) consume(decoder.write(chunk)); });
        res.on('end', () => {
          if (done) return;
          const rest = (buf + decoder.end()).trim();
          buf = '';
          if (rest) this.dispatchWatchLine(rest, onEvent, fail);
          finish();
        });
        res.on('error', (err) => finish(err));
        // A stream cut by a reset surfaces as 'aborted' / close without 'end'.
        res.on('close', () => {
          if (!done && !res.complete) finish(new Error(`watch ${path}: connection closed mid-stream`));
        });
      });
      req.end();
    });
  }

  /** Closes idle keep-alive connections. */
  close(): void {
    this.agent.destroy();
  }

  // ---- internals ----------------------------------------------------------------------------

  private dispatchWatchLine(line: string, onEvent: (type: string, object: unknown) => void, fail: (err: Error) => void): void {
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch {
      fail(new Error(`watch: not JSON: ${line.slice(0, 200)}`));
      return;
    }
    const ev = watchEventSchema.safeParse(raw);
    if (!ev.success) {
      fail(new Error(`watch: not a watch event: ${line.slice(0, 200)}`));
      return;
    }
    onEvent(ev.data.type, ev.data.object);
  }

  private request(
    method: string,
    path: string,
    query: Record<string, string | number | boolean | undefined> | undefined,
    contentType: string | undefined,
    body: string | undefined,
  ): http.ClientRequest {
    const url = new URL(path, this.config.server);
    // Keep a path prefix of the server URL (e.g. https://host/k8s/clusters/c-1).
    const prefix = this.config.server.pathname.replace(/\/+$/, '');
    url.pathname = `${prefix}${path.startsWith('/') ? '' : '/'}${path}`;
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined) url.searchParams.set(k, String(v));
    }
    const headers: http.OutgoingHttpHeaders = { Accept: 'application/json', 'User-Agent': 'pullwatch-agent' };
    const auth = this.config.auth;
    if (auth.kind === 'basic') {
      headers.Authorization = `Basic ${Buffer.from(`${auth.username}:${auth.password}`).toString('base64')}`;
    } else {
      const token = this.currentToken();
      if (token) headers.Authorization = `Bearer ${token}`;
    }
    if (contentType) headers['Content-Type'] = contentType;
    if (body !== undefined) headers['Content-Length'] = Buffer.byteLength(body);
    const req = this.transport.request(url, { method, headers, agent: this.agent });
    req.on('response', (res) => {
      // A rotated token: read the file again on the next request instead of waiting a minute.
      if (res.statusCode === 401) this.cachedToken = undefined;
    });
    if (body !== undefined) req.write(body);
    return req;
  }

  private requestJson(method: string, path: string, body: string | undefined, contentType: string | undefined, opts: RequestOptions): Promise<unknown> {
    return new Promise<unknown>((resolve, reject) => {
      let done = false;
      let req: http.ClientRequest | undefined;
      const timer = setTimeout(() => {
        const err = new Error(`${method} ${path}: no answer within ${opts.timeoutMs} ms`);
        err.name = 'TimeoutError';
        finish(err);
        req?.destroy();
      }, opts.timeoutMs);
      const finish = (err: unknown, value?: unknown): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        if (err) reject(err instanceof Error ? err : new Error(String(err)));
        else resolve(value);
      };
      try {
        req = this.request(method, path, opts.query, contentType, body);
      } catch (err) {
        finish(err);
        return;
      }
      req.on('error', (err) => finish(err));
      req.on('response', (res) => {
        const status = res.statusCode ?? 0;
        this.readBody(res, this.maxResponseBytes).then((text) => {
          if (status < 200 || status >= 300) { finish(this.apiError(status, method, path, text)); return; }
          if (!text.trim()) { finish(undefined, undefined); return; }
          try {
            finish(undefined, JSON.parse(text) as unknown);
          } catch {
            finish(new Error(`${method} ${path}: HTTP ${status} answer is not JSON: ${text.slice(0, 200)}`));
          }
        }, (err: unknown) => finish(err));
      });
      req.end();
    });
  }

  private readBody(res: http.IncomingMessage, limit: number): Promise<string> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > limit) {
          res.destroy(new Error(`answer larger than ${limit} bytes`));
          return;
        }
        chunks.push(c);
      });
      res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
      res.on('error', reject);
      res.on('close', () => { if (!res.complete) reject(new Error('connection closed before the answer was complete')); });
    });
  }

  private apiError(statusCode: number, method: string, path: string, body: string): KubeApiError {
    let status: KubeStatus | undefined;
    try {
      const r = statusSchema.safeParse(JSON.parse(body));
      if (r.success) status = r.data;
    } catch { /* not JSON: keep the text */ }
    return new KubeApiError(statusCode, method, path, status, body.trim().slice(0, 200));
  }
}
