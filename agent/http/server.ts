import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';
import type { Logger } from '../../common/log.js';
import type { PullTracker } from '../detector/pull-tracker.js';

export interface AgentHttpOptions {
  listen: string;
  tracker: PullTracker;
  metrics: Registry;
  nodeName: string;
  logger: Logger;
  /** The node's current tune plan (issue: tune), when available. */
  tunePlan?: () => Promise<unknown>;
  healthy?: () => boolean;
}

export function parseListen(listen: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d+)$/.exec(listen.trim());
  if (!m) throw new Error(`invalid --listen "${listen}" (expected host:port, e.g. 0.0.0.0:9090)`);
  const port = Number(m[3]);
  if (port > 65535) throw new Error(`invalid --listen port ${port}`);
  return { host: m[1] ?? (m[2] || '0.0.0.0'), port };
}

/** /healthz, /metrics, /v1/pulls (?all=1 adds finished pulls), /v1/tune. */
export async function startAgentHttp(o: AgentHttpOptions): Promise<{ app: FastifyInstance; url: string }> {
  const app: FastifyInstance = Fastify({
    // pino 10 and fastify's bundled pino types differ only nominally; the instance is a pino logger.
    // request lines are info-level: this child logs warnings and errors only.
    loggerInstance: o.logger.child({ component: 'http' }, { level: 'warn' }) as unknown as FastifyBaseLogger,
  });
  app.get('/healthz', async (_req, reply) => {
    const ok = o.healthy ? o.healthy() : true;
    return reply.code(ok ? 200 : 503).send({ ok });
  });
  app.get('/metrics', async (_req, reply) => {
    reply.header('content-type', o.metrics.contentType);
    return o.metrics.metrics();
  });
  app.get('/v1/pulls', async (req) => {
    const q = req.query as Record<string, unknown>;
    const all = q.all === '1' || q.all === 'true';
    return {
      node: o.nodeName,
      at: new Date().toISOString(),
      runtime: o.tracker.runtime() ?? null,
      pulls: o.tracker.records(all),
      dormantIngests: o.tracker.dormantIngests(),
    };
  });
  app.get('/v1/tune', async (_req, reply) => {
    if (!o.tunePlan) return reply.code(404).send({ error: 'tune plan not available in this agent' });
    return o.tunePlan();
  });
  const { host, port } = parseListen(o.listen);
  await app.listen({ host, port });
  const addr = app.server.address();
  const actualPort = typeof addr === 'object' && addr ? addr.port : port;
  const shownHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
  return { app, url: `http://${shownHost}:${actualPort}` };
}
