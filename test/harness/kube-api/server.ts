/**
 * A small Kubernetes API server for tests: the real paths, list/watch protocol and status shapes
 * (built from test/fixtures/kube), plus controls to break it the ways real API servers and load
 * balancers break.
 *
 *   GET   /api/v1/pods?fieldSelector=spec.nodeName=NODE          list (metadata.resourceVersion)
 *   GET   /api/v1/pods?watch=true&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=N
 *         chunked stream of {"type":ADDED|MODIFIED|DELETED|BOOKMARK|ERROR,"object":…} lines
 *   GET   /api/v1/nodes/NAME
 *   POST  /apis/events.k8s.io/v1/namespaces/NS/events             validated like validateEventCreate
 *   PATCH /apis/events.k8s.io/v1/namespaces/NS/events/NAME         merge patch, immutables enforced
 *
 * Controls: addPod/modifyPod/deletePod, resetWatches (TCP RST), silenceWatches (connection stays
 * open, nothing more is written), compact (old resourceVersions → ERROR 410), failNextWatches
 * (HTTP 410 or 500), down/up (listener closed: connection refused), failEvents.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'fixtures', 'kube');

export function fixture<T = Record<string, unknown>>(name: string): T {
  return JSON.parse(readFileSync(join(FIXTURES, name), 'utf8')) as T;
}

type Json = Record<string, unknown>;

export interface ContainerSpec {
  name: string;
  image: string;
  /** Waiting reason (ContainerCreating, ErrImagePull, ImagePullBackOff…); undefined = running. */
  waiting?: string;
  message?: string;
}

export interface PodSpecInput {
  namespace: string;
  name: string;
  nodeName: string;
  containers: ContainerSpec[];
  uid?: string;
}

/** A Pod object shaped like fixtures/kube/pod-imagepullbackoff.json. */
export function makePod(p: PodSpecInput): Json {
  const pod = fixture<Json>('pod-imagepullbackoff.json');
  const md = pod.metadata as Json;
  md.name = p.name;
  md.namespace = p.namespace;
  md.uid = p.uid ?? randomUUID();
  delete md.generateName;
  const spec = pod.spec as Json;
  const template = (spec.containers as Json[])[0] as Json;
  spec.nodeName = p.nodeName;
  spec.containers = p.containers.map((c) => ({ ...structuredClone(template), name: c.name, image: c.image }));
  const status = pod.status as Json;
  const csTemplate = (status.containerStatuses as Json[])[0] as Json;
  status.containerStatuses = p.containers.map((c) => {
    const cs: Json = { ...structuredClone(csTemplate), name: c.name, image: c.image };
    cs.state = c.waiting
      ? { waiting: { reason: c.waiting, ...(c.message ? { message: c.message } : {}) } }
      : { running: { startedAt: '2024-11-07T14:05:00Z' } };
    cs.ready = !c.waiting;
    cs.started = !c.waiting;
    return cs;
  });
  status.phase = p.containers.some((c) => c.waiting) ? 'Pending' : 'Running';
  return pod;
}

interface HistoryEntry { rv: number; type: 'ADDED' | 'MODIFIED' | 'DELETED'; object: Json }

interface Watcher {
  res: ServerResponse;
  socket: Socket;
  nodeName: string | undefined;
  silent: boolean;
  bookmarks: boolean;
  timers: NodeJS.Timeout[];
}

export interface RequestLogEntry { at: number; method: string; path: string; query: string; status: number }

export interface FakeKubeApiOptions {
  /** BOOKMARK every this many ms on watches that asked for them (real servers: about a minute). */
  bookmarkIntervalMs?: number;
  nodeName?: string;
  containerRuntimeVersion?: string;
  kubeletVersion?: string;
}

export class FakeKubeApi {
  private server: Server;
  private port = 0;
  private rv = 48_000;
  /** Oldest resourceVersion a watch may resume from; older → 410. */
  private compactedRv = 48_000;
  private readonly pods = new Map<string, Json>();
  private history: HistoryEntry[] = [];
  private readonly watchers = new Set<Watcher>();
  private readonly sockets = new Set<Socket>();
  private failWatches: Array<{ status: number }> = [];
  private failEventRequests: Array<{ status: number }> = [];
  private isDown = false;
  private loseResponses = 0;
  readonly nodes = new Map<string, Json>();
  /** Stored events by "ns/name". */
  readonly events = new Map<string, Json>();
  readonly requests: RequestLogEntry[] = [];
  private readonly bookmarkIntervalMs: number;

  private constructor(opts: FakeKubeApiOptions) {
    this.bookmarkIntervalMs = opts.bookmarkIntervalMs ?? 60_000;
    this.server = createServer((req, res) => this.route(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    if (opts.nodeName) this.setNode(opts.nodeName, opts.containerRuntimeVersion, opts.kubeletVersion);
  }

  static async start(opts: FakeKubeApiOptions = {}): Promise<FakeKubeApi> {
    const api = new FakeKubeApi(opts);
    await api.listen(0);
    return api;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** A kubeconfig pointing at this server (plain HTTP, no credentials), written into dir. */
  writeKubeconfig(dir: string): string {
    const path = join(dir, 'kubeconfig.yaml');
    writeFileSync(path, [
      'apiVersion: v1', 'kind: Config', 'current-context: test',
      // client-node refuses plain http unless TLS verification is explicitly off.
      'clusters:', '- name: test', '  cluster:', `    server: ${this.url}`, '    insecure-skip-tls-verify: true',
      'users:', '- name: test', '  user: {}',
      'contexts:', '- name: test', '  context:', '    cluster: test', '    user: test',
      '',
    ].join('\n'));
    return path;
  }

  private listen(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, '127.0.0.1', () => {
        this.server.off('error', reject);
        const addr = this.server.address();
        if (addr && typeof addr === 'object') this.port = addr.port;
        resolve();
      });
    });
  }

  async close(): Promise<void> {
    for (const w of this.watchers) this.endWatcher(w);
    for (const s of this.sockets) s.destroy();
    if (this.server.listening) await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  // ---- state --------------------------------------------------------------------------------

  setNode(name: string, containerRuntimeVersion = 'containerd://1.7.24', kubeletVersion = 'v1.31.4'): void {
    const node = fixture<Json>('node.json');
    (node.metadata as Json).name = name;
    const info = ((node.status as Json).nodeInfo as Json);
    info.containerRuntimeVersion = containerRuntimeVersion;
    info.kubeletVersion = kubeletVersion;
    this.nodes.set(name, node);
  }

  currentResourceVersion(): string {
    return String(this.rv);
  }

  /** Pods as the server holds them now (the truth a client must converge to). */
  podsOn(nodeName: string): Json[] {
    return [...this.pods.values()].filter((p) => (p.spec as Json).nodeName === nodeName);
  }

  addPod(input: PodSpecInput | Json): Json {
    const pod = 'containers' in input && 'nodeName' in input ? makePod(input as PodSpecInput) : structuredClone(input as Json);
    const md = pod.metadata as Json;
    const key = `${md.namespace as string}/${md.name as string}`;
    const type = this.pods.has(key) ? 'MODIFIED' : 'ADDED';
    this.commit(key, pod, type);
    return pod;
  }

  /** Changes one container's waiting reason (undefined = running). */
  setWaiting(namespace: string, name: string, container: string, reason: string | undefined): void {
    const key = `${namespace}/${name}`;
    const pod = this.pods.get(key);
    if (!pod) throw new Error(`no pod ${key}`);
    const next = structuredClone(pod);
    const status = next.status as Json;
    for (const cs of status.containerStatuses as Json[]) {
      if (cs.name !== container) continue;
      cs.state = reason ? { waiting: { reason } } : { running: { startedAt: new Date().toISOString().replace(/\.\d+Z$/, 'Z') } };
      cs.ready = !reason;
    }
    this.commit(key, next, 'MODIFIED');
  }

  deletePod(namespace: string, name: string): void {
    const key = `${namespace}/${name}`;
    const pod = this.pods.get(key);
    if (!pod) return;
    this.commit(key, structuredClone(pod), 'DELETED');
  }

  private commit(key: string, pod: Json, type: HistoryEntry['type']): void {
    this.rv++;
    (pod.metadata as Json).resourceVersion = String(this.rv);
    if (type === 'DELETED') this.pods.delete(key);
    else this.pods.set(key, pod);
    const entry: HistoryEntry = { rv: this.rv, type, object: structuredClone(pod) };
    this.history.push(entry);
    for (const w of this.watchers) this.send(w, entry);
  }

  // ---- controls -----------------------------------------------------------------------------

  /** Forgets history: watches resuming from any resourceVersion before now get ERROR 410. */
  compact(): void {
    this.compactedRv = this.rv;
    this.history = [];
  }

  /** Cuts every open watch with a TCP RST (as a load balancer does). Returns how many. */
  resetWatches(): number {
    let n = 0;
    for (const w of [...this.watchers]) {
      this.watchers.delete(w);
      for (const t of w.timers) clearTimeout(t);
      w.socket.resetAndDestroy();
      n++;
    }
    return n;
  }

  /** Open watches stay connected but receive nothing more (no events, no bookmarks). */
  silenceWatches(): number {
    let n = 0;
    for (const w of this.watchers) {
      if (!w.silent) { w.silent = true; n++; }
      for (const t of w.timers) clearTimeout(t);
      w.timers = [];
    }
    return n;
  }

  /** The next n watch requests are answered with this HTTP status (410 carries an Expired Status). */
  failNextWatches(n: number, status: number): void {
    for (let i = 0; i < n; i++) this.failWatches.push({ status });
  }

  /**
   * The next n event requests are carried out but their responses are lost (the connection is
   * reset instead of answered): what a client sees when a load balancer drops a reply.
   */
  loseEventResponses(n: number): void {
    this.loseResponses += n;
  }

  /** The next n event requests (POST/PATCH) fail with this status. */
  failEvents(n: number, status: number): void {
    for (let i = 0; i < n; i++) this.failEventRequests.push({ status });
  }

  /** Connection refused from now on: the listener is closed and every connection dropped. */
  async down(): Promise<void> {
    this.isDown = true;
    this.resetWatches();
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Back on the same port. */
  async up(): Promise<void> {
    if (!this.isDown) return;
    this.server = createServer((req, res) => this.route(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await this.listen(this.port);
    this.isDown = false;
  }

  openWatches(): number {
    return [...this.watchers].filter((w) => !w.silent).length;
  }

  // ---- routing ------------------------------------------------------------------------------

  private route(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    const method = req.method ?? 'GET';
    const log: RequestLogEntry = { at: Date.now(), method, path: url.pathname, query: url.search, status: 0 };
    this.requests.push(log);
    res.on('finish', () => { log.status = res.statusCode; });
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        this.dispatch(method, url, Buffer.concat(chunks).toString('utf8'), req, res, log);
      } catch (err) {
        this.status(res, 500, 'InternalError', `fake api: ${err instanceof Error ? err.message : String(err)}`);
      }
    });
  }

  private dispatch(method: string, url: URL, body: string, req: IncomingMessage, res: ServerResponse, log: RequestLogEntry): void {
    const p = url.pathname;
    if (method === 'GET' && p === '/api/v1/pods') {
      const watch = url.searchParams.get('watch');
      if (watch === 'true' || watch === '1') { log.status = 200; this.watch(url, req, res); return; }
      this.list(url, res);
      return;
    }
    let m = /^\/api\/v1\/nodes\/([^/]+)$/.exec(p);
    if (method === 'GET' && m) {
      const node = this.nodes.get(decodeURIComponent(m[1] as string));
      if (!node) { this.status(res, 404, 'NotFound', `nodes "${m[1]}" not found`, { name: m[1], kind: 'nodes' }); return; }
      this.json(res, 200, node);
      return;
    }
    m = /^\/apis\/events\.k8s\.io\/v1\/namespaces\/([^/]+)\/events$/.exec(p);
    if (method === 'POST' && m) { this.createEvent(decodeURIComponent(m[1] as string), body, res); return; }
    m = /^\/apis\/events\.k8s\.io\/v1\/namespaces\/([^/]+)\/events\/([^/]+)$/.exec(p);
    if (method === 'PATCH' && m) {
      this.patchEvent(decodeURIComponent(m[1] as string), decodeURIComponent(m[2] as string), body, req.headers['content-type'] ?? '', res);
      return;
    }
    this.status(res, 404, 'NotFound', 'the server could not find the requested resource');
  }

  /** fieldSelector: only spec.nodeName (= or ==) is supported for pods here, as the agent uses. */
  private nodeSelector(url: URL, res: ServerResponse): { ok: true; node: string | undefined } | { ok: false } {
    const fs = url.searchParams.get('fieldSelector');
    if (!fs) return { ok: true, node: undefined };
    const m = /^spec\.nodeName==?(.*)$/.exec(fs);
    if (!m) {
      this.status(res, 400, 'BadRequest', `Unable to find "/v1, Resource=pods" that match label selector "", field selector "${fs}": field label not supported`);
      return { ok: false };
    }
    return { ok: true, node: m[1] };
  }

  private list(url: URL, res: ServerResponse): void {
    const sel = this.nodeSelector(url, res);
    if (!sel.ok) return;
    const list = fixture<Json>('podlist.json');
    (list.metadata as Json).resourceVersion = String(this.rv);
    list.items = [...this.pods.values()].filter((p) => sel.node === undefined || (p.spec as Json).nodeName === sel.node);
    this.json(res, 200, list);
  }

  private watch(url: URL, req: IncomingMessage, res: ServerResponse): void {
    const sel = this.nodeSelector(url, res);
    if (!sel.ok) return;
    const injected = this.failWatches.shift();
    if (injected) {
      if (injected.status === 410) {
        const st = fixture<Json>('watch-error-410.json').object as Json;
        st.message = `too old resource version: ${url.searchParams.get('resourceVersion') ?? ''} (${this.rv})`;
        this.json(res, 410, st);
      } else {
        this.status(res, injected.status, 'InternalError', 'injected failure');
      }
      return;
    }
    res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked', 'Cache-Control': 'no-cache, private' });
    res.flushHeaders();
    const w: Watcher = {
      res,
      socket: req.socket,
      nodeName: sel.node,
      silent: false,
      bookmarks: url.searchParams.get('allowWatchBookmarks') === 'true',
      timers: [],
    };
    const rvParam = url.searchParams.get('resourceVersion');
    if (!rvParam || rvParam === '0') {
      // No resourceVersion: synthetic ADDED for the current state, then changes.
      for (const pod of this.pods.values()) this.send(w, { rv: this.rv, type: 'ADDED', object: pod });
    } else {
      const from = Number(rvParam);
      if (!Number.isFinite(from) || from < this.compactedRv) {
        const ev = fixture<Json>('watch-error-410.json');
        (ev.object as Json).message = `too old resource version: ${rvParam} (${this.rv})`;
        res.end(`${JSON.stringify(ev)}\n`);
        return;
      }
      for (const e of this.history) if (e.rv > from) this.send(w, e);
    }
    this.watchers.add(w);
    const timeout = Number(url.searchParams.get('timeoutSeconds') ?? '0');
    if (timeout > 0) w.timers.push(setTimeout(() => this.endWatcher(w), timeout * 1000));
    if (w.bookmarks) {
      const tick = (): void => {
        if (w.silent || !this.watchers.has(w)) return;
        const bm = fixture<Json>('watch-bookmark.json');
        ((bm.object as Json).metadata as Json).resourceVersion = String(this.rv);
        w.res.write(`${JSON.stringify(bm)}\n`);
        w.timers.push(setTimeout(tick, this.bookmarkIntervalMs));
      };
      w.timers.push(setTimeout(tick, this.bookmarkIntervalMs));
    }
    res.on('close', () => this.endWatcher(w));
  }

  private send(w: Watcher, e: HistoryEntry): void {
    if (w.silent || w.res.writableEnded) return;
    if (w.nodeName !== undefined && (e.object.spec as Json).nodeName !== w.nodeName) return;
    w.res.write(`${JSON.stringify({ type: e.type, object: e.object })}\n`);
  }

  /** Ends a watch: cleanly (the server's timeoutSeconds) or as part of shutting down. */
  private endWatcher(w: Watcher): void {
    this.watchers.delete(w);
    for (const t of w.timers) clearTimeout(t);
    w.timers = [];
    if (!w.res.writableEnded) w.res.end();
  }

  // ---- events -------------------------------------------------------------------------------

  private createEvent(namespace: string, body: string, res: ServerResponse): void {
    const injected = this.failEventRequests.shift();
    if (injected) { this.status(res, injected.status, injected.status === 429 ? 'TooManyRequests' : 'InternalError', 'injected failure'); return; }
    let ev: Json;
    try {
      ev = JSON.parse(body) as Json;
    } catch {
      this.status(res, 400, 'BadRequest', 'invalid JSON body');
      return;
    }
    const md = (ev.metadata ?? {}) as Json;
    const name = typeof md.name === 'string' ? md.name : '';
    if (md.namespace !== undefined && md.namespace !== namespace) {
      this.status(res, 400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
      return;
    }
    const errs = validateEventCreate(ev, namespace);
    if (errs.length) { this.invalid(res, name, errs); return; }
    const key = `${namespace}/${name}`;
    if (this.events.has(key)) {
      const st = fixture<Json>('status-already-exists.json');
      st.message = `events.events.k8s.io "${name}" already exists`;
      (st.details as Json).name = name;
      this.json(res, 409, st);
      return;
    }
    this.rv++;
    const stored: Json = {
      ...ev,
      kind: 'Event',
      apiVersion: 'events.k8s.io/v1',
      metadata: { ...md, namespace, uid: randomUUID(), resourceVersion: String(this.rv), creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z') },
    };
    this.events.set(key, stored);
    if (this.loseResponse(res)) return;
    this.json(res, 201, stored);
  }

  private patchEvent(namespace: string, name: string, body: string, contentType: string, res: ServerResponse): void {
    const injected = this.failEventRequests.shift();
    if (injected) { this.status(res, injected.status, 'InternalError', 'injected failure'); return; }
    const ct = contentType.split(';')[0]?.trim();
    if (ct !== 'application/merge-patch+json' && ct !== 'application/strategic-merge-patch+json') {
      this.status(res, 415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got ${contentType})`);
      return;
    }
    const key = `${namespace}/${name}`;
    const old = this.events.get(key);
    if (!old) {
      const st = fixture<Json>('status-not-found.json');
      st.message = `events.events.k8s.io "${name}" not found`;
      (st.details as Json).name = name;
      this.json(res, 404, st);
      return;
    }
    let patch: Json;
    try {
      patch = JSON.parse(body) as Json;
    } catch {
      this.status(res, 400, 'BadRequest', 'invalid JSON patch');
      return;
    }
    const next = mergePatch(structuredClone(old), patch) as Json;
    const errs = validateEventUpdate(next, old);
    if (errs.length) { this.invalid(res, name, errs); return; }
    this.rv++;
    (next.metadata as Json).resourceVersion = String(this.rv);
    this.events.set(key, next);
    if (this.loseResponse(res)) return;
    this.json(res, 200, next);
  }

  private loseResponse(res: ServerResponse): boolean {
    if (this.loseResponses <= 0) return false;
    this.loseResponses--;
    res.socket?.resetAndDestroy();
    return true;
  }

  private invalid(res: ServerResponse, name: string, errs: Array<{ field: string; message: string }>): void {
    const st = fixture<Json>('status-invalid.json');
    st.message = `Event.events.k8s.io "${name}" is invalid: ${errs.map((e) => `${e.field}: ${e.message}`).join(', ')}`;
    (st.details as Json).name = name;
    (st.details as Json).causes = errs.map((e) => ({ reason: 'FieldValueInvalid', message: e.message, field: e.field }));
    this.json(res, 422, st);
  }

  private json(res: ServerResponse, code: number, obj: unknown): void {
    const body = JSON.stringify(obj);
    res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
  }

  private status(res: ServerResponse, code: number, reason: string, message: string, details?: Json): void {
    this.json(res, code, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, ...(details ? { details } : {}), code });
  }
}

// ---- validation (after k8s.io/kubernetes pkg/apis/core/validation/events.go) ----------------

const MICRO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$/;
const QUALIFIED_NAME = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

type FieldError = { field: string; message: string };

function validateSeries(ev: Json): FieldError[] {
  const errs: FieldError[] = [];
  const s = ev.series as Json | undefined | null;
  if (s) {
    if (typeof s.count !== 'number' || s.count < 2) errs.push({ field: 'series.count', message: 'should be at least 2' });
    if (typeof s.lastObservedTime !== 'string' || !MICRO_TIME.test(s.lastObservedTime)) {
      errs.push({ field: 'series.lastObservedTime', message: `Required value (MicroTime, got ${JSON.stringify(s.lastObservedTime)})` });
    }
  }
  return errs;
}

export function validateEventCreate(ev: Json, namespace: string): FieldError[] {
  const errs: FieldError[] = [];
  const md = (ev.metadata ?? {}) as Json;
  const name = md.name;
  if (typeof name !== 'string' || !name) errs.push({ field: 'metadata.name', message: 'Required value' });
  else if (name.length > 253 || !DNS_SUBDOMAIN.test(name)) errs.push({ field: 'metadata.name', message: 'a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \'-\' or \'.\'' });
  if (typeof ev.eventTime !== 'string' || !MICRO_TIME.test(ev.eventTime)) errs.push({ field: 'eventTime', message: `Required value (MicroTime, got ${JSON.stringify(ev.eventTime)})` });
  if (ev.type !== 'Normal' && ev.type !== 'Warning') errs.push({ field: 'type', message: `has invalid value: ${String(ev.type)}` });
  const rc = ev.reportingController;
  if (typeof rc !== 'string' || !rc) errs.push({ field: 'reportingController', message: 'Required value' });
  else if (!QUALIFIED_NAME.test(rc) || rc.split('/').pop()!.length > 63) errs.push({ field: 'reportingController', message: 'must be a qualified name' });
  const ri = ev.reportingInstance;
  if (typeof ri !== 'string' || !ri) errs.push({ field: 'reportingInstance', message: 'Required value' });
  else if (ri.length > 128) errs.push({ field: 'reportingInstance', message: 'can have at most 128 characters' });
  for (const f of ['action', 'reason'] as const) {
    const v = ev[f];
    if (typeof v !== 'string' || !v) errs.push({ field: f, message: 'Required value' });
    else if (v.length > 128) errs.push({ field: f, message: 'can have at most 128 characters' });
  }
  if (typeof ev.note === 'string' && Buffer.byteLength(ev.note, 'utf8') > 1024) errs.push({ field: 'note', message: 'can have at most 1024 characters' });
  const regarding = (ev.regarding ?? {}) as Json;
  if (regarding.namespace !== namespace) errs.push({ field: 'regarding.namespace', message: 'does not match event.namespace' });
  for (const f of ['deprecatedFirstTimestamp', 'deprecatedLastTimestamp', 'deprecatedCount']) {
    if (ev[f] !== undefined && ev[f] !== null && ev[f] !== 0) errs.push({ field: f, message: 'needs to be unset' });
  }
  errs.push(...validateSeries(ev));
  return errs;
}

const IMMUTABLE = ['regarding', 'reason', 'note', 'type', 'action', 'related', 'reportingController', 'reportingInstance', 'eventTime'];

export function validateEventUpdate(next: Json, old: Json): FieldError[] {
  const errs: FieldError[] = [];
  for (const f of IMMUTABLE) {
    if (JSON.stringify(next[f]) !== JSON.stringify(old[f])) errs.push({ field: f, message: 'field is immutable' });
  }
  if (JSON.stringify(next.series) !== JSON.stringify(old.series)) errs.push(...validateSeries(next));
  return errs;
}

/** RFC 7386 JSON merge patch. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out: Json = target && typeof target === 'object' && !Array.isArray(target) ? { ...(target as Json) } : {};
  for (const [k, v] of Object.entries(patch as Json)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}
