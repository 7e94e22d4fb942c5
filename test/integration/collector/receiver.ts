/** A real HTTP receiver on 127.0.0.1 standing in for Slack / a webhook / Alertmanager. */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';

export interface Received { method: string; url: string; headers: IncomingHttpHeaders; body: string; json: unknown }

export class Receiver {
  readonly requests: Received[] = [];
  /** Status to answer with (function of the request index). */
  status: (i: number) => number = () => 200;
  private server: Server | null = null;
  port = 0;

  async start(port = this.port): Promise<this> {
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        let json: unknown;
        try { json = JSON.parse(body); } catch { json = undefined; }
        const i = this.requests.length;
        const code = this.status(i);
        if (code < 400) this.requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body, json });
        res.writeHead(code, { 'content-type': 'text/plain' }).end(code < 400 ? 'ok' : 'no');
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
    const a = server.address();
    this.port = typeof a === 'object' && a ? a.port : port;
    this.server = server;
    return this;
  }

  url(path = '/'): string { return `http://127.0.0.1:${this.port}${path}`; }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = null;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }
}
