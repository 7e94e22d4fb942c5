/**
 * The dashboard: static HTML + CSS + one ES module (collector/dashboard/static/), served at `/` and
 * `/assets/*`. No build step: the files ship as they are in the source tree; the directory is found
 * from the package root (the nearest package.json named "pullwatch" upward from this module), so it
 * works from source (vitest, tsx) and from dist/ after `tsc` (which does not copy non-TS files).
 * All data comes from the collector's read API (/v1/nodes, /v1/pulls, /v1/incidents,
 * /v1/stats/stalls), polled by the page every 2 s.
 *
 * Files are read once at registration into memory (a few tens of KB) and only those names are
 * served, so there is no path traversal to get wrong.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply } from 'fastify';

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
};

const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
};

interface Asset { body: Buffer; type: string; etag: string }

/** The package root: nearest directory upward holding package.json with name "pullwatch". */
export function findPackageRoot(from: string = dirname(fileURLToPath(import.meta.url))): string {
  let dir = from;
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        if ((JSON.parse(readFileSync(pkg, 'utf8')) as { name?: unknown }).name === 'pullwatch') return dir;
      } catch { /* unreadable: keep looking */ }
    }
    const up = dirname(dir);
    if (up === dir) throw new Error(`dashboard: cannot find the pullwatch package root above ${from}`);
    dir = up;
  }
}

/** Where the dashboard's static files are (override with PULLWATCH_DASHBOARD_DIR, e.g. in a custom image). */
export function dashboardStaticDir(): string {
  const override = process.env.PULLWATCH_DASHBOARD_DIR;
  if (override) return override;
  return join(findPackageRoot(), 'collector', 'dashboard', 'static');
}

function loadAssets(dir: string): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const type = CONTENT_TYPES[extname(name)];
    if (!type || !statSync(path).isFile()) continue;
    const body = readFileSync(path);
    const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`;
    assets.set(name, { body, type, etag });
  }
  if (!assets.has('index.html')) throw new Error(`dashboard: ${dir} has no index.html`);
  return assets;
}

function send(reply: FastifyReply, asset: Asset, ifNoneMatch: string | undefined): FastifyReply {
  reply.headers(SECURITY_HEADERS);
  // Revalidate every time (ETag): a collector upgrade is picked up at the next reload.
  reply.header('cache-control', 'no-cache');
  reply.header('etag', asset.etag);
  if (ifNoneMatch === asset.etag) return reply.code(304).send();
  return reply.type(asset.type).send(asset.body);
}

/** Registers GET / and GET /assets/<file> on the collector's Fastify app. */
export async function dashboardPlugin(app: FastifyInstance): Promise<void> {
  const assets = loadAssets(dashboardStaticDir());
  const index = assets.get('index.html') as Asset;
  app.get('/', async (req, reply) => send(reply, index, req.headers['if-none-match']));
  app.get<{ Params: { file: string } }>('/assets/:file', async (req, reply) => {
    const asset = req.params.file === 'index.html' ? undefined : assets.get(req.params.file);
    if (!asset) {
      return reply.code(404).type('application/json').send({ error: 'not_found', reason: `no dashboard asset "${req.params.file}"` });
    }
    return send(reply, asset, req.headers['if-none-match']);
  });
}
