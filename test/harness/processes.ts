/**
 * Last-resort cleanup of the daemons the harness starts. Every harness module registers the pid of
 * what it spawns here; `stop()` unregisters it. If a test process ends without stopping them
 * (crash, forgotten afterAll), the 'exit' hook SIGKILLs what is left. Daemons are also spawned under
 * `setpriv --pdeathsig SIGKILL` so the kernel kills them if the test worker itself is killed.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

const live = new Map<number, string>();
const dirs = new Set<string>();
let hooked = false;

function hook(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', cleanupNow);
  // Test runners end their workers with a signal (no 'exit' event then): clean up, then let the
  // signal do what it would have done.
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    const onSignal = (): void => {
      cleanupNow();
      process.off(sig, onSignal);
      if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
    };
    process.on(sig, onSignal);
  }
}

function cleanupNow(): void {
  for (const pid of live.keys()) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  for (const dir of dirs) {
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // best effort (e.g. a mount still inside)
    }
  }
  live.clear();
  dirs.clear();
}

/** Registers a temp dir to delete at process exit if its owner did not remove it. */
export function trackDir(dir: string): void {
  hook();
  dirs.add(dir);
}

export function untrackDir(dir: string): void {
  dirs.delete(dir);
}

export function trackPid(pid: number, what: string): void {
  hook();
  live.set(pid, what);
}

export function untrackPid(pid: number): void {
  live.delete(pid);
}

/** Pids started by the harness in this process and not stopped yet (for leak assertions). */
export function trackedPids(): ReadonlyMap<number, string> {
  return live;
}

const SETPRIV = '/usr/bin/setpriv';

/**
 * Spawns a daemon that dies with this process (pdeathsig via setpriv when available; setpriv
 * execs, so the child's pid is the daemon's pid) and registers it for the exit hook.
 */
export function spawnDaemon(command: string, args: string[], opts: SpawnOptions & { what: string }): ChildProcess {
  if (!existsSync(command)) {
    throw new Error(`${opts.what}: binary ${command} not found (run scripts/ensure-test-deps.sh)`);
  }
  const { what, ...spawnOpts } = opts;
  const child = existsSync(SETPRIV)
    ? spawn(SETPRIV, ['--pdeathsig', 'SIGKILL', '--', command, ...args], spawnOpts)
    : spawn(command, args, spawnOpts);
  if (child.pid === undefined) throw new Error(`${what}: spawn of ${command} failed`);
  trackPid(child.pid, what);
  child.once('exit', () => {
    if (child.pid !== undefined) untrackPid(child.pid);
  });
  return child;
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A zombie still answers kill(0); treat it as dead.
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/**
 * Stops a child: SIGTERM, wait up to `graceMs`, then SIGKILL; resolves once it has exited (and was
 * reaped by Node, so no zombie stays behind).
 */
export async function stopChild(child: ChildProcess, graceMs = 10_000): Promise<void> {
  const pid = child.pid;
  if (pid === undefined) return;
  if (child.exitCode !== null || child.signalCode !== null) {
    untrackPid(pid);
    return;
  }
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    // gone already
  }
  const timer = sleep(graceMs).then(() => 'timeout' as const);
  if ((await Promise.race([exited.then(() => 'exited' as const), timer])) === 'timeout') {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
    await exited;
  }
  untrackPid(pid);
}

/**
 * Pids of processes whose command line contains `needle` (a unique temp path of one instance,
 * e.g. its socket): how the shims a containerd started are found, since they outlive it.
 */
export function pidsMentioning(needle: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (pid === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`, 'utf8');
      if (cmd.includes(needle)) out.push(pid);
    } catch {
      // exited while we looked
    }
  }
  return out;
}

/** SIGKILLs the given pids (processes an instance left behind) and waits until they are gone. */
export async function killPids(pids: number[], timeoutMs = 5_000): Promise<void> {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  const deadline = Date.now() + timeoutMs;
  while (pids.some(isAlive) && Date.now() < deadline) await sleep(50);
}
