/**
 * An HTTP proxy in front of a registry that can stall or slow individual blob downloads, the way a
 * broken mirror, a saturated link or a stuck CDN edge does.
 *
 * Rules are per blob digest (or for all layers of an image):
 *   hold(d, afterBytes)        forward the blob up to byte offset `afterBytes`, then send nothing
 *                              (connection stays open, headers already sent)
 *   trickle(d, bytesPerSecond) forward at that rate (after `afterBytes` at full speed)
 *   release(d)                 full speed again; held and trickling responses continue at once
 * Offsets are absolute positions in the blob, so a client resuming with `Range: bytes=K-` is held at
 * the same place. Per digest the proxy records the bytes delivered and when the last one went out
 * (the benchmark measures detection latency from it).
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export type BlobRule =
  | { mode: 'hold'; afterBytes: number }
  | { mode: 'trickle'; bytesPerSecond: number; afterBytes: number };

export interface BlobStats {
  /** Body bytes sent to clients for this blob, over all requests. */
  bytesDelivered: number;
  /** Highest blob offset delivered so far (differs from bytesDelivered after retries/Range). */
  highestOffset: number;
  /** Date.now() when the last body byte was written, or undefined if none yet. */
  lastByteAt?: number;
  /** GET requests seen for the blob. */
  requests: number;
  /** Responses currently open. */
  active: number;
  /** Responses currently parked by a hold rule. */
  holding: number;
  /** Range headers of the requests, in order ('' when none). */
  ranges: string[];
}

/** A digest, several digests, or an image (all its layer blobs). */
export type BlobTarget = string | readonly string[] | { readonly layers: readonly { readonly digest: string }[] };

export interface StallProxy {
  /** http://127.0.0.1:PORT */
  readonly url: string;
  /** 127.0.0.1:PORT: use as the registry host in image references. */
  readonly host: string;
  readonly port: number;
  hold(target: BlobTarget, afterBytes: number): void;
  trickle(target: BlobTarget, bytesPerSecond: number, afterBytes?: number): void;
  /** Removes the rule; held/trickling responses continue at full speed. */
  release(target: BlobTarget): void;
  releaseAll(): void;
  stats(digest: string): BlobStats;
  /** Resolves when a response for `digest` is parked by a hold rule. */
  waitHeld(digest: string, timeoutMs?: number): Promise<BlobStats>;
  /** Every request path seen (for debugging). */
  readonly log: readonly string[];
  /** Stops listening and destroys every open connection (held ones included). */
  close(): Promise<void>;
}

function digestsOf(target: BlobTarget): string[] {
  if (typeof target === 'string') return [target];
  if (Array.isArray(target)) return [...(target as readonly string[])];
  return (target as { layers: readonly { digest: string }[] }).layers.map((l) => l.digest);
}

const BLOB_PATH = /^\/v2\/(.+)\/blobs\/(sha256:[0-9a-f]{64})(?:\?.*)?$/;

/** Parses `bytes=N-` / `bytes=N-M`; returns the start offset (0 when absent or unparsable). */
function rangeStart(range: string | undefined): number {
  const m = range ? /^bytes=(\d+)-/.exec(range) : null;
  return m?.[1] ? Number(m[1]) : 0;
}

export async function startStallProxy(opts: { upstream: string | { url: string } }): Promise<StallProxy> {
  const upstream = new URL(typeof opts.upstream === 'string' ? opts.upstream : opts.upstream.url);
  const rules = new Map<string, BlobRule>();
  const stats = new Map<string, BlobStats>();
  const wakers = new Map<string, Set<() => void>>();
  const sockets = new Set<Socket>();
  const log: string[] = [];
  let closed = false;

  const statOf = (digest: string): BlobStats => {
    let s = stats.get(digest);
    if (!s) {
      s = { bytesDelivered: 0, highestOffset: 0, requests: 0, active: 0, holding: 0, ranges: [] };
      stats.set(digest, s);
    }
    return s;
  };
  const wake = (digest: string): void => {
    const set = wakers.get(digest);
    if (!set) return;
    wakers.delete(digest);
    for (const fn of set) fn();
  };
  const parked = (digest: string): Promise<void> => new Promise((resolve) => {
    let set = wakers.get(digest);
    if (!set) { set = new Set(); wakers.set(digest, set); }
    set.add(resolve);
  });
  const writeAsync = (res: ServerResponse, chunk: Buffer): Promise<void> => new Promise((resolve, reject) => {
    if (res.destroyed) { reject(new Error('client gone')); return; }
    const ok = res.write(chunk);
    if (ok) { resolve(); return; }
    const onDrain = (): void => { res.off('close', onClose); resolve(); };
    const onClose = (): void => { res.off('drain', onDrain); reject(new Error('client gone')); };
    res.once('drain', onDrain);
    res.once('close', onClose);
  });

  /** Sends `chunk` (starting at blob offset `offset`) obeying the digest's rule. */
  async function deliver(digest: string, res: ServerResponse, chunk: Buffer, offset: number): Promise<void> {
    const s = statOf(digest);
    let sent = 0;
    while (sent < chunk.length) {
      if (closed || res.destroyed) throw new Error('client gone');
      const pos = offset + sent;
      const rule = rules.get(digest);
      let n = chunk.length - sent;
      let paced = false;
      if (rule && pos >= rule.afterBytes) {
        if (rule.mode === 'hold') {
          s.holding++;
          try {
            await Promise.race([parked(digest), new Promise<void>((r) => res.once('close', () => r()))]);
          } finally {
            s.holding--;
          }
          continue;
        }
        // trickle: send 1/10 s worth of bytes, then wait 100 ms.
        n = Math.min(n, Math.max(1, Math.floor(rule.bytesPerSecond / 10)));
        paced = true;
      } else if (rule) {
        n = Math.min(n, rule.afterBytes - pos);
      }
      await writeAsync(res, chunk.subarray(sent, sent + n));
      sent += n;
      s.bytesDelivered += n;
      s.highestOffset = Math.max(s.highestOffset, offset + sent);
      s.lastByteAt = Date.now();
      // A trickled slice is followed by a pause (cut short by release()).
      if (paced) await Promise.race([sleep(100), parked(digest)]);
    }
  }

  async function handleBlob(digest: string, req: IncomingMessage, res: ServerResponse, up: IncomingMessage): Promise<void> {
    const s = statOf(digest);
    s.active++;
    try {
      let offset = up.statusCode === 206 ? rangeStart(req.headers.range) : 0;
      for await (const chunk of up as AsyncIterable<Buffer>) {
        await deliver(digest, res, chunk, offset);
        offset += chunk.length;
      }
      res.end();
    } catch {
      up.destroy();
      res.destroy();
    } finally {
      s.active--;
    }
  }

  const server: Server = createServer((req, res) => {
    const path = req.url ?? '/';
    log.push(`${req.method ?? '?'} ${path}${req.headers.range ? ` (${req.headers.range})` : ''}`);
    const m = BLOB_PATH.exec(path);
    const digest = m?.[2];
    if (digest && req.method === 'GET') {
      const s = statOf(digest);
      s.requests++;
      s.ranges.push(req.headers.range ?? '');
    }
    const upReq = httpRequest({
      host: upstream.hostname,
      port: upstream.port,
      method: req.method,
      path,
      headers: { ...req.headers },
    }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      if (digest && req.method === 'GET' && (up.statusCode === 200 || up.statusCode === 206)) {
        void handleBlob(digest, req, res, up);
      } else {
        up.pipe(res);
      }
    });
    upReq.on('error', (err) => {
      if (!res.headersSent) {
        res.writeHead(502, { 'content-type': 'text/plain' });
        res.end(`stall-proxy: upstream error: ${err.message}`);
      } else {
        res.destroy();
      }
    });
    req.pipe(upReq);
  });
  server.on('connection', (sock: Socket) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
  });
  server.on('clientError', (_err, sock: Socket) => {
    // e.g. a TLS ClientHello from a client probing https first (dockerd does): answer 400.
    if (sock.writable) sock.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    else sock.destroy();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const addr = server.address();
  if (addr === null || typeof addr === 'string') throw new Error('stall-proxy: no TCP address');
  const port = addr.port;

  return {
    url: `http://127.0.0.1:${port}`,
    host: `127.0.0.1:${port}`,
    port,
    log,
    hold(target, afterBytes) {
      if (!Number.isFinite(afterBytes) || afterBytes < 0) throw new Error(`hold: afterBytes must be >= 0, got ${afterBytes}`);
      for (const d of digestsOf(target)) rules.set(d, { mode: 'hold', afterBytes });
    },
    trickle(target, bytesPerSecond, afterBytes = 0) {
      if (!(bytesPerSecond > 0)) throw new Error(`trickle: bytesPerSecond must be > 0, got ${bytesPerSecond}`);
      for (const d of digestsOf(target)) {
        rules.set(d, { mode: 'trickle', bytesPerSecond, afterBytes });
        wake(d);
      }
    },
    release(target) {
      for (const d of digestsOf(target)) {
        rules.delete(d);
        wake(d);
      }
    },
    releaseAll() {
      const all = [...rules.keys()];
      rules.clear();
      for (const d of all) wake(d);
    },
    stats(digest) {
      const s = statOf(digest);
      return { ...s, ranges: [...s.ranges] };
    },
    async waitHeld(digest, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const s = statOf(digest);
        if (s.holding > 0) return { ...s, ranges: [...s.ranges] };
        if (Date.now() > deadline) {
          throw new Error(`stall-proxy: no response for ${digest} got held within ${timeoutMs} ms (requests=${s.requests}, delivered=${s.bytesDelivered}); seen: ${log.slice(-10).join(', ')}`);
        }
        await sleep(25);
      }
    },
    async close() {
      closed = true;
      rules.clear();
      for (const d of [...wakers.keys()]) wake(d);
      for (const sock of sockets) sock.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
