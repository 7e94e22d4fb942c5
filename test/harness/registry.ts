/**
 * A real Distribution registry (Debian `docker-registry`) on 127.0.0.1 with a free port and its
 * own temp storage.
 */
import { openSync, closeSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnDaemon, stopChild, trackDir, untrackDir } from './processes.js';
import { freePort, waitFor } from './wait.js';

export const REGISTRY_BIN = process.env.PULLWATCH_REGISTRY_BIN ?? '/usr/bin/docker-registry';

export interface RunningRegistry {
  /** http://127.0.0.1:PORT */
  readonly url: string;
  /** 127.0.0.1:PORT (as it appears in image references). */
  readonly host: string;
  readonly port: number;
  readonly storageDir: string;
  readonly logFile: string;
  readonly pid: number;
  stop(): Promise<void>;
}

export interface RegistryOptions {
  /** Keep the temp dir after stop() (debugging). */
  keep?: boolean;
}

export async function startRegistry(opts: RegistryOptions = {}): Promise<RunningRegistry> {
  const dir = await mkdtemp(join(tmpdir(), 'pw-registry-'));
  if (!opts.keep) trackDir(dir);
  const storageDir = join(dir, 'storage');
  const logFile = join(dir, 'registry.log');
  const configPath = join(dir, 'config.yml');

  // A port picked just before binding can be taken by someone else; retry a few times.
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    await writeFile(configPath, [
      'version: 0.1',
      'log:',
      '  level: warn',
      '  accesslog:',
      '    disabled: true',
      'storage:',
      '  filesystem:',
      `    rootdirectory: ${storageDir}`,
      '  delete:',
      '    enabled: true',
      'http:',
      `  addr: 127.0.0.1:${port}`,
      '',
    ].join('\n'));
    const fd = openSync(logFile, 'a');
    const child = spawnDaemon(REGISTRY_BIN, ['serve', configPath], {
      what: 'docker-registry',
      stdio: ['ignore', fd, fd],
    });
    closeSync(fd);
    const url = `http://127.0.0.1:${port}`;
    let exited = false;
    child.once('exit', () => { exited = true; });
    try {
      await waitFor(async () => {
        if (exited) throw new Error('docker-registry exited');
        const res = await fetch(`${url}/v2/`);
        return res.status === 200;
      }, { timeoutMs: 15_000, intervalMs: 50, what: `docker-registry on ${url}` });
    } catch (err) {
      await stopChild(child, 2_000);
      if (attempt < 3) continue;
      { await rm(dir, { recursive: true, force: true }); untrackDir(dir); }
      throw err;
    }
    const pid = child.pid as number;
    return {
      url,
      host: `127.0.0.1:${port}`,
      port,
      storageDir,
      logFile,
      pid,
      async stop() {
        await stopChild(child, 5_000);
        if (!opts.keep) { await rm(dir, { recursive: true, force: true }); untrackDir(dir); }
      },
    };
  }
}
