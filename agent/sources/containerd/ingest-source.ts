/**
 * ContainerdIngestSource: the real byte progress of every blob containerd is fetching, from the
 * ingest directories of its local content store, for every namespace (CRI `k8s.io`, Docker's
 * containerd image store `moby`, `default` for ctr, …).
 *
 * Per poll it lists `<root>/io.containerd.content.v1.content/ingest/` and, per ingest dir, stats the
 * dir and its `data` file: two stat calls. `ref` and `startedat` never change for a dir and are read
 * once; `updatedat` and `total` are re-read only when the dir's mtime changed (containerd replaces
 * them by rename, which bumps it). Everything else (which manifest lists a layer, which registry and
 * repository it came from) is resolved asynchronously, off the poll path, and cached.
 *
 * A present ingest is not proof of an active download: containerd keeps the ingest dirs of
 * cancelled or failed pulls so that a retry can resume. lastWriteAt tells how long it has been idle.
 */
import { readFileSync, statSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import type { ClosedIngest, IngestStatus } from '../../model/observations.js';
import type { Source, SourceContext } from '../source.js';
import type { ContainerdClient } from './grpc.js';
import { isNotFound, isUnavailable } from './grpc-status.js';
import { distributionSources, parseIngestRef, parseTimestamp, parseTotal, type IngestRef } from './ingest-files.js';
import { ManifestIndex, pickManifest } from './manifest-index.js';
import { RuntimeDirPoller } from '../poll-dir.js';

export const CONTENT_PLUGIN_DIR = 'io.containerd.content.v1.content';

export interface ContainerdIngestSourceOptions {
  /** containerd root (`root` in config.toml), e.g. /var/lib/containerd or /host/var/lib/containerd. */
  root: string;
  /** Poll interval in ms (the agent's --poll). */
  pollMs: number;
  /** containerd gRPC socket path; when reachable, used for the runtime version and repository labels. */
  socket?: string;
  /** Only report ingests of these namespaces (default: all). */
  namespaces?: string[];
  /** Source name in observations and health reports (default "containerd-ingest"). */
  name?: string;
  /** Deadline of each gRPC call (default 2000 ms). */
  grpcDeadlineMs?: number;
  /** Minimum time between two listings of blobs/sha256 while looking for a manifest (default 5000 ms). */
  rescanMs?: number;
}

interface DirState {
  name: string;
  path: string;
  firstSeenAt: number;
  polls: number;
  /** Dir mtime when its small files were last read; -1 forces a re-read. */
  readAtDirMtime: number;
  ref?: IngestRef;
  startedAt?: number;
  updatedAt?: number;
  total?: number;
  /** Causes already reported for this dir (each is counted once per dir, not per poll). */
  reported?: Set<string>;
  last?: IngestStatus;
}

interface Attribution {
  manifestDigest?: string;
  registry?: string;
  repository?: string;
  /** The label lookup is finished (found, or given up). */
  labelsDone: boolean;
  labelTries: number;
  nextLabelTryAt: number;
}

/** A just-created ingest dir is filled file by file; missing files are only a problem after this. */
const CREATION_GRACE_MS = 3000;
const LABEL_RETRY_MS = 3000;
const LABEL_MAX_TRIES = 5;
const VERSION_RETRY_MS = 30_000;

function errCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | null)?.code;
}

type FileRead = { ok: true; text: string } | { ok: false; missing: boolean; err: unknown };

function readSmall(path: string): FileRead {
  try {
    return { ok: true, text: readFileSync(path, 'utf8') };
  } catch (err) {
    return { ok: false, missing: errCode(err) === 'ENOENT', err };
  }
}

export class ContainerdIngestSource implements Source {
  readonly name: string;
  private readonly contentDir: string;
  private readonly ingestDir: string;
  private readonly blobsDir: string;
  private readonly namespaces?: ReadonlySet<string>;
  private readonly dirs = new Map<string, DirState>();
  private readonly attributions = new Map<string, Attribution>();
  private readonly labelCache = new Map<string, { registry?: string; repository?: string } | null>();
  private readonly index: ManifestIndex;
  /** Loaded on first use: @grpc/grpc-js is only paid for when a socket is configured. */
  private clientPromise?: Promise<ContainerdClient>;
  private readonly hasSocket: boolean;
  private ctx?: SourceContext;
  private timer?: NodeJS.Timeout;
  private stopped = false;
  private attributing?: Promise<void>;
  private versionPending?: Promise<void>;
  private versionDone = false;
  private nextVersionTryAt = 0;
  private socketDown = false;
  private readonly dirPoller: RuntimeDirPoller;
  private readonly watchedManifests = new Set<string>();
  /** Counters for tests and benches. */
  readonly stats = { polls: 0, smallFileReads: 0, emitted: 0 };

  constructor(private readonly opts: ContainerdIngestSourceOptions) {
    this.name = opts.name ?? 'containerd-ingest';
    this.contentDir = join(opts.root, CONTENT_PLUGIN_DIR);
    this.ingestDir = join(this.contentDir, 'ingest');
    this.dirPoller = new RuntimeDirPoller(this.ingestDir, opts.root, 'ingest-dir-unreadable', (cause, err) => this.report(cause, err));
    this.blobsDir = join(this.contentDir, 'blobs', 'sha256');
    if (opts.namespaces && opts.namespaces.length > 0) this.namespaces = new Set(opts.namespaces);
    this.index = new ManifestIndex({
      blobsDir: this.blobsDir,
      rescanMs: opts.rescanMs ?? 5000,
      onError: (cause, err) => this.report(cause, err),
    });
    this.hasSocket = Boolean(opts.socket);
  }

  async start(ctx: SourceContext): Promise<void> {
    this.ctx = ctx;
    this.stopped = false;
    this.maybeFetchVersion();
    this.pollOnce();
    this.schedule();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await Promise.allSettled([this.attributing, this.versionPending]);
    if (this.clientPromise) (await this.clientPromise.catch(() => undefined))?.close();
    this.clientPromise = undefined;
  }

  /** Resolves when pending asynchronous attribution work is done (tests, benches). */
  async settle(): Promise<void> {
    await Promise.allSettled([this.attributing, this.versionPending]);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.pollOnce();
      this.schedule();
    }, this.opts.pollMs);
    this.timer.unref();
  }

  private report(cause: string, err: unknown): void {
    this.ctx?.health.report(this.name, cause, err);
  }

  private reportDir(st: DirState, cause: string, err: unknown): void {
    st.reported ??= new Set();
    if (st.reported.has(cause)) return;
    st.reported.add(cause);
    this.report(cause, err instanceof Error ? new Error(`${st.path}: ${err.message}`) : `${st.path}: ${String(err)}`);
  }

  /** One poll: read every ingest dir, emit one `ingests` observation. Never throws. */
  pollOnce(): void {
    const ctx = this.ctx;
    if (!ctx) return;
    try {
      this.poll(ctx);
    } catch (err) {
      this.report('poll-failed', err);
    }
  }

  private poll(ctx: SourceContext): void {
    this.stats.polls++;
    const now = ctx.now();
    // containerd creates the content store dirs (and ingest/) with the first download. Without a
    // root there is no evidence: emit nothing, re-check every poll (a root appearing later works).
    const entries = this.dirPoller.list(() => ctx.logger.info({ source: this.name, dir: this.ingestDir }, 'containerd content store found'));
    if (!entries) return;

    const seen = new Set<string>();
    const present: IngestStatus[] = [];
    for (const entry of entries) {
      if (!entry.isDirectory()) continue;
      const name = entry.name;
      seen.add(name);
      let st = this.dirs.get(name);
      if (!st) {
        st = { name, path: join(this.ingestDir, name), firstSeenAt: now, polls: 0, readAtDirMtime: -1 };
        this.dirs.set(name, st);
      }
      st.polls++;
      const status = this.readIngest(st, now);
      if (status) {
        st.last = status;
        present.push(status);
      } else if (st.last) {
        // The dir is still there but could not be read this time (e.g. commit in progress: data
        // renamed, dir not yet removed). Keep the last known numbers; never invent new ones.
        present.push(st.last);
      }
    }

    const closed: ClosedIngest[] = [];
    for (const [name, st] of this.dirs) {
      if (seen.has(name)) continue;
      this.dirs.delete(name);
      if (!st.last) continue;
      const digest = st.last.digest;
      const committed = digest !== undefined && this.blobExists(digest);
      const c: ClosedIngest = { key: name, committed };
      if (digest) c.digest = digest;
      closed.push(c);
      this.onClosed(st, committed);
    }

    this.stats.emitted++;
    ctx.emit({ kind: 'ingests', runtime: 'containerd', source: this.name, at: now, present, closed });
    this.maybeAttribute(present, now);
    this.maybeFetchVersion();
  }

  private blobExists(digest: string): boolean {
    const m = /^sha256:([a-f0-9]{64})$/.exec(digest);
    if (!m?.[1]) return false;
    try {
      return statSync(join(this.blobsDir, m[1]), { throwIfNoEntry: false })?.isFile() ?? false;
    } catch {
      return false;
    }
  }

  /** Reads one ingest dir; undefined = skip it this poll (reported when it is a real problem). */
  private readIngest(st: DirState, now: number): IngestStatus | undefined {
    let dirStat: Stats | undefined;
    try {
      dirStat = statSync(st.path, { throwIfNoEntry: false });
    } catch (err) {
      this.reportDir(st, 'ingest-unreadable', err);
      return undefined;
    }
    if (!dirStat) return undefined; // removed between readdir and stat: it shows as closed next poll
    const young = now - st.firstSeenAt < Math.max(CREATION_GRACE_MS, Math.min(2.5 * this.opts.pollMs, 30_000));

    if (dirStat.mtimeMs !== st.readAtDirMtime) {
      let complete = true;
      if (!st.ref) {
        const r = readSmall(join(st.path, 'ref'));
        this.stats.smallFileReads++;
        if (!r.ok) {
          complete = false;
          if (r.missing) {
            if (!young) this.reportDir(st, 'ingest-ref-missing', r.err);
          } else {
            this.reportDir(st, 'ingest-ref-unreadable', r.err);
          }
        } else {
          const parsed = parseIngestRef(r.text);
          if (parsed.ok) st.ref = parsed.value;
          else {
            complete = false;
            // containerd writes `ref` with a plain write (not rename): a reader can catch it half written.
            if (!young) this.reportDir(st, 'ingest-ref-invalid', parsed.reason);
          }
        }
      }
      if (st.ref && st.startedAt === undefined) {
        complete = this.readTime(st, 'startedat', young) && complete;
      }
      if (st.ref) {
        complete = this.readTime(st, 'updatedat', young) && complete;
        if (st.total === undefined) {
          const r = readSmall(join(st.path, 'total'));
          this.stats.smallFileReads++;
          if (r.ok && r.text.length === 0 && young) {
            complete = false; // written with a plain write (not rename): caught before its bytes landed
          } else if (r.ok) {
            const t = parseTotal(r.text);
            if (t.ok) st.total = t.value;
            else this.reportDir(st, 'ingest-total-invalid', t.reason);
          } else if (!r.missing) {
            this.reportDir(st, 'ingest-total-unreadable', r.err);
          }
          // A missing `total` is normal (written only when > 0, or not yet written).
        }
      }
      // Re-read next poll while something was missing or the dir is brand new (file times are
      // jiffy-coarse: a file created in the same tick leaves the dir mtime unchanged); otherwise
      // only after the dir changes.
      st.readAtDirMtime = complete && !young ? dirStat.mtimeMs : -1;
    }
    const ref = st.ref;
    if (!ref) return undefined;
    if (this.namespaces && !this.namespaces.has(ref.namespace)) return undefined;

    let data: Stats | undefined;
    try {
      data = statSync(join(st.path, 'data'), { throwIfNoEntry: false });
    } catch (err) {
      this.reportDir(st, 'ingest-data-unreadable', err);
      return undefined;
    }
    if (!data) {
      // Normal for a moment at creation and during commit/abort; a problem only when it lasts.
      if (!young && !st.last) this.reportDir(st, 'ingest-data-missing', 'data file missing');
      return undefined;
    }
    if (!data.isFile()) {
      this.reportDir(st, 'ingest-data-not-a-file', 'data is not a regular file');
      return undefined;
    }
    const offset = data.size;
    let total = st.total;
    if (total !== undefined && offset > total) {
      this.reportDir(st, 'ingest-offset-exceeds-total', `offset ${offset} > total ${total}`);
      total = undefined;
    }
    const lastWriteAt = st.updatedAt !== undefined && st.updatedAt > data.mtimeMs ? st.updatedAt : data.mtimeMs;

    const status: IngestStatus = {
      key: st.name,
      ref: ref.ref,
      namespace: ref.namespace,
      blobKind: ref.blobKind,
      offset,
      lastWriteAt,
    };
    if (ref.digest) status.digest = ref.digest;
    if (total !== undefined) status.total = total;
    if (st.startedAt !== undefined) status.startedAt = st.startedAt;
    if (ref.digest) {
      const a = this.attributions.get(`${ref.namespace}\u0000${ref.digest}`);
      if (a?.manifestDigest) status.manifestDigest = a.manifestDigest;
      if (a?.registry) status.registry = a.registry;
      if (a?.repository) status.repository = a.repository;
      if ((ref.blobKind === 'layer' || ref.blobKind === 'config') && this.hasSocket && !this.socketDown
        && !status.registry && !(a?.labelsDone)) status.attributionPending = true;
      if ((ref.blobKind === 'manifest' || ref.blobKind === 'index') && !this.watchedManifests.has(ref.digest)) {
        this.watchedManifests.add(ref.digest);
      }
    }
    return status;
  }

  /** Reads startedat/updatedat; false when the file is missing (retry next poll). */
  private readTime(st: DirState, file: 'startedat' | 'updatedat', young: boolean): boolean {
    const r = readSmall(join(st.path, file));
    this.stats.smallFileReads++;
    if (!r.ok) {
      if (!r.missing) this.reportDir(st, `ingest-${file}-unreadable`, r.err);
      else if (!young) this.reportDir(st, `ingest-${file}-missing`, r.err);
      return !r.missing || !young;
    }
    // containerd replaces these by rename, so they are never half written; an empty file in a
    // brand-new dir is still treated as "not written yet".
    if (r.text.length === 0 && young) return false;
    const t = parseTimestamp(r.text);
    if (!t.ok) {
      this.reportDir(st, `ingest-${file}-invalid`, t.reason);
      return true;
    }
    if (file === 'startedat') st.startedAt = t.value;
    else st.updatedAt = t.value;
    return true;
  }

  private onClosed(st: DirState, committed: boolean): void {
    const ref = st.ref;
    if (!ref?.digest) return;
    this.attributions.delete(`${ref.namespace}\u0000${ref.digest}`);
    if (this.watchedManifests.delete(ref.digest) && committed) {
      // A manifest we saw being fetched is now a blob: index it right away (cheap, targeted).
      void this.index.addManifest(ref.digest);
    }
  }

  // ---- attribution (async, off the poll path) -------------------------------------------------

  private maybeAttribute(present: IngestStatus[], now: number): void {
    if (this.attributing || this.stopped) return;
    const work: Array<{ key: string; namespace: string; digest: string; startedAt?: number; att: Attribution }> = [];
    for (const s of present) {
      if (!s.digest || !s.namespace || (s.blobKind !== 'layer' && s.blobKind !== 'config')) continue;
      const key = `${s.namespace}\u0000${s.digest}`;
      let att = this.attributions.get(key);
      if (!att) {
        att = { labelsDone: !this.hasSocket, labelTries: 0, nextLabelTryAt: 0 };
        this.attributions.set(key, att);
      }
      const needsManifest = !att.manifestDigest;
      const needsLabels = !att.labelsDone && now >= att.nextLabelTryAt && !this.socketDown;
      if (needsManifest || needsLabels) {
        const w: { key: string; namespace: string; digest: string; startedAt?: number; att: Attribution } = { key, namespace: s.namespace, digest: s.digest, att };
        if (s.startedAt !== undefined) w.startedAt = s.startedAt;
        work.push(w);
      }
    }
    if (work.length === 0) return;
    this.attributing = this.attribute(work, now)
      .catch((err: unknown) => this.report('attribution-failed', err))
      .finally(() => { this.attributing = undefined; });
  }

  private async attribute(
    work: Array<{ namespace: string; digest: string; startedAt?: number; att: Attribution }>,
    now: number,
  ): Promise<void> {
    const unresolved = work.filter((w) => !w.att.manifestDigest).map((w) => w.digest);
    if (unresolved.length > 0) await this.index.refresh(unresolved, now);
    for (const w of work) {
      if (this.stopped) return;
      if (!w.att.manifestDigest) {
        const m = pickManifest(this.index.lookup(w.digest), w.startedAt);
        if (m) w.att.manifestDigest = m.digest;
      }
      if (!w.att.manifestDigest || w.att.labelsDone || !this.hasSocket || this.socketDown) continue;
      const labels = await this.labelsFor(w.namespace, w.att.manifestDigest);
      if (labels === undefined) {
        w.att.labelTries++;
        w.att.nextLabelTryAt = this.ctx ? this.ctx.now() + LABEL_RETRY_MS : 0;
        if (w.att.labelTries >= LABEL_MAX_TRIES) w.att.labelsDone = true;
        continue;
      }
      w.att.labelsDone = true;
      if (labels?.registry) w.att.registry = labels.registry;
      if (labels?.repository) w.att.repository = labels.repository;
    }
  }

  /**
   * The distribution-source label of a manifest: null = the manifest has none (final),
   * undefined = could not ask (retry later).
   */
  private async labelsFor(namespace: string, manifestDigest: string): Promise<{ registry?: string; repository?: string } | null | undefined> {
    const key = `${namespace}\u0000${manifestDigest}`;
    const cached = this.labelCache.get(key);
    if (cached !== undefined) return cached;
    if (!this.hasSocket) return null;
    try {
      const client = await this.client();
      const info = await client.contentInfo(namespace, manifestDigest);
      this.socketUp();
      const sources = distributionSources(info.labels);
      const first = sources[0];
      // Several registries or repositories for one manifest digest: the same bytes came from
      // each; the first (repositories are sorted by containerd) is as right as any.
      const value = first ? { registry: first.registry, repository: first.repositories[0] as string } : null;
      if (value === null) return undefined; // label is set right after the manifest is fetched; ask again
      if (this.labelCache.size > 2000) this.labelCache.clear();
      this.labelCache.set(key, value);
      return value;
    } catch (err) {
      if (isUnavailable(err)) this.socketFailed(err);
      else if (!isNotFound(err)) this.report('containerd-grpc-error', err);
      return undefined;
    }
  }

  private client(): Promise<ContainerdClient> {
    const socket = this.opts.socket as string;
    const deadlineMs = this.opts.grpcDeadlineMs ?? 2000;
    this.clientPromise ??= import('./grpc.js').then((m) => new m.ContainerdClient({ socket, deadlineMs }));
    return this.clientPromise;
  }

  private socketFailed(err: unknown): void {
    if (!this.socketDown) {
      this.socketDown = true;
      this.report('containerd-socket-unreachable', err);
      this.nextVersionTryAt = 0;
    }
  }

  private socketUp(): void {
    if (this.socketDown) {
      this.socketDown = false;
      this.ctx?.logger.info({ source: this.name, socket: this.opts.socket }, 'containerd socket reachable again');
    }
  }

  /** Asks containerd for its version once it is reachable (and, while it is down, for reachability). */
  private maybeFetchVersion(): void {
    const ctx = this.ctx;
    if (!ctx || !this.hasSocket || this.versionPending || this.stopped) return;
    if (this.versionDone && !this.socketDown) return;
    const now = ctx.now();
    if (now < this.nextVersionTryAt) return;
    this.nextVersionTryAt = now + (this.socketDown ? 5000 : VERSION_RETRY_MS);
    this.versionPending = this.client()
      .then((client) => client.version())
      .then((v) => {
        this.socketUp();
        if (!this.versionDone && !this.stopped) {
          this.versionDone = true;
          ctx.emit({ kind: 'runtime', at: ctx.now(), info: { name: 'containerd', version: v.version } });
        }
      })
      .catch((err: unknown) => {
        if (isUnavailable(err)) this.socketFailed(err);
        else this.report('containerd-grpc-error', err);
      })
      .finally(() => { this.versionPending = undefined; });
  }
}
