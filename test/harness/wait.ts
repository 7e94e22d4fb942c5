import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export interface WaitOptions {
  /** Give up after this long (default 30 s). */
  timeoutMs?: number;
  /** Poll interval (default 100 ms). */
  intervalMs?: number;
  /** What is awaited, for the error message ("ingest dir for layer sha256:…"). */
  what?: string;
}

/**
 * Polls `cond` until it returns a truthy value and returns that value. Exceptions thrown by `cond`
 * count as "not yet" (the last one is quoted in the timeout error), so conditions may read files
 * that do not exist yet.
 */
export async function waitFor<T>(
  cond: () => T | Promise<T>,
  opts: WaitOptions = {},
): Promise<NonNullable<T>> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const intervalMs = opts.intervalMs ?? 100;
  const started = Date.now();
  let lastError: unknown;
  let lastValue: unknown;
  for (;;) {
    try {
      const v = await cond();
      lastValue = v;
      if (v) return v as NonNullable<T>;
    } catch (err) {
      lastError = err;
    }
    const elapsed = Date.now() - started;
    if (elapsed >= timeoutMs) {
      const detail = lastError !== undefined
        ? `; last error: ${lastError instanceof Error ? lastError.message : String(lastError)}`
        : `; last value: ${JSON.stringify(lastValue) ?? String(lastValue)}`;
      throw new Error(`timed out after ${elapsed} ms waiting for ${opts.what ?? 'condition'}${detail}`);
    }
    await sleep(Math.min(intervalMs, Math.max(1, timeoutMs - elapsed)));
  }
}

/** A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0 where you can instead). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      if (addr === null || typeof addr === 'string') {
        srv.close();
        reject(new Error('freePort: no TCP address'));
        return;
      }
      const port = addr.port;
      srv.close(() => resolve(port));
    });
  });
}
