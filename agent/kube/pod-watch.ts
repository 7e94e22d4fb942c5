/**
 * PodWatchSource: the pods scheduled on this node (field selector spec.nodeName=<node>), kept in
 * sync with list-then-watch the way client-go's reflector does it, plus the Node's kubelet and
 * runtime versions.
 *
 * - list (resourceVersion "0" first: served from the API server's watch cache, cheap at 5,000
 *   nodes), then watch from the list's resourceVersion with allowWatchBookmarks;
 * - a watch that ends (server timeout, TCP reset, idle cut) resumes from the last resourceVersion
 *   seen (events and bookmarks both advance it);
 * - 410 Gone (an ERROR event carrying a Status with code 410, or an HTTP 410 answer) → relist with a
 *   consistent read (resourceVersion "") and replace the whole view;
 * - every failure → exponential backoff with full jitter, reset after a healthy watch;
 * - idle detector: a watch that receives nothing (no event, no bookmark) for idleTimeoutMs is
 *   aborted and reconnected. The server-side timeoutSeconds is kept under the 4-minute idle cut of
 *   AKS's load balancer so that healthy watches end cleanly before anything cuts them.
 *
 * Emits { kind: 'pods' } with the full current set of waiting containers whenever it changes
 * (coalesced over coalesceMs), and { kind: 'runtime' } when the Node's runtime is known or changes.
 */
import { z } from 'zod';
import type { PodImageWait } from '../model/observations.js';
import type { Source, SourceContext } from '../sources/source.js';
import type { KubeClient } from './api-client.js';
import { errorMessage, httpStatusOf, makeKubeClient, type KubeConfigInput } from './client.js';
import { parseNode, type NodeInfo } from './node-info.js';
import { parsePod, podKey, sortWaits } from './pods.js';

export interface PodWatchOptions {
  /** This node's name (the DaemonSet passes spec.nodeName as PULLWATCH_NODE_NAME). */
  nodeName: string;
  /** In-cluster service account when undefined or "in-cluster"; a kubeconfig path otherwise. */
  kubeConfig?: KubeConfigInput;
  /** Reconnect a watch that received nothing (not even a bookmark) for this long. Default 90 s. */
  idleTimeoutMs?: number;
  /**
   * Server-side watch timeout (timeoutSeconds), randomised per watch in [t, 1.25 t) like client-go
   * spreads its watches. Default 180 s: below AKS's 4-minute idle cut even with the jitter.
   */
  watchTimeoutSeconds?: number;
  /** Timeout of one list / node read. Default 60 s. */
  requestTimeoutMs?: number;
  /** First retry delay after a failure; doubles up to backoffMaxMs. Defaults 500 ms / 30 s. */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** Changes within this window produce one 'pods' observation. Default 100 ms. */
  coalesceMs?: number;
  /** Re-read the Node this often (runtime upgrades). Default 10 min. */
  nodeRefreshMs?: number;
  /** Injected randomness for jitter (tests). */
  random?: () => number;
}

export interface PodWatchStats {
  lists: number;
  relistsAfterGone: number;
  watchesStarted: number;
  watchEvents: number;
  bookmarks: number;
  idleReconnects: number;
  errors: number;
  emitted: number;
  resourceVersion: string | undefined;
  /** True while a watch stream is open and the view is synced. */
  watching: boolean;
  /** The view reflects a successful list (possibly updated by watches since). */
  synced: boolean;
}

type WatchEnd =
  | { kind: 'closed' }
  | { kind: 'gone'; message: string }
  | { kind: 'idle' }
  | { kind: 'error'; message: string; status?: number };

const SOURCE = 'kube-pods';

export class PodWatchSource implements Source {
  readonly name = SOURCE;
  private readonly opts: Required<Omit<PodWatchOptions, 'kubeConfig'>> & { kubeConfig?: KubeConfigInput };
  private ctx: SourceContext | undefined;
  private client: KubeClient | undefined;
  /** Pods on this node that have at least one container waiting on its image. */
  private readonly view = new Map<string, PodImageWait[]>();
  private resourceVersion: string | undefined;
  private stopped = true;
  private currentAbort: AbortController | undefined;
  private endCurrent: (() => void) | undefined;
  private readonly wakers = new Set<() => void>();
  private emitTimer: NodeJS.Timeout | undefined;
  private lastEmittedKey: string | undefined;
  private node: NodeInfo | undefined;
  private lastRuntimeKey: string | undefined;
  private loops: Promise<void>[] = [];
  private readonly counters: Omit<PodWatchStats, 'resourceVersion' | 'watching' | 'synced'> = {
    lists: 0, relistsAfterGone: 0, watchesStarted: 0, watchEvents: 0, bookmarks: 0, idleReconnects: 0, errors: 0, emitted: 0,
  };
  private watching = false;
  private synced = false;

  constructor(opts: PodWatchOptions) {
    if (!opts.nodeName) throw new Error('PodWatchSource: nodeName is required');
    this.opts = {
      nodeName: opts.nodeName,
      kubeConfig: opts.kubeConfig,
      idleTimeoutMs: opts.idleTimeoutMs ?? 90_000,
      watchTimeoutSeconds: opts.watchTimeoutSeconds ?? 180,
      requestTimeoutMs: opts.requestTimeoutMs ?? 60_000,
      backoffInitialMs: opts.backoffInitialMs ?? 500,
      backoffMaxMs: opts.backoffMaxMs ?? 30_000,
      coalesceMs: opts.coalesceMs ?? 100,
      nodeRefreshMs: opts.nodeRefreshMs ?? 600_000,
      random: opts.random ?? Math.random,
    };
  }

  async start(ctx: SourceContext): Promise<void> {
    this.ctx = ctx;
    try {
      this.client = makeKubeClient(this.opts.kubeConfig);
    } catch (err) {
      ctx.health.report(SOURCE, 'config', err);
      return;
    }
    this.stopped = false;
    this.loops = [this.podLoop(), this.nodeLoop()];
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.currentAbort?.abort();
    this.endCurrent?.();
    for (const w of [...this.wakers]) w();
    if (this.emitTimer) clearTimeout(this.emitTimer);
    this.emitTimer = undefined;
    await Promise.allSettled(this.loops);
    this.loops = [];
    this.client?.close();
  }

  /** The current view: every container on this node waiting on its image. */
  waits(): PodImageWait[] {
    return sortWaits([...this.view.values()].flat());
  }

  /** Waiting containers of one pod (the Events sink uses it for the pod's uid). */
  lookup(namespace: string, name: string): PodImageWait[] {
    return this.view.get(podKey(namespace, name)) ?? [];
  }

  nodeInfo(): NodeInfo | undefined {
    return this.node;
  }

  stats(): PodWatchStats {
    return { ...this.counters, resourceVersion: this.resourceVersion, watching: this.watching, synced: this.synced };
  }

  // ---- pods ---------------------------------------------------------------------------------

  private async podLoop(): Promise<void> {
    let failures = 0;
    let mustList = true;
    let consistentList = false;
    while (!this.stopped) {
      if (mustList) {
        try {
          await this.list(consistentList);
          mustList = false;
          consistentList = false;
        } catch (err) {
          this.problem('list', err);
          await this.sleep(this.backoff(failures++));
          continue;
        }
      }
      const healthyBefore = this.counters.watchEvents + this.counters.bookmarks;
      const end = await this.watchOnce();
      if (this.stopped) break;
      const progressed = this.counters.watchEvents + this.counters.bookmarks > healthyBefore;
      switch (end.kind) {
        case 'closed':
          // The server ended the watch (its timeoutSeconds): resume at once.
          failures = 0;
          continue;
        case 'gone':
          this.counters.relistsAfterGone++;
          this.ctx?.logger.info({ source: SOURCE, rv: this.resourceVersion, msg410: end.message }, 'watch resourceVersion expired (410 Gone); relisting');
          mustList = true;
          consistentList = true;
          failures = 0;
          continue;
        case 'idle':
          this.counters.idleReconnects++;
          this.problem('watch-idle', new Error(`no watch event or bookmark for ${this.opts.idleTimeoutMs} ms; reconnecting`));
          break;
        case 'error':
          this.problem('watch', new Error(end.message));
          break;
      }
      if (progressed) failures = 0;
      await this.sleep(this.backoff(failures++));
    }
  }

  private async list(consistent: boolean): Promise<void> {
    const client = this.client as KubeClient;
    const raw = await client.getJson('/api/v1/pods', {
      query: { fieldSelector: this.fieldSelector(), resourceVersion: consistent ? undefined : '0' },
      timeoutMs: this.opts.requestTimeoutMs,
    });
    const parsedList = podListSchema.safeParse(raw);
    if (!parsedList.success) {
      const first = parsedList.error.issues[0];
      throw new Error(`invalid PodList from the API server: ${first ? `${first.path.join('.')}: ${first.message}` : 'unknown'}`);
    }
    const list = parsedList.data;
    this.counters.lists++;
    const next = new Map<string, PodImageWait[]>();
    for (const item of list.items ?? []) {
      const parsed = parsePod(item);
      if (!parsed.ok) {
        this.problem('bad-pod', new Error(parsed.error));
        continue;
      }
      if (parsed.waits.length) next.set(parsed.key, parsed.waits);
    }
    this.view.clear();
    for (const [k, v] of next) this.view.set(k, v);
    this.resourceVersion = list.metadata?.resourceVersion ?? undefined;
    this.synced = true;
    this.scheduleEmit(true);
  }

  private watchOnce(): Promise<WatchEnd> {
    const client = this.client as KubeClient;
    // The idle detector below bounds both the connect phase and the stream: nothing (no headers,
    // no event, no bookmark) for idleTimeoutMs aborts the request and resolves at once.
    const timeoutSeconds = Math.floor(this.opts.watchTimeoutSeconds * (1 + 0.25 * this.opts.random()));
    const query: Record<string, string | number | boolean> = {
      fieldSelector: this.fieldSelector(),
      allowWatchBookmarks: true,
      timeoutSeconds,
    };
    if (this.resourceVersion) query.resourceVersion = this.resourceVersion;
    this.counters.watchesStarted++;
    return new Promise<WatchEnd>((resolve) => {
      let settled = false;
      const controller = new AbortController();
      let idleTimer: NodeJS.Timeout | undefined;
      const settle = (e: WatchEnd): void => {
        if (settled) return;
        settled = true;
        if (idleTimer) clearTimeout(idleTimer);
        this.endCurrent = undefined;
        this.watching = false;
        if (this.currentAbort === controller) this.currentAbort = undefined;
        controller.abort();
        resolve(e);
      };
      const armIdle = (): void => {
        if (idleTimer) clearTimeout(idleTimer);
        idleTimer = setTimeout(() => settle({ kind: 'idle' }), this.opts.idleTimeoutMs);
      };
      armIdle();
      this.endCurrent = () => settle({ kind: 'closed' });
      const onEvent = (type: string, obj: unknown): void => {
        if (settled) return;
        armIdle();
        this.handleWatchEvent(type, obj, settle);
      };
      const onDone = (err: unknown): void => {
        if (settled) return;
        if (this.stopped || !err) { settle({ kind: 'closed' }); return; }
        const name = (err as { name?: unknown }).name;
        if (name === 'TimeoutError') { settle({ kind: 'idle' }); return; }
        const status = httpStatusOf(err);
        if (status === 410) { settle({ kind: 'gone', message: errorMessage(err) }); return; }
        settle({ kind: 'error', message: `watch failed${status ? ` (HTTP ${status})` : ''}: ${errorMessage(err)}`, status });
      };
      if (this.stopped) { settle({ kind: 'closed' }); return; }
      this.currentAbort = controller;
      const onOpen = (): void => { if (!settled) this.watching = true; };
      client.watch('/api/v1/pods', onEvent, { query, signal: controller.signal, onOpen }).then(
        () => onDone(undefined),
        (err: unknown) => onDone(err ?? new Error('watch failed')),
      );
    });
  }

  private handleWatchEvent(type: string, obj: unknown, abort: (e: WatchEnd) => void): void {
    const rv = resourceVersionOf(obj);
    switch (type) {
      case 'ADDED':
      case 'MODIFIED':
      case 'DELETED': {
        this.counters.watchEvents++;
        const parsed = parsePod(obj);
        if (!parsed.ok) {
          this.problem('bad-pod', new Error(parsed.error));
          if (rv) this.resourceVersion = rv;
          return;
        }
        const before = this.view.get(parsed.key);
        if (type === 'DELETED' || parsed.waits.length === 0) this.view.delete(parsed.key);
        else this.view.set(parsed.key, parsed.waits);
        if (rv) this.resourceVersion = rv;
        if (before || this.view.has(parsed.key)) this.scheduleEmit(false);
        return;
      }
      case 'BOOKMARK':
        this.counters.bookmarks++;
        if (rv) this.resourceVersion = rv;
        return;
      case 'ERROR': {
        const status = statusOf(obj);
        if (status.code === 410) abort({ kind: 'gone', message: status.message });
        else abort({ kind: 'error', message: `watch ERROR event: ${status.code ?? '?'} ${status.reason ?? ''} ${status.message}`.trim(), status: status.code });
        return;
      }
      default:
        this.problem('watch-event', new Error(`unknown watch event type ${JSON.stringify(type)}`));
    }
  }

  private scheduleEmit(force: boolean): void {
    if (force) this.lastEmittedKey = undefined;
    if (this.emitTimer || this.stopped) return;
    this.emitTimer = setTimeout(() => {
      this.emitTimer = undefined;
      this.emitPods();
    }, this.opts.coalesceMs);
    this.emitTimer.unref?.();
  }

  private emitPods(): void {
    const ctx = this.ctx;
    if (!ctx) return;
    const pods = this.waits();
    const key = JSON.stringify(pods);
    if (key === this.lastEmittedKey) return;
    this.lastEmittedKey = key;
    this.counters.emitted++;
    try {
      ctx.emit({ kind: 'pods', at: ctx.now(), pods });
    } catch (err) {
      this.problem('emit', err);
    }
  }

  // ---- node ---------------------------------------------------------------------------------

  private async nodeLoop(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      try {
        const client = this.client as KubeClient;
        const obj = await client.getJson(`/api/v1/nodes/${encodeURIComponent(this.opts.nodeName)}`, { timeoutMs: this.opts.requestTimeoutMs });
        const parsed = parseNode(obj);
        if (!parsed.ok) throw new Error(parsed.error);
        this.node = parsed.node;
        failures = 0;
        const info = parsed.node.runtime;
        const key = info ? JSON.stringify(info) : undefined;
        if (info && key !== this.lastRuntimeKey && this.ctx) {
          this.lastRuntimeKey = key;
          this.ctx.emit({ kind: 'runtime', at: this.ctx.now(), info });
        }
        await this.sleep(this.opts.nodeRefreshMs);
      } catch (err) {
        this.problem('node', err);
        await this.sleep(this.backoff(failures++));
      }
    }
  }

  // ---- helpers ------------------------------------------------------------------------------

  private fieldSelector(): string {
    return `spec.nodeName=${this.opts.nodeName}`;
  }

  /** Exponential backoff with full jitter: uniform in [base/2, base], base = initial * 2^n capped. */
  private backoff(failures: number): number {
    const base = Math.min(this.opts.backoffMaxMs, this.opts.backoffInitialMs * 2 ** Math.min(failures, 30));
    return Math.round(base / 2 + (base / 2) * this.opts.random());
  }

  private sleep(ms: number): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = (): void => { clearTimeout(t); this.wakers.delete(wake); resolve(); };
      const t = setTimeout(wake, ms);
      this.wakers.add(wake);
    });
  }

  private problem(cause: string, err: unknown): void {
    this.counters.errors++;
    this.ctx?.health.report(SOURCE, cause, err);
  }
}

/** What list() relies on; items are validated one by one by parsePod. */
const podListSchema = z.object({
  metadata: z.object({ resourceVersion: z.string().optional() }).passthrough().optional(),
  items: z.array(z.unknown()).nullish(),
}).passthrough();

function resourceVersionOf(obj: unknown): string | undefined {
  if (obj && typeof obj === 'object') {
    const md = (obj as { metadata?: unknown }).metadata;
    if (md && typeof md === 'object') {
      const rv = (md as { resourceVersion?: unknown }).resourceVersion;
      if (typeof rv === 'string' && rv) return rv;
    }
  }
  return undefined;
}

function statusOf(obj: unknown): { code?: number; reason?: string; message: string } {
  if (obj && typeof obj === 'object') {
    const s = obj as { code?: unknown; reason?: unknown; message?: unknown };
    return {
      code: typeof s.code === 'number' ? s.code : undefined,
      reason: typeof s.reason === 'string' ? s.reason : undefined,
      message: typeof s.message === 'string' ? s.message : JSON.stringify(obj).slice(0, 200),
    };
  }
  return { message: String(obj) };
}
