/**
 * Minimal containerd gRPC client (content Info / ListStatuses, version Version, images List) over
 * the unix socket, with @grpc/grpc-js and the .proto subsets in agent/proto/containerd/.
 *
 * - Connects lazily on the first call; grpc-js reconnects by itself (bounded backoff), so a socket
 *   that appears later is picked up.
 * - Every call has a short deadline and never waits for the channel to become ready: an
 *   unreachable containerd fails fast with UNAVAILABLE / DEADLINE_EXCEEDED.
 * - Namespaced calls carry the `containerd-namespace` metadata header, as containerd's Go client does.
 * - Responses are validated (zod) before they are returned.
 */
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { z } from 'zod';

export const CONTAINERD_NAMESPACE_HEADER = 'containerd-namespace';

export interface ContentInfo { digest: string; size: number; createdAt?: number; updatedAt?: number; labels: Record<string, string> }
export interface ContentStatus { ref: string; offset: number; total: number; expected: string; startedAt?: number; updatedAt?: number }
export interface ContainerdImage { name: string; labels: Record<string, string>; target?: { mediaType: string; digest: string; size: number }; createdAt?: number; updatedAt?: number }
export interface ContainerdVersion { version: string; revision: string }

export interface ContainerdClientOptions {
  /** Path of containerd's gRPC socket, e.g. /run/containerd/containerd.sock. */
  socket: string;
  /** Deadline of each call (default 2000 ms). */
  deadlineMs?: number;
}

export { isNotFound, isUnavailable } from './grpc-status.js';

const PROTO_FILES = [
  'containerd/services/content/v1/content.proto',
  'containerd/services/version/v1/version.proto',
  'containerd/services/images/v1/images.proto',
];

/** agent/proto, from the TypeScript source (agent/sources/containerd) or the build (dist/agent/sources/containerd). */
export function protoDir(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const candidates = [resolve(here, '../../proto'), resolve(here, '../../../../agent/proto')];
  for (const c of candidates) {
    if (existsSync(join(c, PROTO_FILES[0] as string))) return c;
  }
  throw new Error(`containerd .proto files not found (looked in ${candidates.join(', ')})`);
}

let cachedDefinition: protoLoader.PackageDefinition | undefined;
function packageDefinition(): protoLoader.PackageDefinition {
  cachedDefinition ??= protoLoader.loadSync(PROTO_FILES, {
    includeDirs: [protoDir()],
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  return cachedDefinition;
}

function method(service: string, name: string): protoLoader.MethodDefinition<object, object> {
  const svc = packageDefinition()[service] as protoLoader.ServiceDefinition | undefined;
  const m = svc?.[name] as protoLoader.MethodDefinition<object, object> | undefined;
  if (!m) throw new Error(`proto method ${service}/${name} missing`);
  return m;
}

const int64 = z.union([z.string(), z.number()]).transform((v, ctx) => {
  const n = Number(v);
  if (!Number.isSafeInteger(n)) {
    ctx.addIssue({ code: 'custom', message: `int64 ${String(v)} is not a safe integer` });
    return z.NEVER;
  }
  return n;
});
const timestamp = z.object({ seconds: int64, nanos: z.number().int() }).nullish()
  .transform((t) => (t && (t.seconds !== 0 || t.nanos !== 0) && t.seconds > 0 ? t.seconds * 1000 + t.nanos / 1e6 : undefined));
const labels = z.record(z.string(), z.string()).nullish().transform((l) => l ?? {});

const InfoResponse = z.object({
  info: z.object({ digest: z.string(), size: int64, createdAt: timestamp, updatedAt: timestamp, labels }),
});
const ListStatusesResponse = z.object({
  statuses: z.array(z.object({
    ref: z.string(), offset: int64, total: int64, expected: z.string(), startedAt: timestamp, updatedAt: timestamp,
  })),
});
const VersionResponse = z.object({ version: z.string(), revision: z.string() });
const ListImagesResponse = z.object({
  images: z.array(z.object({
    name: z.string(),
    labels,
    target: z.object({ mediaType: z.string(), digest: z.string(), size: int64 }).nullish(),
    createdAt: timestamp,
    updatedAt: timestamp,
  })),
});

function strip<T extends object>(o: T): T {
  for (const k of Object.keys(o) as Array<keyof T>) if (o[k] === undefined) delete o[k];
  return o;
}

export class ContainerdClient {
  private client: grpc.Client | undefined;
  private readonly deadlineMs: number;

  constructor(private readonly opts: ContainerdClientOptions) {
    this.deadlineMs = opts.deadlineMs ?? 2000;
  }

  get socket(): string { return this.opts.socket; }

  private channel(): grpc.Client {
    this.client ??= new grpc.Client(`unix:${this.opts.socket}`, grpc.credentials.createInsecure(), {
      'grpc.max_reconnect_backoff_ms': 5000,
      'grpc.initial_reconnect_backoff_ms': 200,
      'grpc.max_receive_message_length': 16 * 1024 * 1024,
    });
    return this.client;
  }

  private unary(service: string, name: string, request: object, namespace?: string): Promise<unknown> {
    const m = method(service, name);
    const md = new grpc.Metadata();
    if (namespace !== undefined) md.set(CONTAINERD_NAMESPACE_HEADER, namespace);
    return new Promise((resolvePromise, reject) => {
      this.channel().makeUnaryRequest(
        m.path, m.requestSerialize, m.responseDeserialize, request, md,
        { deadline: Date.now() + this.deadlineMs },
        (err, value) => (err ? reject(err) : resolvePromise(value)),
      );
    });
  }

  async version(): Promise<ContainerdVersion> {
    const res = await this.unary('containerd.services.version.v1.Version', 'Version', {});
    return VersionResponse.parse(res);
  }

  async contentInfo(namespace: string, digest: string): Promise<ContentInfo> {
    const res = InfoResponse.parse(await this.unary('containerd.services.content.v1.Content', 'Info', { digest }, namespace));
    return strip({ ...res.info });
  }

  async listStatuses(namespace: string, filters: string[] = []): Promise<ContentStatus[]> {
    const res = ListStatusesResponse.parse(
      await this.unary('containerd.services.content.v1.Content', 'ListStatuses', { filters }, namespace),
    );
    return res.statuses.map((s) => strip({ ...s }));
  }

  async listImages(namespace: string, filters: string[] = []): Promise<ContainerdImage[]> {
    const res = ListImagesResponse.parse(
      await this.unary('containerd.services.images.v1.Images', 'List', { filters }, namespace),
    );
    return res.images.map((i) => strip({
      name: i.name, labels: i.labels, createdAt: i.createdAt, updatedAt: i.updatedAt,
      target: i.target ? { ...i.target } : undefined,
    }));
  }

  close(): void {
    this.client?.close();
    this.client = undefined;
  }
}
