/**
 * PullTracker: the one place that holds the state of every pull on this node.
 *
 * Pure logic, no I/O: observations in (ingest progress, log lines, waiting pods, runtime facts),
 * state transitions out. The clock is injected. Sources never decide "stalled"; this does.
 *
 * Rules (see docs/detector.md):
 * - stalled: no byte progress on any in-flight blob of the pull for `stallAfterMs` (a pull with no
 *   blob yet counts from its start: a hang while resolving the manifest is a stall too);
 * - slow: bytes moved, but fewer than `slowBelowBytesPerSecond` over the last `stallAfterMs`
 *   (left again at 1.2× the threshold, so a pull near the line does not flap);
 * - unpacking: every blob the pull fetched is committed and the runtime has not said "done": not a
 *   byte stall;
 * - ingests found idle when first seen (older than the stall window) are leftovers of earlier,
 *   cancelled pulls (containerd keeps them for resume) and make nothing stalled until they move
 *   again or a known in-flight pull claims them.
 */
import { parseImageRef, sameRegistry } from '../../common/image-ref.js';
import type {
  ClosedIngest, IngestStatus, LogComponent, Observation, PodImageWait, PullLogEvent, RuntimeInfo, RuntimeName,
} from '../model/observations.js';
import type {
  LayerRecord, LayerState, PodRef, PullRecord, PullState, Transition, TransitionKind,
} from '../model/pulls.js';
import { RateWindow } from './rate-window.js';

export interface TrackerOptions {
  stallAfterMs: number;
  slowBelowBytesPerSecond: number;
  now: () => number;
  /** Without runtime logs, a pull whose blobs are all committed is called completed after this quiet time. */
  unpackQuietMs?: number;
  /** Give up waiting for the runtime's "pulled" line after this long in unpacking. */
  unpackMaxMs?: number;
  /** How long a blob whose source is still looking up its origin waits before it is attributed by guess. */
  attributionWaitMs?: number;
  /** How many finished pulls to keep for history (tune, bundle). */
  keepFinished?: number;
  /** Log events older than this (relative to now) do not start pulls (startup replay of old logs). */
  logReplayHorizonMs?: number;
}

interface Layer {
  ingestKey: string;
  digest: string;
  kind: LayerRecord['kind'];
  bytesDone: number;
  bytesTotal: number | null;
  startedAt: number;
  lastProgressAt: number;
  done: 'no' | 'committed' | 'aborted';
  state: LayerState;
  window: RateWindow;
  manifestDigest?: string;
}

interface Pull {
  id: string;
  image: string;
  /** image as given vs. only the repository known (from ingest attribution) */
  imageKnown: boolean;
  registry: string;
  repository: string;
  runtime: RuntimeName;
  synthetic: boolean;
  state: PullState;
  startedAt: number;
  updatedAt: number;
  lastProgressAt: number;
  lastNewBlobAt: number;
  finishedAt?: number;
  layers: Map<string, Layer>;
  manifestDigests: Set<string>;
  pods: PodRef[];
  window: RateWindow;
  bytesSeen: number;
  cancel?: PullRecord['cancel'];
  error?: string;
  durationMs?: number;
  idleGapsMs: number[];
  /** The pull is known to be in flight from a runtime/kubelet log line. */
  fromLog: boolean;
  unpackingSince?: number;
}

const RUNTIME_OF: Record<LogComponent, RuntimeName | undefined> = {
  containerd: 'containerd', 'cri-o': 'cri-o', docker: 'docker', kubelet: undefined,
};
const MAX_GAPS = 64;
const UNATTRIBUTED = '(unattributed)';

export class PullTracker {
  private readonly pulls = new Map<string, Pull>();
  private readonly finished: Pull[] = [];
  /** runtime + ingest key → pull id (for ingests we attributed). */
  private readonly ingestOwner = new Map<string, string>();
  /** Leftover ingests seen idle at first sight: key → last offset seen. */
  private readonly dormant = new Map<string, { offset: number; ingest: IngestStatus; runtime: RuntimeName }>();
  /** Blobs whose origin the source is still looking up: key → first seen and last write. */
  private readonly pending = new Map<string, { since: number; lastWriteAt: number; runtime: RuntimeName }>();
  private readonly runtimes = new Map<RuntimeName, RuntimeInfo>();
  private readonly waiting = new Map<string, PodImageWait[]>();
  private readonly logsSeenFrom = new Set<RuntimeName>();
  private seq = 0;
  private readonly opts: Required<TrackerOptions>;

  constructor(options: TrackerOptions) {
    this.opts = {
      unpackQuietMs: 5_000,
      unpackMaxMs: 10 * 60_000,
      attributionWaitMs: 5_000,
      keepFinished: 500,
      logReplayHorizonMs: 30 * 60_000,
      ...options,
    };
  }

  /** Feed one observation; returns the transitions it caused (time-based ones come from tick()). */
  observe(o: Observation): Transition[] {
    const out: Transition[] = [];
    switch (o.kind) {
      case 'ingests': this.onIngests(o.runtime, o.at, o.present, o.closed, out); break;
      case 'log': this.onLog(o.at, o.event, out); break;
      case 'pods': this.onPods(o.pods, o.at, out); break;
      case 'runtime': this.runtimes.set(o.info.name, { ...this.runtimes.get(o.info.name), ...o.info }); break;
    }
    this.evaluate(out);
    return out;
  }

  /** Re-evaluate time-based states (stalled, slow, unpacking → completed). Call once per poll. */
  tick(): Transition[] {
    const out: Transition[] = [];
    this.evaluate(out);
    return out;
  }

  /** Pulls in flight (and, with includeFinished, the recent finished ones), newest first. */
  records(includeFinished = false): PullRecord[] {
    const now = this.opts.now();
    const live = [...this.pulls.values()].map((p) => this.toRecord(p, now));
    const done = includeFinished ? this.finished.map((p) => this.toRecord(p, now)) : [];
    return [...live, ...done].sort((a, b) => b.startedAt.localeCompare(a.startedAt));
  }

  runtime(name?: RuntimeName): RuntimeInfo | undefined {
    if (name) return this.runtimes.get(name);
    return this.runtimes.values().next().value;
  }

  /** Leftover ingests not part of any pull in flight (for status/bundle). */
  dormantIngests(): Array<{ runtime: RuntimeName; ingest: IngestStatus }> {
    return [...this.dormant.values()].map((d) => ({ runtime: d.runtime, ingest: d.ingest }));
  }

  // ---------------------------------------------------------------- ingests

  private onIngests(runtime: RuntimeName, at: number, present: IngestStatus[], closed: ClosedIngest[], out: Transition[]): void {
    const seen = new Set<string>();
    for (const ing of present) {
      const key = `${runtime}:${ing.key}`;
      seen.add(key);
      const ownerId = this.ingestOwner.get(key);
      const owner = ownerId ? this.pulls.get(ownerId) : undefined;
      if (owner) {
        if (this.contradicts(owner, ing)) {
          // Evidence arrived (labels, manifest) that says this blob belongs elsewhere: move it.
          const better = this.findPullFor(runtime, ing, owner) ?? this.createPullFromIngest(runtime, ing, at, out);
          if (better !== owner) this.moveLayer(key, owner, better);
        } else if (owner.synthetic || !owner.imageKnown) {
          const better = this.findPullFor(runtime, ing, owner);
          if (better && better !== owner) this.moveLayer(key, owner, better);
        }
        this.updateLayer(this.pulls.get(this.ingestOwner.get(key) as string) as Pull, key, ing, at, out);
        continue;
      }
      const dormant = this.dormant.get(key);
      if (dormant) {
        dormant.ingest = ing;
        if (ing.offset === dormant.offset && !this.claimedByKnownPull(runtime, ing)) continue;
        this.dormant.delete(key);
      } else if (!this.claimedByKnownPull(runtime, ing)) {
        const lastWrite = ing.lastWriteAt ?? at;
        if (at - lastWrite >= this.opts.stallAfterMs) {
          this.dormant.set(key, { offset: ing.offset, ingest: ing, runtime });
          continue;
        }
      }
      if (ing.attributionPending && !ing.registry && !this.findPullByManifest(runtime, ing)) {
        // Guessing now could give the blob to the wrong pull for good (small blobs commit before
        // their labels arrive): wait a little for the source's answer.
        const since = this.pending.get(key)?.since ?? at;
        this.pending.set(key, { since, lastWriteAt: Math.min(ing.lastWriteAt ?? at, at), runtime });
        if (at - since < this.opts.attributionWaitMs) continue;
      }
      this.pending.delete(key);
      const pull = this.findPullFor(runtime, ing) ?? this.createPullFromIngest(runtime, ing, at, out);
      this.addLayer(pull, key, ing, at);
    }
    // A close the source cannot judge (null) is "done"; failures come from logs.
    for (const c of closed) this.closeIngest(`${runtime}:${c.key}`, c.committed ?? true, at);
    // ingests that vanished without being reported closed (source restarted, dir removed)
    for (const [key, pullId] of this.ingestOwner) {
      if (!key.startsWith(`${runtime}:`) || seen.has(key)) continue;
      const pull = this.pulls.get(pullId);
      const layer = pull?.layers.get(key);
      if (layer && layer.done === 'no') {
        const complete = layer.bytesTotal !== null && layer.bytesDone >= layer.bytesTotal;
        this.closeIngest(key, complete, at);
      }
    }
    for (const key of [...this.dormant.keys()]) {
      if (key.startsWith(`${runtime}:`) && !seen.has(key)) this.dormant.delete(key);
    }
    for (const key of [...this.pending.keys()]) {
      if (key.startsWith(`${runtime}:`) && !seen.has(key)) this.pending.delete(key);
    }
  }

  /** The ingest's own evidence names another repository or manifest than the pull that holds it. */
  private contradicts(owner: Pull, ing: IngestStatus): boolean {
    if (owner.synthetic) return false;
    if (ing.registry && ing.repository) {
      return !(sameRegistry(owner.registry, ing.registry) && owner.repository === ing.repository);
    }
    if (ing.manifestDigest && owner.manifestDigests.size > 0 && !owner.manifestDigests.has(ing.manifestDigest)) {
      return [...this.pulls.values()].some((p) => p !== owner && p.manifestDigests.has(ing.manifestDigest as string));
    }
    return false;
  }

  private findPullByManifest(runtime: RuntimeName, ing: IngestStatus): Pull | undefined {
    if (!ing.manifestDigest) return undefined;
    for (const p of this.pulls.values()) {
      if (p.runtime === runtime && !p.synthetic && p.manifestDigests.has(ing.manifestDigest)) return p;
    }
    return undefined;
  }

  private claimedByKnownPull(runtime: RuntimeName, ing: IngestStatus): boolean {
    const p = this.findPullFor(runtime, ing);
    return Boolean(p && !p.synthetic && p.fromLog);
  }

  /** Which pull in flight does this ingest belong to? */
  private findPullFor(runtime: RuntimeName, ing: IngestStatus, exclude?: Pull): Pull | undefined {
    const candidates = [...this.pulls.values()].filter((p) => p.runtime === runtime && p !== exclude && !p.synthetic);
    if (ing.registry && ing.repository) {
      const byRepo = candidates.filter((p) => sameRegistry(p.registry, ing.registry as string) && p.repository === ing.repository);
      if (byRepo.length) return byRepo.sort((a, b) => b.startedAt - a.startedAt)[0];
    }
    if (ing.manifestDigest) {
      const byManifest = candidates.find((p) => p.manifestDigests.has(ing.manifestDigest as string));
      if (byManifest) return byManifest;
    }
    if (ing.registry && ing.repository) return undefined; // a new repository: its own pull
    if (exclude && !exclude.synthetic) return undefined;
    // No attribution: only safe when exactly one pull of this runtime is in flight.
    const open = candidates.filter((p) => !p.finishedAt);
    if (open.length === 1) return open[0];
    return undefined;
  }

  private createPullFromIngest(runtime: RuntimeName, ing: IngestStatus, at: number, out: Transition[]): Pull {
    if (ing.registry && ing.repository) {
      return this.createPull({
        runtime, at: ing.startedAt && ing.startedAt <= at ? ing.startedAt : at,
        image: `${ing.registry}/${ing.repository}`, imageKnown: false,
        registry: ing.registry, repository: ing.repository, synthetic: false, fromLog: false,
      }, out);
    }
    const existing = [...this.pulls.values()].find((p) => p.synthetic && p.runtime === runtime);
    if (existing) return existing;
    return this.createPull({
      runtime, at, image: UNATTRIBUTED, imageKnown: false, registry: '', repository: '', synthetic: true, fromLog: false,
    }, out);
  }

  private createPull(
    p: { runtime: RuntimeName; at: number; image: string; imageKnown: boolean; registry: string; repository: string; synthetic: boolean; fromLog: boolean },
    out: Transition[],
  ): Pull {
    const pull: Pull = {
      id: `${p.runtime}-${p.at.toString(36)}-${(++this.seq).toString(36)}`,
      image: p.image, imageKnown: p.imageKnown, registry: p.registry, repository: p.repository,
      runtime: p.runtime, synthetic: p.synthetic, state: 'downloading',
      startedAt: p.at, updatedAt: p.at, lastProgressAt: p.at, lastNewBlobAt: p.at,
      layers: new Map(), manifestDigests: new Set(), pods: [], window: new RateWindow(this.opts.stallAfterMs),
      bytesSeen: 0, idleGapsMs: [], fromLog: p.fromLog,
    };
    pull.pods = this.podsFor(pull);
    this.pulls.set(pull.id, pull);
    pull.window.add(p.at, 0);
    out.push(this.transition('started', null, 'downloading', pull, p.at));
    return pull;
  }

  private addLayer(pull: Pull, key: string, ing: IngestStatus, at: number): void {
    const lastWrite = Math.min(ing.lastWriteAt ?? at, at);
    const layer: Layer = {
      ingestKey: ing.key,
      digest: ing.digest ?? ing.key,
      kind: ing.blobKind,
      bytesDone: ing.offset,
      bytesTotal: ing.total ?? null,
      startedAt: ing.startedAt && ing.startedAt <= at ? ing.startedAt : at,
      lastProgressAt: lastWrite,
      done: 'no',
      state: 'downloading',
      window: new RateWindow(this.opts.stallAfterMs),
      manifestDigest: ing.manifestDigest,
    };
    layer.window.add(at, ing.offset);
    pull.layers.set(key, layer);
    this.ingestOwner.set(key, pull.id);
    if (ing.manifestDigest) pull.manifestDigests.add(ing.manifestDigest);
    if (ing.digest && (ing.blobKind === 'manifest' || ing.blobKind === 'index')) pull.manifestDigests.add(ing.digest);
    pull.lastNewBlobAt = at;
    if (lastWrite > pull.lastProgressAt) this.progress(pull, lastWrite);
    this.refreshPullBytes(pull, at);
  }

  private updateLayer(pull: Pull, key: string, ing: IngestStatus, at: number, _out: Transition[]): void {
    const layer = pull.layers.get(key);
    if (!layer) return;
    if (ing.total !== undefined) layer.bytesTotal = ing.total;
    if (ing.manifestDigest) { layer.manifestDigest = ing.manifestDigest; pull.manifestDigests.add(ing.manifestDigest); }
    if (ing.offset !== layer.bytesDone) {
      // bytes moved (a smaller offset means the runtime restarted the blob: still movement)
      const when = Math.min(Math.max(ing.lastWriteAt ?? at, layer.lastProgressAt), at);
      layer.bytesDone = ing.offset;
      layer.lastProgressAt = when;
      this.progress(pull, when);
    }
    layer.window.add(at, layer.bytesDone);
    this.refreshPullBytes(pull, at);
  }

  private progress(pull: Pull, when: number): void {
    const gap = when - pull.lastProgressAt;
    if (gap > 1000) {
      pull.idleGapsMs.push(gap);
      if (pull.idleGapsMs.length > MAX_GAPS) {
        pull.idleGapsMs.sort((a, b) => b - a);
        pull.idleGapsMs.length = MAX_GAPS;
      }
    }
    if (when > pull.lastProgressAt) pull.lastProgressAt = when;
  }

  private refreshPullBytes(pull: Pull, at: number): void {
    let sum = 0;
    for (const l of pull.layers.values()) sum += l.bytesDone;
    pull.bytesSeen = sum;
    pull.window.add(at, sum);
    pull.updatedAt = at;
  }

  private closeIngest(key: string, committed: boolean, at: number): void {
    const pullId = this.ingestOwner.get(key);
    this.ingestOwner.delete(key);
    this.dormant.delete(key);
    const pull = pullId ? this.pulls.get(pullId) : undefined;
    const layer = pull?.layers.get(key);
    if (!pull || !layer || layer.done !== 'no') return;
    layer.done = committed ? 'committed' : 'aborted';
    layer.state = layer.done;
    if (committed && layer.bytesTotal !== null && layer.bytesDone < layer.bytesTotal) {
      layer.bytesDone = layer.bytesTotal;
      this.progress(pull, at);
    }
    this.refreshPullBytes(pull, at);
  }

  private moveLayer(key: string, from: Pull, to: Pull): void {
    const layer = from.layers.get(key);
    if (!layer) return;
    from.layers.delete(key);
    to.layers.set(key, layer);
    this.ingestOwner.set(key, to.id);
    if (layer.manifestDigest) to.manifestDigests.add(layer.manifestDigest);
    if (layer.lastProgressAt > to.lastProgressAt) to.lastProgressAt = layer.lastProgressAt;
    // The pull it left only progressed when its own blobs did.
    let last = from.startedAt;
    for (const l of from.layers.values()) last = Math.max(last, l.lastProgressAt);
    from.lastProgressAt = last;
    const at = this.opts.now();
    this.refreshPullBytes(from, at);
    this.refreshPullBytes(to, at);
    from.window.reset(at, from.bytesSeen);
    if (from.synthetic && from.layers.size === 0) this.pulls.delete(from.id);
  }

  // ---------------------------------------------------------------- logs

  private onLog(at: number, ev: PullLogEvent, out: Transition[]): void {
    const now = this.opts.now();
    const runtime = RUNTIME_OF[ev.component] ?? this.defaultRuntime();
    if (RUNTIME_OF[ev.component]) this.logsSeenFrom.add(runtime);
    const ref = parseImageRef(ev.image);
    let pull = this.findPullByImage(ref.normalized, ref.registry, ref.repository);
    switch (ev.type) {
      case 'pull-started': {
        if (now - at > this.opts.logReplayHorizonMs) return;
        if (pull) {
          if (!pull.imageKnown) { pull.image = ev.image; pull.imageKnown = true; pull.registry = ref.registry; }
          pull.fromLog = true;
          return;
        }
        pull = this.createPull({
          runtime, at: Math.min(at, now), image: ev.image, imageKnown: true,
          registry: ref.registry, repository: ref.repository, synthetic: false, fromLog: true,
        }, out);
        this.adoptUnattributed(pull);
        return;
      }
      case 'pull-succeeded': {
        if (!pull) return;
        pull.durationMs = ev.durationMs;
        this.finish(pull, 'completed', at, out);
        return;
      }
      case 'pull-cancelled': {
        if (!pull) {
          if (now - at > this.opts.logReplayHorizonMs) return;
          pull = this.createPull({
            runtime, at, image: ev.image, imageKnown: true, registry: ref.registry, repository: ref.repository,
            synthetic: false, fromLog: true,
          }, out);
        }
        const total = this.pullTotal(pull);
        const watched = pull.layers.size > 0
          ? `${pull.bytesSeen} of ${total ?? '?'} bytes`
          : 'no blob bytes seen';
        pull.cancel = {
          by: RUNTIME_OF[ev.component] ?? 'kubelet',
          at: new Date(at).toISOString(),
          deadlineMs: ev.deadlineMs ?? this.runtimes.get(runtime)?.pullDeadlineMs ?? undefined,
          lastProgress: ev.lastProgress ? `${watched}; runtime: ${ev.lastProgress}` : watched,
          bytesDone: pull.bytesSeen,
          bytesTotal: total,
        };
        this.finish(pull, 'cancelled-by-runtime', at, out);
        return;
      }
      case 'pull-failed': {
        if (!pull) {
          // A failure we never saw start: keep it in history so people can see it.
          const recent = this.finished.find((p) => p.image === ev.image && at - (p.finishedAt ?? 0) < 60_000);
          if (recent) { recent.error ??= ev.error; return; }
          return;
        }
        pull.error = ev.error ?? pull.error;
        this.finish(pull, 'failed', at, out);
        return;
      }
      case 'pull-backoff':
      case 'pull-stopped':
        return;
    }
  }

  private findPullByImage(normalized: string, registry: string, repository: string): Pull | undefined {
    let byRepo: Pull | undefined;
    for (const p of this.pulls.values()) {
      if (p.synthetic) continue;
      if (p.imageKnown && parseImageRef(p.image).normalized === normalized) return p;
      if (sameRegistry(p.registry, registry) && p.repository === repository && (!byRepo || p.startedAt > byRepo.startedAt)) byRepo = p;
    }
    return byRepo;
  }

  /** A pull just named by a log line takes the unattributed layers if it is the only pull of its runtime. */
  private adoptUnattributed(pull: Pull): void {
    const synthetic = [...this.pulls.values()].find((p) => p.synthetic && p.runtime === pull.runtime);
    if (!synthetic) return;
    const others = [...this.pulls.values()].filter((p) => !p.synthetic && p.runtime === pull.runtime && p !== pull);
    if (others.length) return;
    for (const key of [...synthetic.layers.keys()]) this.moveLayer(key, synthetic, pull);
    if (synthetic.startedAt < pull.startedAt) pull.startedAt = synthetic.startedAt;
  }

  private defaultRuntime(): RuntimeName {
    return this.runtimes.keys().next().value ?? 'containerd';
  }

  // ---------------------------------------------------------------- pods

  private onPods(pods: PodImageWait[], at: number, out: Transition[]): void {
    this.waiting.clear();
    for (const pod of pods) {
      const n = parseImageRef(pod.image).normalized;
      const list = this.waiting.get(n) ?? [];
      list.push(pod);
      this.waiting.set(n, list);
    }
    for (const p of this.pulls.values()) {
      const before = new Set(p.pods.map((x) => `${x.namespace}/${x.name}`));
      p.pods = this.podsFor(p);
      const joined = p.pods.some((x) => !before.has(`${x.namespace}/${x.name}`));
      // Pods that start waiting on a pull that is already stalled or slow must hear about it too:
      // the state is announced again (from === to) for them.
      if (joined && (p.state === 'stalled' || p.state === 'slow')) out.push(this.transition(p.state, p.state, p.state, p, at));
    }
  }

  private podsFor(pull: Pull): PodRef[] {
    if (pull.synthetic) return [];
    const out: PodRef[] = [];
    for (const [image, pods] of this.waiting) {
      const ref = parseImageRef(image);
      const match = pull.imageKnown
        ? image === parseImageRef(pull.image).normalized
        : sameRegistry(ref.registry, pull.registry) && ref.repository === pull.repository;
      if (!match) continue;
      for (const pod of pods) out.push({ namespace: pod.namespace, name: pod.name, container: pod.container, reason: pod.reason });
    }
    return out;
  }

  // ---------------------------------------------------------------- evaluation

  private evaluate(out: Transition[]): void {
    const now = this.opts.now();
    for (const pull of [...this.pulls.values()]) {
      if (pull.finishedAt !== undefined) continue;
      const next = this.nextState(pull, now);
      if (next === 'completed') { this.finish(pull, 'completed', now, out); continue; }
      if (next !== pull.state) {
        const from = pull.state;
        pull.state = next;
        pull.updatedAt = now;
        if (next === 'unpacking') pull.unpackingSince = now; else pull.unpackingSince = undefined;
        // After a stall, speed is measured afresh: a pull that just resumed is not "slow" for its idle past.
        if (from === 'stalled') pull.window.reset(pull.lastProgressAt, pull.bytesSeen);
        out.push(this.transition(kindFor(from, next), from, next, pull, now));
      }
    }
  }

  /** Latest write to a blob of this runtime whose pull is not known yet (it may be this pull's). */
  private pendingWriteAt(runtime: RuntimeName): number | undefined {
    let last: number | undefined;
    for (const p of this.pending.values()) if (p.runtime === runtime && (last === undefined || p.lastWriteAt > last)) last = p.lastWriteAt;
    return last;
  }

  private nextState(pull: Pull, now: number): PullState {
    const { stallAfterMs, slowBelowBytesPerSecond } = this.opts;
    const inFlight = [...pull.layers.values()].filter((l) => l.done === 'no');
    for (const l of inFlight) l.state = this.layerState(l, now);
    // Bytes arriving in a blob whose pull is still being looked up may be this pull's: while they
    // move (at most attributionWaitMs), this pull is neither stalled nor unpacking.
    // A pull with nothing else in flight keeps its state until the pending blob is placed (≤ attributionWaitMs),
    // then the blob is judged by its own write times.
    const pendingAt = pull.synthetic ? undefined : this.pendingWriteAt(pull.runtime);
    if (pendingAt !== undefined && (inFlight.length === 0 || (now - pendingAt < stallAfterMs && now - pull.lastProgressAt >= stallAfterMs))) {
      return (pull.state === 'stalled' || pull.state === 'unpacking') && now - pendingAt < stallAfterMs ? 'downloading' : pull.state;
    }
    if (pull.layers.size > 0 && inFlight.length === 0) {
      const quiet = now - pull.lastNewBlobAt;
      const hasLogs = this.logsSeenFrom.has(pull.runtime);
      if (pull.synthetic && quiet >= this.opts.unpackQuietMs) return 'completed';
      if (!hasLogs && quiet >= this.opts.unpackQuietMs) return 'completed';
      if (pull.unpackingSince !== undefined && now - pull.unpackingSince >= this.opts.unpackMaxMs) return 'completed';
      return 'unpacking';
    }
    const idle = now - pull.lastProgressAt;
    if (idle >= stallAfterMs) return 'stalled';
    if (pull.state === 'stalled') return 'downloading';
    const { bytesPerSecond, covered } = pull.window.rate(now, pull.bytesSeen);
    if (covered && now - pull.startedAt >= stallAfterMs) {
      if (bytesPerSecond < slowBelowBytesPerSecond) return 'slow';
      if (pull.state === 'slow' && bytesPerSecond < slowBelowBytesPerSecond * 1.2) return 'slow';
    }
    return 'downloading';
  }

  private layerState(l: Layer, now: number): LayerState {
    if (now - l.lastProgressAt >= this.opts.stallAfterMs) return 'stalled';
    if (l.state === 'stalled') { l.window.reset(l.lastProgressAt, l.bytesDone); return 'downloading'; }
    const { bytesPerSecond, covered } = l.window.rate(now, l.bytesDone);
    if (covered && bytesPerSecond < this.opts.slowBelowBytesPerSecond) return 'slow';
    return 'downloading';
  }

  private finish(pull: Pull, state: 'completed' | 'failed' | 'cancelled-by-runtime', at: number, out: Transition[]): void {
    if (pull.finishedAt !== undefined) return;
    const from = pull.state;
    pull.state = state;
    pull.finishedAt = at;
    pull.updatedAt = at;
    pull.durationMs ??= Math.max(at - pull.startedAt, 0);
    for (const l of pull.layers.values()) {
      if (l.done === 'no') {
        l.state = state === 'completed' ? 'committed' : 'aborted';
        if (state === 'completed') {
          l.done = 'committed';
          // containerd writes `data` in 1 MiB steps: the runtime's "pulled" can come before we saw the last one.
          if (l.bytesTotal !== null) l.bytesDone = l.bytesTotal;
        }
      }
    }
    if (state === 'completed') this.refreshPullBytes(pull, at);
    for (const key of pull.layers.keys()) {
      this.ingestOwner.delete(key);
      // Left-over ingests of a cancelled/failed pull stay on disk: remember them as dormant, not stalled.
      const layer = pull.layers.get(key) as Layer;
      if (state !== 'completed' && layer.done === 'no') {
        const runtime = key.slice(0, key.indexOf(':')) as RuntimeName;
        this.dormant.set(key, {
          offset: layer.bytesDone, runtime,
          ingest: { key: layer.ingestKey, ref: layer.ingestKey, blobKind: layer.kind, digest: layer.digest, offset: layer.bytesDone },
        });
      }
    }
    this.pulls.delete(pull.id);
    this.finished.unshift(pull);
    if (this.finished.length > this.opts.keepFinished) this.finished.length = this.opts.keepFinished;
    out.push(this.transition(state === 'completed' ? 'completed' : state === 'failed' ? 'failed' : 'cancelled', from, state, pull, at));
  }

  // ---------------------------------------------------------------- records

  private pullTotal(pull: Pull): number | null {
    let total = 0;
    for (const l of pull.layers.values()) {
      if (l.bytesTotal === null) return null;
      total += l.bytesTotal;
    }
    return pull.layers.size ? total : null;
  }

  private transition(kind: TransitionKind, from: PullState | null, to: PullState, pull: Pull, at: number): Transition {
    return { kind, from, to, at: new Date(at).toISOString(), pull: this.toRecord(pull, at) };
  }

  private toRecord(pull: Pull, now: number): PullRecord {
    const end = pull.finishedAt ?? now;
    const rt = this.runtimes.get(pull.runtime);
    const layers: LayerRecord[] = [...pull.layers.values()].map((l) => ({
      digest: l.digest,
      kind: l.kind,
      state: l.state,
      bytesDone: l.bytesDone,
      bytesTotal: l.bytesTotal,
      idleSeconds: l.done === 'no' ? round1((end - l.lastProgressAt) / 1000) : 0,
      rateBytesPerSecond: l.done === 'no' ? Math.round(l.window.rate(end, l.bytesDone).bytesPerSecond) : 0,
      startedAt: new Date(l.startedAt).toISOString(),
    }));
    const record: PullRecord = {
      id: pull.id,
      image: pull.image,
      registry: pull.registry,
      repository: pull.repository,
      state: pull.state,
      startedAt: new Date(pull.startedAt).toISOString(),
      updatedAt: new Date(pull.updatedAt).toISOString(),
      lastProgressAt: new Date(pull.lastProgressAt).toISOString(),
      idleSeconds: pull.finishedAt === undefined ? round1((end - pull.lastProgressAt) / 1000) : 0,
      rateBytesPerSecond: pull.finishedAt === undefined ? Math.round(pull.window.rate(end, pull.bytesSeen).bytesPerSecond) : 0,
      bytesDone: pull.bytesSeen,
      bytesTotal: this.pullTotal(pull),
      layers,
      runtime: { name: pull.runtime, ...(rt?.version ? { version: rt.version } : {}) },
      pods: pull.pods,
      idleGapsMs: [...pull.idleGapsMs],
    };
    if (rt && rt.pullDeadlineMs !== undefined) record.runtimeDeadlineMs = rt.pullDeadlineMs;
    if (pull.finishedAt !== undefined) record.finishedAt = new Date(pull.finishedAt).toISOString();
    if (pull.durationMs !== undefined) record.durationMs = pull.durationMs;
    if (pull.cancel) record.cancel = pull.cancel;
    if (pull.error) record.error = pull.error;
    return record;
  }
}

function kindFor(from: PullState, to: PullState): TransitionKind {
  switch (to) {
    case 'stalled': return 'stalled';
    case 'slow': return 'slow';
    case 'unpacking': return 'unpacking';
    case 'downloading': return from === 'stalled' || from === 'slow' ? 'resumed' : 'started';
    case 'completed': return 'completed';
    case 'failed': return 'failed';
    case 'cancelled-by-runtime': return 'cancelled';
  }
}

function round1(n: number): number {
  return Math.max(0, Math.round(n * 10) / 10);
}
