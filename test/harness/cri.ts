/**
 * A small CRI client (k8s.io/cri-api runtime.v1) over gRPC, making image pulls the way kubelet
 * does: ImageService/PullImage with no deadline (kubelet puts none on it), cancellable.
 */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

const PROTO_ROOT = fileURLToPath(new URL('./proto/', import.meta.url));
const PROTO_FILE = 'k8s.io/cri-api/runtime/v1/api.proto';

export interface CriImage {
  id: string;
  repoTags: string[];
  repoDigests: string[];
  /** uint64 as a decimal string (proto-loader longs: String). */
  size: string;
}

export interface CriVersion {
  version: string;
  runtimeName: string;
  runtimeVersion: string;
  runtimeApiVersion: string;
}

/** The pod a pull is made for (kubelet passes the sandbox config of the pod). */
export interface PullPod {
  name: string;
  namespace: string;
  uid: string;
}

export interface PullOptions {
  /** Aborting cancels the gRPC call (what kubelet does when a pod is deleted mid-pull). */
  signal?: AbortSignal;
  /** Sent as sandbox_config.metadata, as kubelet does. */
  pod?: PullPod;
  auth?: { username?: string; password?: string };
}

/** A failed CRI call: the gRPC status code (grpc.status.*) and details. */
export class CriError extends Error {
  constructor(readonly method: string, readonly code: number, readonly details: string) {
    super(`CRI ${method} failed: ${grpc.status[code] ?? code}: ${details}`);
    this.name = 'CriError';
  }
}

export interface CriClient {
  /** Resolves to the image ref (image id) containerd returns. */
  pullImage(image: string, opts?: PullOptions): Promise<string>;
  /** undefined when the image is not present. */
  imageStatus(image: string): Promise<CriImage | undefined>;
  listImages(): Promise<CriImage[]>;
  removeImage(image: string): Promise<void>;
  version(): Promise<CriVersion>;
  close(): void;
}

interface UnaryClient extends grpc.Client {
  [method: string]: unknown;
}
type ServiceCtor = new (address: string, creds: grpc.ChannelCredentials, options?: grpc.ClientOptions) => UnaryClient;

let loaded: { image: ServiceCtor; runtime: ServiceCtor } | undefined;

function load(): { image: ServiceCtor; runtime: ServiceCtor } {
  if (loaded) return loaded;
  const def = protoLoader.loadSync(PROTO_FILE, {
    includeDirs: [PROTO_ROOT],
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(def) as unknown as { runtime: { v1: { ImageService: ServiceCtor; RuntimeService: ServiceCtor } } };
  loaded = { image: pkg.runtime.v1.ImageService, runtime: pkg.runtime.v1.RuntimeService };
  return loaded;
}

function toImage(raw: unknown): CriImage | undefined {
  if (!raw || typeof raw !== 'object') return undefined;
  const r = raw as Record<string, unknown>;
  if (typeof r.id !== 'string' || r.id === '') return undefined;
  return {
    id: r.id,
    repoTags: Array.isArray(r.repoTags) ? r.repoTags.map(String) : [],
    repoDigests: Array.isArray(r.repoDigests) ? r.repoDigests.map(String) : [],
    size: String(r.size ?? '0'),
  };
}

/** `address`: a unix socket path, or unix:///path. */
export function createCriClient(address: string): CriClient {
  const target = address.startsWith('unix:') ? address : `unix://${address}`;
  const { image: ImageService, runtime: RuntimeService } = load();
  const options: grpc.ClientOptions = { 'grpc.max_receive_message_length': 16 * 1024 * 1024 };
  const images = new ImageService(target, grpc.credentials.createInsecure(), options);
  const runtime = new RuntimeService(target, grpc.credentials.createInsecure(), options);

  function unary<Res>(client: UnaryClient, method: string, req: object, opts: { signal?: AbortSignal; deadlineMs?: number } = {}): Promise<Res> {
    return new Promise<Res>((resolve, reject) => {
      if (opts.signal?.aborted) {
        reject(new CriError(method, grpc.status.CANCELLED, 'aborted before the call'));
        return;
      }
      const callOpts: grpc.CallOptions = opts.deadlineMs ? { deadline: Date.now() + opts.deadlineMs } : {};
      const fn = client[method] as (req: object, md: grpc.Metadata, o: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res: Res) => void) => grpc.ClientUnaryCall;
      const onAbort = (): void => call.cancel();
      const call = fn.call(client, req, new grpc.Metadata(), callOpts, (err, res) => {
        opts.signal?.removeEventListener('abort', onAbort);
        if (err) reject(new CriError(method, err.code, err.details));
        else resolve(res);
      });
      opts.signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  return {
    async pullImage(image, opts = {}) {
      const req: Record<string, unknown> = { image: { image } };
      if (opts.auth) req.auth = opts.auth;
      if (opts.pod) {
        req.sandboxConfig = {
          metadata: { name: opts.pod.name, namespace: opts.pod.namespace, uid: opts.pod.uid, attempt: 0 },
          hostname: opts.pod.name,
          logDirectory: `/var/log/pods/${opts.pod.namespace}_${opts.pod.name}_${opts.pod.uid}`,
        };
      }
      const res = await unary<{ imageRef: string }>(images, 'PullImage', req, { signal: opts.signal });
      return res.imageRef;
    },
    async imageStatus(image) {
      const res = await unary<{ image?: unknown }>(images, 'ImageStatus', { image: { image } }, { deadlineMs: 30_000 });
      return toImage(res.image);
    },
    async listImages() {
      const res = await unary<{ images?: unknown[] }>(images, 'ListImages', {}, { deadlineMs: 30_000 });
      return (res.images ?? []).map(toImage).filter((i): i is CriImage => i !== undefined);
    },
    async removeImage(image) {
      await unary<object>(images, 'RemoveImage', { image: { image } }, { deadlineMs: 30_000 });
    },
    async version() {
      return unary<CriVersion>(runtime, 'Version', { version: 'v1' }, { deadlineMs: 10_000 });
    },
    close() {
      images.close();
      runtime.close();
    },
  };
}
