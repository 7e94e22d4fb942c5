/**
 * Real dockerd (Debian docker.io) with its own data root, exec root, pidfile, unix socket and
 * managed containerd; no iptables, no bridge, so it needs no network privileges beyond loopback.
 */
import { execFile, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { overlaySupported } from './containerd.js';
import { killPids, pidsMentioning, spawnDaemon, stopChild, trackDir, untrackDir } from './processes.js';
import { waitFor } from './wait.js';

const execFileP = promisify(execFile);

export const DOCKERD_BIN = process.env.PULLWATCH_DOCKERD_BIN ?? '/usr/sbin/dockerd';
export const DOCKER_CLI = process.env.PULLWATCH_DOCKER_CLI ?? (existsSync('/usr/bin/docker') ? '/usr/bin/docker' : '/usr/local/bin/docker');

export interface DockerdOptions {
  /** host:port of registries dockerd may reach over plain HTTP (127.0.0.0/8 is insecure by default anyway). */
  insecureRegistries?: string[];
  /** Storage driver (default overlay2 when overlay mounts work here, else vfs). */
  storageDriver?: 'overlay2' | 'vfs';
  logLevel?: 'info' | 'debug';
  keep?: boolean;
}

export interface RunningDockerd {
  readonly dir: string;
  /** unix socket path. */
  readonly socket: string;
  /** unix:///path, for `docker -H` and DOCKER_HOST. */
  readonly host: string;
  readonly dataRoot: string;
  readonly execRoot: string;
  /** `<dataRoot>/tmp`, where GetImageBlob* temp files of running downloads live. */
  readonly blobTmpDir: string;
  readonly logFile: string;
  readonly pid: number;
  readonly storageDriver: string;
  /** Runs the docker CLI against this daemon. */
  docker(args: string[], opts?: { timeoutMs?: number }): Promise<{ stdout: string; stderr: string }>;
  readLog(): Promise<string>;
  stop(): Promise<void>;
}

function mountsUnder(dir: string): string[] {
  try {
    return readFileSync('/proc/self/mountinfo', 'utf8').split('\n')
      .map((l) => l.split(' ')[4])
      .filter((p): p is string => p !== undefined && (p === dir || p.startsWith(`${dir}/`)));
  } catch {
    return [];
  }
}

export async function startDockerd(opts: DockerdOptions = {}): Promise<RunningDockerd> {
  if (!existsSync(DOCKERD_BIN)) throw new Error(`dockerd not found at ${DOCKERD_BIN} (Debian package docker.io; run scripts/ensure-test-deps.sh)`);
  const dir = await mkdtemp(join(tmpdir(), 'pw-dockerd-'));
  if (!opts.keep) trackDir(dir);
  const dataRoot = join(dir, 'data');
  const execRoot = join(dir, 'exec');
  const socket = join(dir, 'docker.sock');
  const pidfile = join(dir, 'dockerd.pid');
  const logFile = join(dir, 'dockerd.log');
  const configFile = join(dir, 'daemon.json');
  await mkdir(dataRoot, { recursive: true });
  await mkdir(execRoot, { recursive: true });
  const storageDriver = opts.storageDriver ?? ((await overlaySupported()) ? 'overlay2' : 'vfs');
  // An explicit (empty) config file keeps /etc/docker/daemon.json out.
  await writeFile(configFile, '{}\n');
  const args = [
    '--config-file', configFile,
    '--data-root', dataRoot,
    '--exec-root', execRoot,
    '--pidfile', pidfile,
    '--host', `unix://${socket}`,
    '--iptables=false',
    '--ip6tables=false',
    '--ip-forward=false',
    '--ip-masq=false',
    '--bridge=none',
    '--storage-driver', storageDriver,
    '--log-level', opts.logLevel ?? 'info',
    '--userland-proxy=false',
  ];
  for (const r of opts.insecureRegistries ?? []) args.push('--insecure-registry', r);

  const fd = openSync(logFile, 'a');
  let child: ChildProcess;
  try {
    child = spawnDaemon(DOCKERD_BIN, args, { what: 'dockerd', stdio: ['ignore', fd, fd] });
  } finally {
    closeSync(fd);
  }
  let exitInfo: string | undefined;
  child.once('exit', (code, sig) => { exitInfo = `exit code ${String(code)} signal ${String(sig)}`; });

  const cleanup = async (): Promise<void> => {
    await stopChild(child, 15_000);
    // dockerd's managed containerd and its shims mention our exec root.
    await killPids(pidsMentioning(execRoot));
    for (const m of mountsUnder(dir).reverse()) await execFileP('umount', ['-l', m]).catch(() => undefined);
    if (!opts.keep) { await rm(dir, { recursive: true, force: true }); untrackDir(dir); }
  };

  try {
    await waitFor(async () => {
      if (exitInfo) throw new Error(`dockerd exited (${exitInfo})`);
      if (!existsSync(socket)) return false;
      const { stdout } = await execFileP(DOCKER_CLI, ['-H', `unix://${socket}`, 'version', '--format', '{{.Server.Version}}'], { timeout: 5_000 });
      return stdout.trim().length > 0;
    }, { timeoutMs: 60_000, intervalMs: 200, what: `dockerd at ${socket}` });
  } catch (err) {
    const tail = existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').slice(-20).join('\n') : '';
    await cleanup();
    throw new Error(`${(err as Error).message}\n--- dockerd log (tail) ---\n${tail}`, { cause: err });
  }

  let stopped = false;
  return {
    dir,
    socket,
    host: `unix://${socket}`,
    dataRoot,
    execRoot,
    blobTmpDir: join(dataRoot, 'tmp'),
    logFile,
    pid: child.pid as number,
    storageDriver,
    async docker(cliArgs, o = {}) {
      return execFileP(DOCKER_CLI, ['-H', `unix://${socket}`, ...cliArgs], { timeout: o.timeoutMs ?? 120_000, maxBuffer: 16 * 1024 * 1024 });
    },
    readLog: () => readFile(logFile, 'utf8'),
    async stop() {
      if (stopped) return;
      stopped = true;
      await cleanup();
    },
  };
}
