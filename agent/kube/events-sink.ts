/**
 * Kubernetes Events (events.k8s.io/v1) on every pod waiting on a stalled, crawling, resumed or
 * runtime-cancelled pull, so that `kubectl describe pod` and `kubectl get events` show it.
 *
 * - One event series per (pod, reason, image): the first occurrence is created (POST); repeats
 *   within seriesWindowMs update that same object's series.count / series.lastObservedTime (merge
 *   PATCH) the way client-go's events v1 recorder does, instead of creating new objects. (The API
 *   server makes note/reason/type immutable on update, so only the series changes.)
 * - Event names are derived from the series (pod name + hash of key and first-seen time), so a
 *   create retried after a lost response gets 409 AlreadyExists instead of a duplicate event.
 * - A global token bucket (qps/burst) bounds the request rate: 1,000 waiting pods never storm the
 *   API server. Work is coalesced per series while it waits (ten repeats become one PATCH), and the
 *   backlog is bounded (maxPending); what does not fit is dropped and counted.
 * - Failures are retried with backoff a few times, then logged and counted; nothing is ever thrown
 *   into the detector (handle() only enqueues).
 */
import { createHash } from 'node:crypto';
import type { Logger } from '../../common/log.js';
import type { PodImageWait } from '../model/observations.js';
import type { PodRef, Transition } from '../model/pulls.js';
import type { Sink } from '../sinks/sink.js';
import type { KubeClient } from './api-client.js';
import { errorMessage, httpStatusOf, makeKubeClient, type KubeConfigInput } from './client.js';
import { eventForTransition, REPORTING_CONTROLLER, type PullEventSpec } from './event-message.js';
import { TokenBucket } from './token-bucket.js';

export interface KubeEventsSinkOptions {
  /** reportingInstance of every event (this node's name). */
  nodeName: string;
  kubeConfig?: KubeConfigInput;
  logger: Logger;
  /**
   * Finds a pod's uid and waiting containers (PodWatchSource.lookup). `kubectl describe pod` selects
   * events by the pod's uid, so without it the events only show in `kubectl get events`.
   */
  podLookup?: (namespace: string, name: string) => PodImageWait[];
  /** Requests per second to the API server, across all pods. Default 5 (client-go's default). */
  qps?: number;
  /** Requests allowed at once after a quiet period. Default 25. */
  burst?: number;
  /** Series not created or updated for this long start a new event. Default 30 min. */
  seriesWindowMs?: number;
  /** Most series waiting for delivery; more are dropped and counted. Default 5,000. */
  maxPending?: number;
  /** Attempts per request before it is dropped (network errors, 5xx, 429). Default 5. */
  maxAttempts?: number;
  /** Requests in flight at once. Default 4. */
  concurrency?: number;
  requestTimeoutMs?: number;
  /** Retry delay base (doubles per attempt, jittered, capped at retryMaxMs). Defaults 1 s / 30 s. */
  retryBaseMs?: number;
  retryMaxMs?: number;
  now?: () => number;
}

export interface KubeEventsSinkStats {
  transitions: number;
  created: number;
  patched: number;
  /** Creates answered 409: a retried create whose first attempt had landed. */
  alreadyExisted: number;
  /** Repeats folded into a pending request instead of costing one of their own. */
  coalesced: number;
  retries: number;
  failed: number;
  dropped: number;
  pending: number;
}

interface Series {
  key: string;
  namespace: string;
  name: string;
  /** The object exists on the server. */
  created: boolean;
  /** Occurrences the server knows of (1 = created without series). */
  count: number;
  firstAt: number;
  lastAt: number;
}

interface Work {
  key: string;
  namespace: string;
  pod: PodRef;
  spec: PullEventSpec;
  /** Occurrences not yet delivered. */
  occurrences: number;
  lastObservedAt: number;
  attempts: number;
  notBefore: number;
}

const SOURCE = 'kube-events';

/** The events.k8s.io/v1 Event fields this sink writes. */
interface EventsV1Event {
  apiVersion: 'events.k8s.io/v1';
  kind: 'Event';
  metadata: { name: string; namespace: string };
  eventTime: string;
  reportingController: string;
  reportingInstance: string;
  action: string;
  reason: string;
  note: string;
  type: string;
  regarding: { apiVersion: string; kind: string; namespace: string; name: string; uid?: string; fieldPath?: string };
}

/** A MicroTime as the API server writes it: RFC 3339 with six fractional digits. */
export function microTime(ms: number): string {
  return `${new Date(ms).toISOString().slice(0, -1)}000Z`;
}

function eventsPath(namespace: string, name?: string): string {
  const base = `/apis/events.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/events`;
  return name === undefined ? base : `${base}/${encodeURIComponent(name)}`;
}

export class KubeEventsSink implements Sink {
  readonly name = SOURCE;
  private readonly api: KubeClient | undefined;
  private readonly opts: Required<Omit<KubeEventsSinkOptions, 'kubeConfig' | 'podLookup'>> & Pick<KubeEventsSinkOptions, 'podLookup'>;
  private readonly bucket: TokenBucket;
  private readonly series = new Map<string, Series>();
  private readonly pending = new Map<string, Work>();
  private readonly inFlight = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly idleWaiters: Array<() => void> = [];
  private readonly counters = { transitions: 0, created: 0, patched: 0, alreadyExisted: 0, coalesced: 0, retries: 0, failed: 0, dropped: 0 };

  constructor(opts: KubeEventsSinkOptions, api?: KubeClient) {
    this.opts = {
      nodeName: opts.nodeName,
      logger: opts.logger,
      podLookup: opts.podLookup,
      qps: opts.qps ?? 5,
      burst: opts.burst ?? 25,
      seriesWindowMs: opts.seriesWindowMs ?? 30 * 60_000,
      maxPending: opts.maxPending ?? 5000,
      maxAttempts: opts.maxAttempts ?? 5,
      concurrency: opts.concurrency ?? 4,
      requestTimeoutMs: opts.requestTimeoutMs ?? 10_000,
      retryBaseMs: opts.retryBaseMs ?? 1000,
      retryMaxMs: opts.retryMaxMs ?? 30_000,
      now: opts.now ?? Date.now,
    };
    this.bucket = new TokenBucket(this.opts.qps, this.opts.burst, this.opts.now);
    if (api) {
      this.api = api;
    } else {
      try {
        this.api = makeKubeClient(opts.kubeConfig);
      } catch (err) {
        this.opts.logger.warn({ source: SOURCE, err: errorMessage(err) }, 'Kubernetes Events disabled: no API access');
      }
    }
  }

  handle(transition: Transition): void {
    try {
      this.enqueue(transition);
    } catch (err) {
      // Never into the detector.
      this.counters.failed++;
      this.opts.logger.warn({ source: SOURCE, err: errorMessage(err) }, 'could not queue Kubernetes Event');
    }
  }

  stats(): KubeEventsSinkStats {
    return { ...this.counters, pending: this.pending.size + this.inFlight.size };
  }

  /** Resolves when nothing is pending or in flight (tests, graceful shutdown). */
  idle(): Promise<void> {
    if (this.pending.size === 0 && this.inFlight.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  async close(): Promise<void> {
    // Deliver what is queued within a short grace period, then stop.
    const grace = new Promise<void>((resolve) => setTimeout(resolve, 2000).unref());
    await Promise.race([this.idle(), grace]);
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.api?.close();
  }

  // ---- queueing -----------------------------------------------------------------------------

  private enqueue(t: Transition): void {
    if (this.closed || !this.api) return;
    const spec = eventForTransition(t);
    if (!spec || t.pull.pods.length === 0) return;
    this.counters.transitions++;
    const observedAt = Date.parse(t.at);
    const at = Number.isFinite(observedAt) ? observedAt : this.opts.now();
    const seen = new Set<string>();
    for (const pod of t.pull.pods) {
      const key = `${pod.namespace}/${pod.name}/${spec.reason}/${t.pull.image}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const existing = this.pending.get(key);
      if (existing) {
        existing.occurrences++;
        existing.lastObservedAt = Math.max(existing.lastObservedAt, at);
        this.counters.coalesced++;
        continue;
      }
      if (this.pending.size >= this.opts.maxPending) {
        this.counters.dropped++;
        if (this.counters.dropped === 1 || this.counters.dropped % 1000 === 0) {
          this.opts.logger.warn({ source: SOURCE, dropped: this.counters.dropped, maxPending: this.opts.maxPending }, 'Kubernetes Event backlog full; dropping');
        }
        continue;
      }
      this.pending.set(key, { key, namespace: pod.namespace, pod, spec, occurrences: 1, lastObservedAt: at, attempts: 0, notBefore: 0 });
    }
    this.pump();
  }

  private pump(): void {
    if (this.closed) return;
    if (this.timer) { clearTimeout(this.timer); this.timer = undefined; }
    const now = this.opts.now();
    let soonest = Infinity;
    for (const work of this.pending.values()) {
      if (this.inFlight.size >= this.opts.concurrency) break;
      if (this.inFlight.has(work.key)) continue;
      if (work.notBefore > now) { soonest = Math.min(soonest, work.notBefore - now); continue; }
      const wait = this.bucket.tryTake();
      if (wait > 0) { soonest = Math.min(soonest, wait); break; }
      this.pending.delete(work.key);
      this.inFlight.add(work.key);
      void this.deliver(work).finally(() => {
        this.inFlight.delete(work.key);
        this.pump();
        this.notifyIdle();
      });
    }
    if (soonest !== Infinity && this.pending.size > 0) {
      this.timer = setTimeout(() => { this.timer = undefined; this.pump(); }, soonest);
      this.timer.unref?.();
    }
  }

  private notifyIdle(): void {
    if (this.pending.size === 0 && this.inFlight.size === 0) {
      for (const w of this.idleWaiters.splice(0)) w();
    }
  }

  // ---- delivery -----------------------------------------------------------------------------

  private async deliver(work: Work): Promise<void> {
    let s = this.series.get(work.key);
    if (s && s.created && work.lastObservedAt - s.lastAt > this.opts.seriesWindowMs) {
      this.series.delete(work.key);
      s = undefined;
    }
    if (!s) {
      s = {
        key: work.key,
        namespace: work.namespace,
        name: eventName(work.pod.name, work.key, work.lastObservedAt),
        created: false,
        count: 0,
        firstAt: work.lastObservedAt,
        lastAt: work.lastObservedAt,
      };
      this.series.set(work.key, s);
      this.pruneSeries();
    }
    try {
      if (!s.created) {
        await this.create(s, work);
        s.created = true;
        s.count = 1;
        s.lastAt = work.lastObservedAt;
        this.counters.created++;
        // Occurrences beyond the first that were coalesced into this create become the series:
        // a PATCH of its own, paying its own token.
        work.occurrences--;
        if (work.occurrences > 0) this.requeue({ ...work, attempts: 0, notBefore: 0 });
      } else {
        await this.patchSeries(s, s.count + work.occurrences, work.lastObservedAt);
      }
    } catch (err) {
      this.failed(work, s, err);
    }
  }

  private async create(s: Series, work: Work): Promise<void> {
    const api = this.api as KubeClient;
    const body = this.eventBody(s, work);
    try {
      await api.postJson(eventsPath(s.namespace), body, { timeoutMs: this.opts.requestTimeoutMs });
    } catch (err) {
      if (httpStatusOf(err) === 409) {
        // A create we retried after its response was lost: the object is there.
        this.counters.alreadyExisted++;
        return;
      }
      throw err;
    }
  }

  private async patchSeries(s: Series, count: number, lastObservedAt: number): Promise<void> {
    const api = this.api as KubeClient;
    const body = { series: { count, lastObservedTime: microTime(lastObservedAt) } };
    try {
      await api.patch(eventsPath(s.namespace, s.name), body, 'merge', { timeoutMs: this.opts.requestTimeoutMs });
    } catch (err) {
      if (httpStatusOf(err) === 404) {
        // The event expired on the server (event TTL, 1 h by default): start a new series.
        this.series.delete(s.key);
        throw Object.assign(new Error('event series expired on the server; recreating'), { retryNow: true });
      }
      throw err;
    }
    s.count = count;
    s.lastAt = lastObservedAt;
    this.counters.patched++;
  }

  /** Puts work back, folding it into what is already pending for the same series. */
  private requeue(work: Work): void {
    const queued = this.pending.get(work.key);
    if (queued) {
      queued.occurrences += work.occurrences;
      queued.lastObservedAt = Math.max(queued.lastObservedAt, work.lastObservedAt);
      queued.notBefore = Math.max(queued.notBefore, work.notBefore);
    } else {
      this.pending.set(work.key, work);
    }
  }

  private failed(work: Work, s: Series, err: unknown): void {
    const status = httpStatusOf(err);
    const retryNow = (err as { retryNow?: unknown }).retryNow === true;
    const transient = retryNow || status === undefined || status === 429 || status >= 500 || status === 408;
    work.attempts++;
    if (transient && work.attempts < this.opts.maxAttempts && !this.closed) {
      this.counters.retries++;
      const base = Math.min(this.opts.retryMaxMs, this.opts.retryBaseMs * 2 ** Math.min(work.attempts - 1, 30));
      work.notBefore = this.opts.now() + (retryNow ? 0 : Math.round(base / 2 + (Math.random() * base) / 2));
      // The series stays; a create that may have landed is retried under the same name (→ 409).
      this.requeue(work);
      return;
    }
    this.counters.failed++;
    if (!s.created) this.series.delete(work.key);
    if (this.counters.failed > 10 && this.counters.failed % 100 !== 0) return;
    this.opts.logger.warn(
      { source: SOURCE, pod: `${work.namespace}/${work.pod.name}`, reason: work.spec.reason, status, err: errorMessage(err), attempts: work.attempts },
      'Kubernetes Event not delivered',
    );
  }

  private eventBody(s: Series, work: Work): EventsV1Event {
    const lookup = this.opts.podLookup?.(work.namespace, work.pod.name) ?? [];
    const wait = lookup.find((w) => w.container === work.pod.container) ?? lookup[0];
    const container = work.pod.container ?? wait?.container;
    const regarding: EventsV1Event['regarding'] = { apiVersion: 'v1', kind: 'Pod', namespace: work.namespace, name: work.pod.name };
    if (wait?.uid) regarding.uid = wait.uid;
    if (container) regarding.fieldPath = `spec.containers{${container}}`;
    return {
      apiVersion: 'events.k8s.io/v1',
      kind: 'Event',
      metadata: { name: s.name, namespace: s.namespace },
      eventTime: microTime(s.firstAt),
      reportingController: REPORTING_CONTROLLER,
      reportingInstance: this.opts.nodeName.slice(0, 128),
      action: work.spec.action,
      reason: work.spec.reason,
      note: work.spec.note,
      type: work.spec.type,
      regarding,
    };
  }

  /** Forget series that ended long ago so memory stays bounded on busy nodes. */
  private pruneSeries(): void {
    if (this.series.size < 10_000) return;
    const cutoff = this.opts.now() - this.opts.seriesWindowMs;
    for (const [k, s] of this.series) {
      if (s.lastAt < cutoff && !this.pending.has(k) && !this.inFlight.has(k)) this.series.delete(k);
    }
  }
}

/**
 * `<pod>.<16 hex>`: like the kubelet's `<pod>.<unix nanos hex>`, but derived from the series so a
 * retried create reuses the name. Kept a valid DNS subdomain (≤253).
 */
export function eventName(podName: string, seriesKey: string, firstAt: number): string {
  const hash = createHash('sha256').update(`${seriesKey}\u0000${firstAt}`).digest('hex').slice(0, 16);
  return `${podName.slice(0, 253 - 17)}.${hash}`;
}

/** The factory the agent wires: `sinks.push(createKubeEventsSink({ nodeName, kubeConfig, logger, podLookup }))`. */
export function createKubeEventsSink(opts: KubeEventsSinkOptions): KubeEventsSink {
  return new KubeEventsSink(opts);
}
