/**
 * Real containerd (1.6 from Debian bookworm, 1.7 from Debian trixie unpacked into a test folder),
 * each instance with its own root, state, socket, config and log file, CRI plugin enabled, and
 * plain-HTTP registries on 127.0.0.1 configured through `config_path` + hosts.toml (honoured by
 * both 1.6 and 1.7, and re-read on every pull, so hosts can be added while it runs).
 */
import { execFile, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createCriClient } from './cri.js';
import { killPids, pidsMentioning, spawnDaemon, stopChild, trackDir, untrackDir } from './processes.js';
import { freePort, waitFor } from './wait.js';

const execFileP = promisify(execFile);

export type ContainerdVersion = '1.6' | '1.7';

export const CONTAINERD17_DIR = process.env.PULLWATCH_CONTAINERD17_DIR ?? '/opt/pullwatch-test/containerd-1.7';

/** Directory holding containerd, ctr and containerd-shim-runc-v2 of a version. */
export function containerdBinDir(version: ContainerdVersion): string {
  return version === '1.6' ? '/usr/bin' : join(CONTAINERD17_DIR, 'usr', 'bin');
}

export interface ContainerdOptions {
  version: ContainerdVersion;
  /** CRI `image_pull_progress_timeout` (e.g. "20s"; "0s" disables). containerd 1.7 only. */
  pullProgressTimeout?: string;
  /** TOML appended to the generated config. It must only add tables/keys the harness does not set. */
  extraConfig?: string;
  /** host:port of registries reached over plain HTTP (more can be added with addRegistryHost). */
  registryHosts?: string[];
  /** containerd log level (default info; 'debug' adds e.g. 1.7's "progress for image pull"). */
  logLevel?: 'info' | 'debug' | 'trace';
  /** Snapshotter for the CRI plugin (default: overlayfs when this machine can mount overlay, else native). */
  snapshotter?: 'overlayfs' | 'native' | 'auto';
  /** Serve Prometheus metrics on a free 127.0.0.1 port ([metrics] address). */
  metrics?: boolean;
  /** Keep the temp dir after stop() (debugging). */
  keep?: boolean;
}

export interface RunningContainerd {
  readonly version: ContainerdVersion;
  /** What `containerd --version` printed, e.g. "1.7.24~ds1". */
  readonly fullVersion: string;
  readonly binary: string;
  readonly ctrBinary: string;
  /** Temp dir holding root, state, config, log, certs.d. */
  readonly dir: string;
  readonly root: string;
  readonly state: string;
  /** gRPC unix socket path (CRI and containerd services). */
  readonly socket: string;
  /** unix:///path form of socket (gRPC target). */
  readonly address: string;
  readonly configPath: string;
  /** containerd's stderr log (logrus text format); restarts append. */
  readonly logFile: string;
  /** `<root>/io.containerd.content.v1.content/ingest`. */
  readonly ingestDir: string;
  readonly snapshotter: 'overlayfs' | 'native';
  /** http://127.0.0.1:PORT/v1/metrics when started with metrics: true. */
  readonly metricsUrl: string | undefined;
  /** Current pid (changes on restart). */
  readonly pid: number;
  /** Adds a plain-HTTP registry (writes certs.d/<host>/hosts.toml; used from the next pull on). */
  addRegistryHost(host: string): Promise<void>;
  /** Runs this version's ctr against this instance. */
  ctr(args: string[], opts?: { namespace?: string; timeoutMs?: number }): Promise<{ stdout: string; stderr: string }>;
  /** Log text written so far. */
  readLog(): Promise<string>;
  /** Stops containerd, kills the shims it left, unmounts and (unless keep) deletes its dir. */
  stop(): Promise<void>;
  /** Stops the daemon (keeping root/state) and starts it again with the same config. */
  restart(): Promise<void>;
}

let overlayProbe: boolean | undefined;

/** Whether an overlay mount works here (some sandboxes and rootless setups cannot). */
export async function overlaySupported(): Promise<boolean> {
  if (overlayProbe !== undefined) return overlayProbe;
  const dir = await mkdtemp(join(tmpdir(), 'pw-ovl-'));
  try {
    for (const d of ['lower', 'upper', 'work', 'merged']) await mkdir(join(dir, d));
    await execFileP('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${dir}/lower,upperdir=${dir}/upper,workdir=${dir}/work`, `${dir}/merged`]);
    await execFileP('umount', [`${dir}/merged`]);
    overlayProbe = true;
  } catch {
    overlayProbe = false;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return overlayProbe;
}

function tomlString(s: string): string {
  return JSON.stringify(s);
}

function renderConfig(o: {
  version: ContainerdVersion; root: string; state: string; socket: string; dir: string; certsDir: string;
  logLevel: string; snapshotter: string; pullProgressTimeout?: string; metricsAddress?: string; extra?: string;
}): string {
  const lines = [
    'version = 2',
    `root = ${tomlString(o.root)}`,
    `state = ${tomlString(o.state)}`,
    'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]',
    '',
    '[grpc]',
    `  address = ${tomlString(o.socket)}`,
    '',
    '[ttrpc]',
    `  address = ${tomlString(`${o.socket}.ttrpc`)}`,
    '',
    '[debug]',
    `  level = ${tomlString(o.logLevel)}`,
    '',
    '[metrics]',
    `  address = ${tomlString(o.metricsAddress ?? '')}`,
    '',
    '[plugins]',
    '  [plugins."io.containerd.internal.v1.opt"]',
    `    path = ${tomlString(join(o.dir, 'opt'))}`,
    '  [plugins."io.containerd.grpc.v1.cri"]',
    '    disable_tcp_service = true',
    '    stream_server_address = "127.0.0.1"',
    '    stream_server_port = "0"',
    '    enable_selinux = false',
    '    disable_apparmor = true',
  ];
  if (o.pullProgressTimeout !== undefined) lines.push(`    image_pull_progress_timeout = ${tomlString(o.pullProgressTimeout)}`);
  lines.push(
    '    [plugins."io.containerd.grpc.v1.cri".containerd]',
    `      snapshotter = ${tomlString(o.snapshotter)}`,
    '    [plugins."io.containerd.grpc.v1.cri".cni]',
    `      bin_dir = ${tomlString(join(o.dir, 'cni', 'bin'))}`,
    `      conf_dir = ${tomlString(join(o.dir, 'cni', 'net.d'))}`,
    '    [plugins."io.containerd.grpc.v1.cri".registry]',
    `      config_path = ${tomlString(o.certsDir)}`,
  );
  if (o.version === '1.7') {
    // NRI listens on a fixed socket (/var/run/nri/nri.sock); two instances would collide.
    lines.push('  [plugins."io.containerd.nri.v1.nri"]', '    disable = true');
  }
  if (o.extra) lines.push('', o.extra);
  return `${lines.join('\n')}\n`;
}

/** hosts.toml making `host` a plain-HTTP registry for pulls and pushes. */
export function plainHttpHostsToml(host: string): string {
  return [
    `server = "http://${host}"`,
    '',
    `[host."http://${host}"]`,
    '  capabilities = ["pull", "resolve", "push"]',
    '  skip_verify = true',
    '',
  ].join('\n');
}

function mountsUnder(dir: string): string[] {
  try {
    return readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((l) => l.split(' ')[4])
      .filter((p): p is string => p !== undefined && (p === dir || p.startsWith(`${dir}/`)))
      .map((p) => p.replace(/\\040/g, ' '));
  } catch {
    return [];
  }
}

export async function startContainerd(opts: ContainerdOptions): Promise<RunningContainerd> {
  const version = opts.version;
  if (version !== '1.6' && version !== '1.7') throw new Error(`startContainerd: unknown version ${String(version)}`);
  if (opts.pullProgressTimeout !== undefined && version !== '1.7') {
    throw new Error('startContainerd: image_pull_progress_timeout exists only in containerd 1.7+ (not 1.6)');
  }
  const binDir = containerdBinDir(version);
  const binary = join(binDir, 'containerd');
  const ctrBinary = join(binDir, 'ctr');
  for (const b of [binary, ctrBinary]) {
    if (!existsSync(b)) {
      throw new Error(`containerd ${version}: ${b} is missing. Run scripts/ensure-test-deps.sh` +
        (version === '1.7' ? ' (or set PULLWATCH_CONTAINERD17_DIR)' : ''));
    }
  }
  const { stdout: verOut } = await execFileP(binary, ['--version']);
  const fullVersion = verOut.trim().split(/\s+/)[2] ?? verOut.trim();
  if (!fullVersion.startsWith(`${version}.`)) {
    throw new Error(`containerd at ${binary} is ${fullVersion}, expected ${version}.x`);
  }

  const dir = await mkdtemp(join(tmpdir(), `pw-ctrd${version.replace('.', '')}-`));
  if (!opts.keep) trackDir(dir);
  const root = join(dir, 'root');
  const state = join(dir, 'state');
  const socket = join(dir, 'c.sock');
  const certsDir = join(dir, 'certs.d');
  const configPath = join(dir, 'config.toml');
  const logFile = join(dir, 'containerd.log');
  await Promise.all([root, state, certsDir, join(dir, 'opt'), join(dir, 'cni', 'bin'), join(dir, 'cni', 'net.d')].map((d) => mkdir(d, { recursive: true })));

  const wanted = opts.snapshotter ?? 'auto';
  const snapshotter: 'overlayfs' | 'native' = wanted === 'auto' ? ((await overlaySupported()) ? 'overlayfs' : 'native') : wanted;
  const metricsAddress = opts.metrics ? `127.0.0.1:${await freePort()}` : undefined;
  await writeFile(configPath, renderConfig({
    version, root, state, socket, dir, certsDir, snapshotter,
    logLevel: opts.logLevel ?? 'info',
    pullProgressTimeout: opts.pullProgressTimeout,
    metricsAddress,
    extra: opts.extraConfig,
  }));

  const addRegistryHost = async (host: string): Promise<void> => {
    if (!/^[A-Za-z0-9.-]+(:\d+)?$/.test(host)) throw new Error(`addRegistryHost: not a host[:port]: ${host}`);
    const hostDir = join(certsDir, host);
    await mkdir(hostDir, { recursive: true });
    await writeFile(join(hostDir, 'hosts.toml'), plainHttpHostsToml(host));
  };
  for (const h of opts.registryHosts ?? []) await addRegistryHost(h);

  let child: ChildProcess | undefined;
  let stopped = false;

  const launch = async (): Promise<void> => {
    const logOffset = existsSync(logFile) ? readFileSync(logFile).length : 0;
    const fd = openSync(logFile, 'a');
    const c = spawnDaemon(binary, ['--config', configPath], {
      what: `containerd ${version}`,
      stdio: ['ignore', fd, fd],
      // The version's own shims first (only used if a container is ever started).
      env: { ...process.env, PATH: `${binDir}:${process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin'}` },
    });
    closeSync(fd);
    child = c;
    let exitInfo: string | undefined;
    c.once('exit', (code, sig) => { exitInfo = `exit code ${String(code)} signal ${String(sig)}`; });
    const cri = createCriClient(socket);
    try {
      await waitFor(async () => {
        if (exitInfo) throw new Error(`containerd exited (${exitInfo})`);
        if (!existsSync(socket)) return false;
        const log = readFileSync(logFile).subarray(logOffset).toString('utf8');
        if (!log.includes('containerd successfully booted')) return false;
        await cri.version();
        return true;
      }, { timeoutMs: 30_000, intervalMs: 100, what: `containerd ${version} at ${socket} to serve CRI` });
    } catch (err) {
      const tail = readFileSync(logFile).subarray(logOffset).toString('utf8').split('\n').slice(-15).join('\n');
      await stopChild(c, 2_000);
      throw new Error(`${(err as Error).message}\n--- ${logFile} (tail) ---\n${tail}`, { cause: err });
    } finally {
      cri.close();
    }
  };

  const halt = async (): Promise<void> => {
    if (child) await stopChild(child, 10_000);
    child = undefined;
    // Shims carry "-address <socket>"; they outlive containerd by design.
    await killPids(pidsMentioning(socket));
  };

  try {
    await launch();
  } catch (err) {
    await halt();
    if (!opts.keep) { await rm(dir, { recursive: true, force: true }); untrackDir(dir); }
    throw err;
  }

  const instance: RunningContainerd = {
    version,
    fullVersion,
    binary,
    ctrBinary,
    dir,
    root,
    state,
    socket,
    address: `unix://${socket}`,
    configPath,
    logFile,
    ingestDir: join(root, 'io.containerd.content.v1.content', 'ingest'),
    snapshotter,
    metricsUrl: metricsAddress ? `http://${metricsAddress}/v1/metrics` : undefined,
    get pid(): number {
      return child?.pid ?? -1;
    },
    addRegistryHost,
    async ctr(args, o = {}) {
      const { stdout, stderr } = await execFileP(ctrBinary, ['--address', socket, '--namespace', o.namespace ?? 'k8s.io', ...args], {
        timeout: o.timeoutMs ?? 60_000,
        maxBuffer: 64 * 1024 * 1024,
      });
      return { stdout, stderr };
    },
    readLog: () => readFile(logFile, 'utf8'),
    async stop() {
      if (stopped) return;
      stopped = true;
      await halt();
      for (const m of mountsUnder(dir).reverse()) {
        await execFileP('umount', ['-l', m]).catch(() => undefined);
      }
      if (!opts.keep) { await rm(dir, { recursive: true, force: true }); untrackDir(dir); }
    },
    async restart() {
      if (stopped) throw new Error('restart after stop');
      await halt();
      await launch();
    },
  };
  return instance;
}

export interface IngestEntry {
  /** Directory name (hex sha256 of the backend ref). */
  hash: string;
  dir: string;
  /** Content of `ref`, e.g. "k8s.io/3/layer-sha256:…". */
  ref: string;
  /** `total` as a number, undefined when the file is absent. */
  total: number | undefined;
  /** Size of `data`: bytes received so far. */
  dataSize: number;
  startedAt: string | undefined;
}

/**
 * Reads the in-progress ingests straight from disk (what the agent's ingest source must see).
 * Entries vanishing mid-read are skipped.
 */
export async function listIngests(c: Pick<RunningContainerd, 'ingestDir'>): Promise<IngestEntry[]> {
  const { readdir, stat } = await import('node:fs/promises');
  let names: string[];
  try {
    names = await readdir(c.ingestDir);
  } catch {
    return [];
  }
  const out: IngestEntry[] = [];
  for (const hash of names) {
    const dir = join(c.ingestDir, hash);
    try {
      const ref = (await readFile(join(dir, 'ref'), 'utf8')).trim();
      const totalText = await readFile(join(dir, 'total'), 'utf8').catch(() => undefined);
      const startedAt = await readFile(join(dir, 'startedat'), 'utf8').catch(() => undefined);
      const dataSize = (await stat(join(dir, 'data'))).size;
      out.push({ hash, dir, ref, total: totalText === undefined ? undefined : Number(totalText.trim()), dataSize, startedAt: startedAt?.trim() });
    } catch {
      // committed or aborted while we read it
    }
  }
  return out;
}

/** The ingest whose ref names `digest` (e.g. "k8s.io/3/layer-sha256:…"), if any. */
export async function findIngest(c: Pick<RunningContainerd, 'ingestDir'>, digest: string): Promise<IngestEntry | undefined> {
  return (await listIngests(c)).find((e) => e.ref.endsWith(`-${digest}`));
}
