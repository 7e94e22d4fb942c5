/**
 * `pullwatch start` — the collector (embedded SQLite), the agent for this host and the dashboard in
 * one process. Prints the dashboard URL on stdout; stops cleanly on SIGINT / SIGTERM.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { resolve, join } from 'node:path';
import { Option, type Command } from 'commander';
import { createLogger, type Logger } from '../common/log.js';
import { bytesArg, collect, durationArg, envOption } from './options.js';
import { agentOptionsFromFlags } from '../agent/cli.js';
import { startAgent, type RunningAgent } from '../agent/run.js';
import { startCollector } from '../collector/run.js';

/** commander does not run argParser on defaults: '60s' arrives as a string. */
function parsed(v: number | string, parse: (s: string) => number): number {
  return typeof v === 'string' ? parse(v) : v;
}

interface StartFlags {
  dataDir: string;
  listen: string;
  agentListen: string;
  hostRoot: string;
  containerdRoot?: string;
  containerdSocket?: string;
  dockerRoot?: string;
  dockerSocket?: string;
  logSource: string[] | string;
  stallAfter: number | string;
  slowBelow: number | string;
  poll: number | string;
  nodeName?: string;
  logLevel: string;
}

export interface StartOptions {
  dataDir: string;
  /** Collector + dashboard, host:port (port 0 picks a free one). */
  listen: string;
  agent: Omit<Parameters<typeof agentOptionsFromFlags>[0], 'collector' | 'tokenFile' | 'queueDir' | 'kube'>;
}

export interface RunningStart {
  /** Dashboard URL, e.g. http://127.0.0.1:8080/ */
  readonly url: string;
  readonly agent: RunningAgent;
  stop(): Promise<void>;
}

/** The token the local agent uses: generated once (256 bits) and kept in the data dir (mode 0600). */
export function ensureToken(dataDir: string): string {
  const path = join(dataDir, 'token');
  try {
    const existing = readFileSync(path, 'utf8').trim();
    if (existing.length >= 32) return path;
  } catch { /* not there yet */ }
  writeFileSync(path, `${randomBytes(32).toString('base64url')}\n`, { mode: 0o600 });
  chmodSync(path, 0o600);
  return path;
}

/** A browsable URL: a wildcard listen address becomes 127.0.0.1. */
export function dashboardUrl(collectorUrl: string): string {
  const u = new URL(collectorUrl);
  if (u.hostname === '0.0.0.0' || u.hostname === '[::]' || u.hostname === '::') u.hostname = '127.0.0.1';
  u.pathname = '/';
  return u.href;
}

/** Starts collector, then the agent pointed at it. Used by the CLI and by tests. */
export async function startAll(o: StartOptions, logger: Logger): Promise<RunningStart> {
  const dataDir = resolve(o.dataDir);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const tokenFile = ensureToken(dataDir);
  const collector = await startCollector({
    listen: o.listen,
    db: join(dataDir, 'pullwatch.db'),
    tokenFile,
  }, logger);
  let agent: RunningAgent;
  try {
    agent = await startAgent(agentOptionsFromFlags({
      ...o.agent,
      collector: collector.url,
      tokenFile,
      queueDir: join(dataDir, 'queue'),
      kube: 'off',
    }), logger.child({ component: 'agent' }));
  } catch (e) {
    await collector.stop();
    throw e;
  }
  let stopping: Promise<void> | undefined;
  return {
    url: dashboardUrl(collector.url),
    agent,
    stop() {
      stopping ??= (async () => {
        try { await agent.stop(); } finally { await collector.stop(); }
      })();
      return stopping;
    },
  };
}

export function registerStart(program: Command): void {
  program.command('start')
    .description('collector (SQLite) + agent for this host + dashboard in one process; prints the URL')
    .addOption(envOption('--data-dir <dir>', 'database, token and event queue', './pullwatch-data'))
    .addOption(envOption('--listen <host:port>', 'collector API and dashboard', '127.0.0.1:8080'))
    .addOption(envOption('--agent-listen <host:port>', 'the agent\'s /healthz, /metrics, /v1/pulls', '127.0.0.1:0'))
    .addOption(envOption('--host-root <dir>', 'where the host filesystem is', '/'))
    .addOption(envOption('--containerd-root <dir>', 'containerd root (default <host-root>/var/lib/containerd)'))
    .addOption(envOption('--containerd-socket <path>', 'containerd socket (default <host-root>/run/containerd/containerd.sock)'))
    .addOption(envOption('--docker-root <dir>', 'Docker data root (default <host-root>/var/lib/docker)'))
    .addOption(envOption('--docker-socket <path>', 'Docker socket (default <host-root>/var/run/docker.sock)'))
    .addOption(envOption('--log-source <spec>', 'log sources: journal | journal:DIR | file:PATH (repeatable)').argParser(collect))
    .addOption(envOption('--stall-after <duration>', 'no byte progress for this long = stalled', '60s').argParser(durationArg))
    .addOption(envOption('--slow-below <rate>', 'slower than this over the stall window = slow (bytes/s)', '64KiB').argParser(bytesArg))
    .addOption(envOption('--poll <duration>', 'how often ingests and temp files are read', '1s').argParser(durationArg))
    .addOption(envOption('--node-name <name>', 'this node\'s name (default $NODE_NAME or the hostname)'))
    .addOption(new Option('--log-level <level>', 'log level').env('PULLWATCH_LOG_LEVEL').default('info')
      .choices(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']))
    .action(async (flags: StartFlags) => {
      const logger = createLogger({ level: flags.logLevel, name: 'pullwatch' });
      let running: RunningStart;
      try {
        running = await startAll({
          dataDir: flags.dataDir,
          listen: flags.listen,
          agent: {
            hostRoot: flags.hostRoot,
            containerdRoot: flags.containerdRoot,
            containerdSocket: flags.containerdSocket,
            dockerRoot: flags.dockerRoot,
            dockerSocket: flags.dockerSocket,
            logSource: flags.logSource ?? ['journal'],
            stallAfter: parsed(flags.stallAfter, durationArg),
            slowBelow: parsed(flags.slowBelow, bytesArg),
            poll: parsed(flags.poll, durationArg),
            listen: flags.agentListen,
            nodeName: flags.nodeName,
            logLevel: flags.logLevel,
          },
        }, logger);
      } catch (e) {
        process.stderr.write(`pullwatch start: ${(e as Error).message}\n`);
        process.exitCode = 1;
        return;
      }
      process.stdout.write(`pullwatch is running: ${running.url}\n`);
      await new Promise<void>((done) => {
        let signals = 0;
        const onSignal = (sig: NodeJS.Signals): void => {
          signals++;
          if (signals > 1) {
            process.stderr.write(`pullwatch start: second ${sig}, exiting now\n`);
            process.exit(130);
          }
          process.stderr.write(`pullwatch start: ${sig}, stopping…\n`);
          running.stop().then(
            () => { process.stderr.write('pullwatch start: stopped\n'); },
            (e: unknown) => { process.stderr.write(`pullwatch start: error while stopping: ${(e as Error).message}\n`); process.exitCode = 1; },
          ).finally(() => {
            process.off('SIGINT', onSignal);
            process.off('SIGTERM', onSignal);
            done();
          });
        };
        process.on('SIGINT', onSignal);
        process.on('SIGTERM', onSignal);
      });
    });
}
