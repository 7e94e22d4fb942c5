/** Test helpers for the collector client: pull records, a fake AgentState, a recording HTTP collector. */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AgentState } from '../../../agent/model/agent-state.js';
import type { PullRecord, Transition } from '../../../agent/model/pulls.js';
import type { RuntimeInfo } from '../../../agent/model/observations.js';
import { EventBatchSchema, HeartbeatSchema, type AgentEvent, type Heartbeat } from '../../../common/wire.js';

export function makePull(i: number, over: Partial<PullRecord> = {}): PullRecord {
  const t = new Date(Date.UTC(2026, 10, 21, 10, 0, 0) + i * 1000).toISOString();
  return {
    id: `docker.io/library/app${i}:1@${t}`,
    image: `docker.io/library/app${i}:1`,
    registry: 'docker.io',
    repository: `library/app${i}`,
    state: 'stalled',
    startedAt: t, updatedAt: t, lastProgressAt: t,
    idleSeconds: 75, rateBytesPerSecond: 0,
    bytesDone: 1000 * i, bytesTotal: 1_000_000,
    layers: [{
      digest: `sha256:${String(i).padStart(64, '0')}`, kind: 'layer', state: 'stalled',
      bytesDone: 1000 * i, bytesTotal: 1_000_000, idleSeconds: 75, rateBytesPerSecond: 0, startedAt: t,
    }],
    runtime: { name: 'containerd', version: '1.6.20' },
    runtimeDeadlineMs: null,
    pods: [{ namespace: 'default', name: `web-${i}`, container: 'app', reason: 'ContainerCreating' }],
    idleGapsMs: [61_000],
    ...over,
  };
}

export function makeTransition(i: number, over: Partial<PullRecord> = {}): Transition {
  const pull = makePull(i, over);
  return { kind: 'stalled', from: 'downloading', to: 'stalled', at: pull.updatedAt, pull };
}

export function fakeState(nodeName = 'node-a', pulls: PullRecord[] = []): AgentState & { errors: number } {
  const runtime: RuntimeInfo = { name: 'containerd', version: '1.6.20', pullDeadlineMs: null };
  return {
    nodeName, agentVersion: '0.1.0-test', errors: 0,
    pulls: () => pulls,
    runtime: () => runtime,
    sourceErrors() { return this.errors; },
  };
}

export interface Recorded {
  /** Events accepted (first time seen), in arrival order. */
  events: AgentEvent[];
  duplicates: number;
  batches: number;
  heartbeats: Heartbeat[];
  authHeaders: string[];
}

/**
 * A real HTTP server on 127.0.0.1 that behaves like the collector's ingest API (validates with the
 * wire schema, dedups by id) and can be stopped and restarted on the same port (collector down).
 */
export class RecordingCollector {
  readonly rec: Recorded = { events: [], duplicates: 0, batches: 0, heartbeats: [], authHeaders: [] };
  private seen = new Set<string>();
  private server: Server | undefined;
  port = 0;
  /** Per request hook: return a status to answer with instead of accepting. */
  intercept: ((path: string, body: unknown) => { status: number; body?: unknown; headers?: Record<string, string> } | undefined) | undefined;
  token: string | undefined;

  get url(): string { return `http://127.0.0.1:${this.port}`; }

  async start(): Promise<void> {
    const server = createServer((req, res) => { void this.onRequest(req, res); });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  private async onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const send = (status: number, body: unknown, headers: Record<string, string> = {}): void => {
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    };
    let body: unknown;
    try { body = JSON.parse(Buffer.concat(chunks).toString('utf8')); } catch { send(400, { error: 'bad_json', reason: 'body is not JSON' }); return; }
    this.rec.authHeaders.push(String(req.headers.authorization ?? ''));
    if (this.token !== undefined && req.headers.authorization !== `Bearer ${this.token}`) {
      send(401, { error: 'unauthorized', reason: 'missing or wrong bearer token' }); return;
    }
    const hook = this.intercept?.(req.url ?? '', body);
    if (hook) { send(hook.status, hook.body ?? { error: 'test', reason: `test answered ${hook.status}` }, hook.headers); return; }
    if (req.url === '/v1/events') {
      const p = EventBatchSchema.safeParse(body);
      if (!p.success) { send(400, { error: 'invalid', reason: p.error.issues[0]?.message ?? 'invalid' }); return; }
      this.rec.batches++;
      let accepted = 0;
      for (const e of p.data.events) {
        if (this.seen.has(e.id)) { this.rec.duplicates++; continue; }
        this.seen.add(e.id); this.rec.events.push(e); accepted++;
      }
      send(200, { wireVersion: 1, accepted, duplicates: p.data.events.length - accepted });
    } else if (req.url === '/v1/heartbeat') {
      const p = HeartbeatSchema.safeParse(body);
      if (!p.success) { send(400, { error: 'invalid', reason: p.error.issues[0]?.message ?? 'invalid' }); return; }
      this.rec.heartbeats.push(p.data);
      send(200, { wireVersion: 1, ok: true });
    } else {
      send(404, { error: 'not_found', reason: req.url ?? '' });
    }
  }
}

/** Polls until cond() is true or the deadline passes (then throws with the message). */
export async function waitFor(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
}
