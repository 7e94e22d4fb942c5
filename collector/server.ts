/**
 * The collector's HTTP surface (fastify). Ingest: POST /v1/events, POST /v1/heartbeat (bearer
 * token, zod validation, body limit, per-node rate limit). Read API for the dashboard and scripts:
 * GET /v1/incidents, /v1/nodes, /v1/pulls, /v1/stats/stalls; /healthz, /readyz, /metrics.
 * Every rejection is JSON { error, reason } with a 4xx status and is counted by reason.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { Logger } from '../common/log.js';
import {
  EventBatchSchema, HeartbeatSchema, WIRE_VERSION, describeZodError, type ErrorResponse,
  type HeartbeatResponse, type IngestResponse,
} from '../common/wire.js';
import type { CollectorMetrics, RejectReason } from './metrics.js';
import { RateLimiter } from './ratelimit.js';
import type { Store } from './store/store.js';
import { dashboardPlugin } from './dashboard/plugin.js';

export interface ServerOptions {
  store: Store;
  metrics: CollectorMetrics;
  logger: Logger;
  /** Accepted bearer tokens; empty = ingest is open (logged as a warning at start). */
  tokens: string[];
  bodyLimitBytes: number;
  rateLimit: { perSecond: number; burst: number };
  missedHeartbeats: number;
  heartbeatIntervalSeconds: number;
  /** Called after events were stored (schedules incident processing). */
  onEvents: () => void;
  /** Register the dashboard at / (default true). */
  dashboard?: boolean;
}

const STATUS_OF: Record<RejectReason, number> = {
  unauthenticated: 401, invalid_json: 400, invalid_body: 400, too_large: 413, unsupported_media_type: 415,
  rate_limited: 429, store_unavailable: 503,
};

class Rejection extends Error {
  constructor(readonly reason: RejectReason, message: string, readonly retryAfterSeconds?: number) { super(message); }
}

const IncidentsQuery = z.object({
  state: z.enum(['open', 'resolved']).optional(),
  limit: z.coerce.number().int().min(1).max(1000).optional(),
});
const StallsQuery = z.object({ hours: z.coerce.number().int().min(1).max(24 * 90).default(24) });
const PullsQuery = z.object({ limit: z.coerce.number().int().min(1).max(5000).default(500) });

export async function buildServer(o: ServerOptions): Promise<FastifyInstance> {
  const app: FastifyInstance = Fastify({
    // pino's Logger is a FastifyBaseLogger; the cast only widens fastify's generic parameter
    loggerInstance: o.logger as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: o.bodyLimitBytes,
    // ids in logs, not the client's
    genReqId: (() => { let n = 0; return () => `req-${(++n).toString(36)}`; })(),
  });
  const digests = o.tokens.map((t) => createHash('sha256').update(t).digest());
  const limiter = new RateLimiter(o.rateLimit.perSecond, o.rateLimit.burst);

  const reject = (reply: FastifyReply, reason: RejectReason, message: string, retryAfter?: number) => {
    o.metrics.rejected.inc({ reason });
    if (retryAfter) void reply.header('retry-after', String(retryAfter));
    const body: ErrorResponse = { error: reason, reason: message };
    return reply.code(STATUS_OF[reason]).send(body);
  };

  const authenticate = async (req: FastifyRequest) => {
    if (!digests.length) return;
    const h = req.headers.authorization;
    const m = typeof h === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
    if (!m?.[1]) throw new Rejection('unauthenticated', 'missing bearer token (Authorization: Bearer <token>)');
    const got = createHash('sha256').update(m[1]).digest();
    let ok = false;
    for (const d of digests) ok = timingSafeEqual(d, got) || ok; // compare against all: constant work
    if (!ok) throw new Rejection('unauthenticated', 'invalid bearer token');
  };

  app.setErrorHandler((err: Error & { code?: string; statusCode?: number }, req, reply) => {
    if (err instanceof Rejection) return reject(reply, err.reason, err.message, err.retryAfterSeconds);
    switch (err.code) {
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return reject(reply, 'too_large', `request body larger than ${o.bodyLimitBytes} bytes`);
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return reject(reply, 'unsupported_media_type', `content-type must be application/json (got ${String(req.headers['content-type'] ?? 'none').slice(0, 100)})`);
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
        return reject(reply, 'invalid_json', 'empty body: expected a JSON object');
      case 'FST_ERR_CTP_INVALID_JSON_BODY':
        return reject(reply, 'invalid_json', 'body is not valid JSON');
      default:
        break;
    }
    if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
      return reject(reply, 'invalid_json', err.message.slice(0, 300));
    }
    req.log.error({ err: err.message, route: req.routeOptions.url }, 'request failed');
    if (req.method === 'POST') return reject(reply, 'store_unavailable', 'the collector could not store this request; retry later');
    return reply.code(500).send({ error: 'internal', reason: 'internal error' } satisfies ErrorResponse);
  });
  app.setNotFoundHandler((req, reply) => reply.code(404).send({ error: 'not_found', reason: `no route ${req.method} ${req.url.split('?')[0]}` } satisfies ErrorResponse));

  app.post('/v1/events', { onRequest: authenticate }, async (req, reply) => {
    const parsed = EventBatchSchema.safeParse(req.body);
    if (!parsed.success) return reject(reply, 'invalid_body', describeZodError(parsed.error));
    const b = parsed.data;
    const wait = limiter.take(b.node);
    if (wait) return reject(reply, 'rate_limited', `node ${b.node} is over ${o.rateLimit.perSecond} requests/s`, wait);
    const r = await o.store.insertEvents(b.node, b.agentVersion, b.events, Date.now());
    o.metrics.eventsIngested.inc(r.accepted);
    o.metrics.eventsDuplicate.inc(r.duplicates);
    if (r.accepted) o.onEvents();
    const body: IngestResponse = { wireVersion: WIRE_VERSION, accepted: r.accepted, duplicates: r.duplicates };
    return body;
  });

  app.post('/v1/heartbeat', { onRequest: authenticate }, async (req, reply) => {
    const parsed = HeartbeatSchema.safeParse(req.body);
    if (!parsed.success) return reject(reply, 'invalid_body', describeZodError(parsed.error));
    const wait = limiter.take(parsed.data.node);
    if (wait) return reject(reply, 'rate_limited', `node ${parsed.data.node} is over ${o.rateLimit.perSecond} requests/s`, wait);
    await o.store.recordHeartbeat(parsed.data, Date.now());
    o.metrics.heartbeats.inc();
    const body: HeartbeatResponse = { wireVersion: WIRE_VERSION, ok: true, intervalSeconds: o.heartbeatIntervalSeconds };
    return body;
  });

  const badQuery = (reply: FastifyReply, e: z.ZodError) => reply.code(400).send({ error: 'invalid_query', reason: describeZodError(e) } satisfies ErrorResponse);

  app.get('/v1/incidents', async (req, reply) => {
    const q = IncidentsQuery.safeParse(req.query);
    if (!q.success) return badQuery(reply, q.error);
    return { incidents: await o.store.listIncidents(q.data) };
  });
  app.get('/v1/nodes', async () => ({ nodes: await o.store.listNodes(Date.now(), o.missedHeartbeats) }));
  app.get('/v1/pulls', async (req, reply) => {
    const q = PullsQuery.safeParse(req.query);
    if (!q.success) return badQuery(reply, q.error);
    const pulls = await o.store.listPulls(q.data.limit);
    return { pulls: pulls.map((p) => ({ node: p.node, updatedAt: new Date(p.updatedMs).toISOString(), pull: p.pull })) };
  });
  app.get('/v1/stats/stalls', async (req, reply) => {
    const q = StallsQuery.safeParse(req.query);
    if (!q.success) return badQuery(reply, q.error);
    const since = Math.floor(Date.now() / 3_600_000) * 3_600_000 - (q.data.hours - 1) * 3_600_000;
    return { hours: q.data.hours, since: new Date(since).toISOString(), buckets: await o.store.stallStats(since) };
  });
  app.get('/healthz', async () => ({ ok: true }));
  app.get('/readyz', async (_req, reply) => {
    try {
      await o.store.ping();
      return { ok: true, store: o.store.kind };
    } catch {
      return reply.code(503).send({ error: 'not_ready', reason: `${o.store.kind} store unreachable` } satisfies ErrorResponse);
    }
  });
  app.get('/metrics', async (_req, reply) => {
    const text = await o.metrics.registry.metrics();
    return reply.header('content-type', o.metrics.registry.contentType).send(text);
  });

  if (o.dashboard !== false) await app.register(dashboardPlugin);
  return app;
}
