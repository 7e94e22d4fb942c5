import { afterAll, describe, expect, it } from 'vitest';
import Fastify from 'fastify';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { dashboardPlugin, dashboardStaticDir, findPackageRoot } from '../../../collector/dashboard/plugin.js';

const app = Fastify();
afterAll(async () => { await app.close(); });

describe('dashboard plugin', () => {
  it('finds the static dir from the package root, from source and from a dist/ location', () => {
    const root = resolve(__dirname, '../../..');
    expect(findPackageRoot()).toBe(root);
    expect(findPackageRoot(join(root, 'dist', 'collector', 'dashboard'))).toBe(root);
    expect(existsSync(join(dashboardStaticDir(), 'index.html'))).toBe(true);
    expect(() => findPackageRoot('/')).toThrow(/cannot find the pullwatch package root/);
  });

  it('serves / and /assets with types, a strict CSP and ETag revalidation; nothing else', async () => {
    await app.register(dashboardPlugin);
    const index = await app.inject({ method: 'GET', url: '/' });
    expect(index.statusCode).toBe(200);
    expect(index.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(index.headers['content-security-policy']).toContain("script-src 'self'");
    expect(index.headers['x-content-type-options']).toBe('nosniff');
    expect(index.body).toContain('<script type="module" src="/assets/app.js">');

    const js = await app.inject({ method: 'GET', url: '/assets/app.js' });
    expect(js.statusCode).toBe(200);
    expect(js.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(js.body).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write/);
    const css = await app.inject({ method: 'GET', url: '/assets/app.css' });
    expect(css.headers['content-type']).toBe('text/css; charset=utf-8');

    const again = await app.inject({ method: 'GET', url: '/assets/app.js', headers: { 'if-none-match': String(js.headers.etag) } });
    expect(again.statusCode).toBe(304);

    for (const url of ['/assets/../package.json', '/assets/..%2Fpackage.json', '/assets/nope.js', '/assets/%2e%2e%2fplugin.ts']) {
      const r = await app.inject({ method: 'GET', url });
      expect(r.statusCode, url).toBe(404);
    }
  });
});
