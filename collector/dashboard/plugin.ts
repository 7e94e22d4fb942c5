import type { FastifyInstance } from 'fastify';

/** Serves the dashboard at / (static files; data comes from the collector's read API). Stub until built. */
export async function dashboardPlugin(_app: FastifyInstance): Promise<void> {
  // filled in by the dashboard work
}
