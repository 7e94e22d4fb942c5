/**
 * DockerTmpSource: byte progress of layers dockerd (graph-driver image store) is downloading.
 * dockerd sets TMPDIR to `<docker root>/tmp` and writes each layer it fetches to a temp file made
 * by `ioutil.TempFile("", "GetImageBlob")` (distribution/pull_v2.go): `GetImageBlob<digits>`.
 * Its size is the bytes received so far; the file is removed after the layer is registered or
 * when the download fails.
 *
 * With the containerd image store (`"features": {"containerd-snapshotter": true}`), dockerd keeps
 * no such files: its downloads are containerd ingests in namespace `moby`, which
 * ContainerdIngestSource already reports.
 *
 * With a socket, dockerode asks the engine for its version once (a `runtime` observation).
 */
import { statSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import type Docker from 'dockerode';
import type { ClosedIngest, IngestStatus } from '../../model/observations.js';
import type { Source, SourceContext } from '../source.js';
import { RuntimeDirPoller } from '../poll-dir.js';

export interface DockerTmpSourceOptions {
  /** dockerd data root (`data-root`), e.g. /var/lib/docker or /host/var/lib/docker. */
  dockerRoot: string;
  pollMs: number;
  /** dockerd API socket (e.g. /var/run/docker.sock): the engine version. */
  socket?: string;
  /** Source name (default "docker-tmp"). */
  name?: string;
}

export const DOCKER_BLOB_PREFIX = 'GetImageBlob';
const VERSION_RETRY_MS = 30_000;

export class DockerTmpSource implements Source {
  readonly name: string;
  private readonly tmpDir: string;
  private readonly known = new Map<string, { startedAt: number; last?: IngestStatus }>();
  /** dockerode is loaded on first use (only when a socket is configured). */
  private docker?: Promise<Docker>;
  private ctx?: SourceContext;
  private timer?: NodeJS.Timeout;
  private stopped = false;
  private versionDone = false;
  private versionPending?: Promise<void>;
  private nextVersionTryAt = 0;
  private socketDown = false;
  private readonly dirPoller: RuntimeDirPoller;
  readonly stats = { polls: 0, emitted: 0 };

  constructor(private readonly opts: DockerTmpSourceOptions) {
    this.name = opts.name ?? 'docker-tmp';
    this.tmpDir = join(opts.dockerRoot, 'tmp');
    this.dirPoller = new RuntimeDirPoller(this.tmpDir, opts.dockerRoot, 'tmp-dir-unreadable', (cause, err) => this.report(cause, err));
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
    await Promise.allSettled([this.versionPending]);
  }

  async settle(): Promise<void> {
    await Promise.allSettled([this.versionPending]);
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

  pollOnce(): void {
    const ctx = this.ctx;
    if (!ctx) return;
    try {
      this.poll(ctx);
    } catch (err) {
      this.report('poll-failed', err);
    }
    this.maybeFetchVersion();
  }

  private poll(ctx: SourceContext): void {
    this.stats.polls++;
    const now = ctx.now();
    // dockerd creates tmp/ at start; a root without it has no downloads.
    const entries = this.dirPoller.list(() => ctx.logger.info({ source: this.name, dir: this.tmpDir }, 'docker tmp dir found'));
    if (!entries) return;
    const seen = new Set<string>();
    const present: IngestStatus[] = [];
    for (const e of entries) {
      if (!e.name.startsWith(DOCKER_BLOB_PREFIX) || !e.isFile()) continue;
      let st: Stats | undefined;
      try {
        st = statSync(join(this.tmpDir, e.name), { throwIfNoEntry: false });
      } catch (err) {
        this.report('blob-unreadable', err);
      }
      const k = this.known.get(e.name);
      if (!st) {
        // Vanished between readdir and stat (done or failed): closes like the others next poll.
        if (k?.last) { seen.add(e.name); present.push(k.last); }
        continue;
      }
      seen.add(e.name);
      const entry = k ?? { startedAt: st.birthtimeMs > 0 ? st.birthtimeMs : now };
      const status: IngestStatus = {
        key: e.name,
        ref: e.name,
        blobKind: 'layer',
        offset: st.size,
        startedAt: entry.startedAt,
        lastWriteAt: st.mtimeMs,
      };
      entry.last = status;
      this.known.set(e.name, entry);
      present.push(status);
    }
    const closed: ClosedIngest[] = [];
    for (const [key, k] of this.known) {
      if (seen.has(key)) continue;
      this.known.delete(key);
      // dockerd removes the file both after registering the layer and after a failure; the file
      // alone cannot tell which (null); the detector learns failures from other evidence (logs).
      if (k.last) closed.push({ key, committed: null });
    }
    this.stats.emitted++;
    ctx.emit({ kind: 'ingests', runtime: 'docker', source: this.name, at: now, present, closed });
  }

  private maybeFetchVersion(): void {
    const ctx = this.ctx;
    const socketPath = this.opts.socket;
    if (!ctx || !socketPath || this.versionDone || this.versionPending || this.stopped) return;
    const now = ctx.now();
    if (now < this.nextVersionTryAt) return;
    this.nextVersionTryAt = now + (this.socketDown ? 5000 : VERSION_RETRY_MS);
    this.docker ??= import('dockerode').then((m) => new m.default({ socketPath, timeout: 3000 }));
    this.versionPending = this.docker
      .then((docker) => docker.version())
      .then((v) => {
        this.socketDown = false;
        if (this.stopped || this.versionDone) return;
        this.versionDone = true;
        const version = typeof v?.Version === 'string' ? v.Version : undefined;
        ctx.emit({ kind: 'runtime', at: ctx.now(), info: version ? { name: 'docker', version } : { name: 'docker' } });
      })
      .catch((err: unknown) => {
        if (!this.socketDown) {
          this.socketDown = true;
          this.report('docker-socket-unreachable', err);
        }
      })
      .finally(() => { this.versionPending = undefined; });
  }
}
