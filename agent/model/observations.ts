/**
 * What sources tell the detector. Every source turns one kind of evidence into these typed
 * observations; the detector (agent/detector) is the only place that holds pull state.
 * Times are epoch milliseconds.
 */

export type RuntimeName = 'containerd' | 'docker' | 'cri-o';
export type LogComponent = 'kubelet' | 'containerd' | 'cri-o' | 'docker';

/** Kind of blob an ingest is writing, from the containerd ref prefix (layer-, manifest-, …). */
export type BlobKind = 'layer' | 'manifest' | 'index' | 'config' | 'attestation' | 'unknown';

/** One in-progress blob download (a containerd ingest dir, or a Docker GetImageBlob temp file). */
export interface IngestStatus {
  /** Stable identity across polls: the ingest dir name, or the Docker temp file name. */
  key: string;
  /** containerd ref, e.g. "k8s.io/1/layer-sha256:ab12…"; the file name for Docker. */
  ref: string;
  namespace?: string;
  blobKind: BlobKind;
  /** "sha256:…" when the ref names it. */
  digest?: string;
  /** Bytes received so far (size of `data`). */
  offset: number;
  /** Expected size when known. */
  total?: number;
  startedAt?: number;
  /** Last time bytes were written: max(updatedat, mtime of data). */
  lastWriteAt?: number;
  /** Attribution the source could resolve (manifest blob that lists this layer, its distribution-source label). */
  registry?: string;
  repository?: string;
  manifestDigest?: string;
  /**
   * The source is still looking up where this blob comes from (containerd labels over the socket):
   * the detector waits a little for it rather than guessing the pull.
   */
  attributionPending?: boolean;
}

/** An ingest that was present in the previous poll and is gone now. */
export interface ClosedIngest {
  key: string;
  digest?: string;
  /**
   * The blob now exists in the content store (committed); false means aborted/removed; null means
   * the source cannot tell (Docker deletes its temp file after success and failure alike): the
   * blob is done, and a failure is known from other evidence (logs).
   */
  committed: boolean | null;
}

/** A pull-related line recognised in kubelet / containerd / CRI-O / Docker logs. */
export type PullLogEvent =
  | { type: 'pull-started'; component: LogComponent; image: string; pod?: string }
  | {
      type: 'pull-succeeded'; component: LogComponent; image: string; pod?: string;
      imageId?: string; repoDigest?: string; durationMs?: number; waitingMs?: number; sizeBytes?: number;
    }
  | { type: 'pull-failed'; component: LogComponent; image: string; pod?: string; error?: string }
  | { type: 'pull-backoff'; component: LogComponent; image: string; pod?: string; error?: string }
  | {
      /** The runtime (or dockershim) cancelled the pull because no progress was made. */
      type: 'pull-cancelled'; component: LogComponent; image: string;
      deadlineMs?: number; lastProgress?: string;
    }
  | { type: 'pull-stopped'; component: LogComponent; image: string; activeRequests?: number; bytesRead?: number };

/** A container on this node whose image is not there yet. */
export interface PodImageWait {
  namespace: string;
  name: string;
  uid?: string;
  container: string;
  image: string;
  /** Waiting reason: ContainerCreating, ErrImagePull, ImagePullBackOff, … */
  reason: string;
  message?: string;
}

export interface RuntimeInfo {
  name: RuntimeName;
  version?: string;
  /** The runtime's own pull progress deadline in ms; null = none (containerd 1.6, disabled). */
  pullDeadlineMs?: number | null;
}

export type Observation =
  | {
      kind: 'ingests'; at: number; runtime: RuntimeName; source: string;
      /** Every ingest present now (full set for this source). */
      present: IngestStatus[];
      closed: ClosedIngest[];
    }
  | { kind: 'log'; at: number; source: string; event: PullLogEvent }
  | { kind: 'pods'; at: number; pods: PodImageWait[] }
  | { kind: 'runtime'; at: number; info: RuntimeInfo };
