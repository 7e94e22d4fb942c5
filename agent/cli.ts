import { hostname } from 'node:os';
import { join } from 'node:path';
import { Option, type Command } from 'commander';
import { createLogger } from '../common/log.js';
import { bytesArg, durationArg, envOption } from '../cli/options.js';
import type { AgentOptions } from './run.js';

interface AgentFlags {
  hostRoot: string;
  containerdRoot?: string;
  containerdSocket?: string;
  dockerRoot?: string;
  dockerSocket?: string;
  logSource: string[] | string;
  stallAfter: number;
  slowBelow: number;
  poll: number;
  collector?: string;
  tokenFile?: string;
  queueDir: string;
  listen: string;
  nodeName?: string;
  kube: 'auto' | 'off';
  kubeconfig?: string;
  logLevel: string;
}

/** Splits env-provided lists ("journal,file:/var/log/x") as well as repeated flags. */
function asList(v: string[] | string): string[] {
  const items = Array.isArray(v) ? v : [v];
  return items.flatMap((s) => s.split(/[,\s]+/)).filter(Boolean);
}

export function agentOptionsFromFlags(f: AgentFlags): AgentOptions {
  const root = f.hostRoot;
  return {
    hostRoot: root,
    containerdRoot: f.containerdRoot ?? join(root, 'var/lib/containerd'),
    containerdSocket: f.containerdSocket ?? join(root, 'run/containerd/containerd.sock'),
    dockerRoot: f.dockerRoot ?? join(root, 'var/lib/docker'),
    dockerSocket: f.dockerSocket ?? join(root, 'var/run/docker.sock'),
    logSources: asList(f.logSource),
    stallAfterMs: f.stallAfter,
    slowBelowBytesPerSecond: f.slowBelow,
    pollMs: f.poll,
    collector: f.collector,
    tokenFile: f.tokenFile,
    queueDir: f.queueDir,
    listen: f.listen,
    nodeName: f.nodeName ?? process.env.NODE_NAME ?? hostname(),
    kube: f.kube,
    kubeconfig: f.kubeconfig,
  };
}

/** Flags shared by `pullwatch agent` and `pullwatch start`. */
export function addAgentFlags(cmd: Command, defaults: { listen: string; queueDir: string }): Command {
  return cmd
    .addOption(envOption('--host-root <dir>', 'where the host filesystem is mounted (/host in the image)', '/'))
    .addOption(envOption('--containerd-root <dir>', 'containerd root (default <host-root>/var/lib/containerd)'))
    .addOption(envOption('--containerd-socket <path>', 'containerd socket (default <host-root>/run/containerd/containerd.sock)'))
    .addOption(envOption('--docker-root <dir>', 'Docker data root (default <host-root>/var/lib/docker)'))
    .addOption(envOption('--docker-socket <path>', 'Docker socket (default <host-root>/var/run/docker.sock)'))
    .addOption(envOption('--log-source <spec...>', 'log sources: journal | journal:DIR | file:PATH (repeatable)', ['journal']))
    .addOption(envOption('--stall-after <duration>', 'no byte progress for this long = stalled', '60s').argParser(durationArg))
    .addOption(envOption('--slow-below <rate>', 'slower than this over the stall window = slow (bytes/s, e.g. 64KiB)', '64KiB').argParser(bytesArg))
    .addOption(envOption('--poll <duration>', 'how often ingests and temp files are read', '1s').argParser(durationArg))
    .addOption(envOption('--collector <url>', 'central collector URL (events are queued durably until delivered)'))
    .addOption(envOption('--token-file <path>', 'bearer token for the collector'))
    .addOption(envOption('--queue-dir <dir>', 'durable on-disk queue for collector events', defaults.queueDir))
    .addOption(envOption('--listen <host:port>', 'HTTP for /healthz, /metrics, /v1/pulls', defaults.listen))
    .addOption(envOption('--node-name <name>', 'this node\'s name (default $NODE_NAME or the hostname)'))
    .addOption(envOption('--kube <mode>', 'use the Kubernetes API (pods waiting, Events)', 'auto').choices(['auto', 'off']))
    .addOption(envOption('--kubeconfig <path>', 'a kubeconfig instead of the in-cluster service account'))
    .addOption(new Option('--log-level <level>', 'log level').env('PULLWATCH_LOG_LEVEL').default('info')
      .choices(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']));
}

export function registerAgent(program: Command): void {
  const cmd = program.command('agent').description('the node agent: watch every pull\'s byte progress, report stalls and slow pulls');
  addAgentFlags(cmd, { listen: '0.0.0.0:9090', queueDir: '/var/lib/pullwatch/queue' });
  cmd.action(async (flags: AgentFlags) => {
    const logger = createLogger({ level: flags.logLevel, name: 'pullwatch-agent' });
    // Preserve a default: commander's default for --stall-after etc. is the raw string when untouched.
    const { startAgent, AgentOptionsError } = await import('./run.js');
    let agent: Awaited<ReturnType<typeof startAgent>>;
    try {
      agent = await startAgent(agentOptionsFromFlags(normalizeDefaults(flags)), logger);
    } catch (err) {
      if (!(err instanceof AgentOptionsError) && (err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
      process.stderr.write(`pullwatch agent: ${(err as Error).message}\n`);
      process.exitCode = 2;
      return;
    }
    logger.info({ address: agent.url, node: agent.nodeName }, 'agent running');
    await waitForSignal();
    logger.info('stopping');
    await agent.stop();
  });
}

/** commander does not run argParser on string defaults: parse them here. */
export function normalizeDefaults(f: AgentFlags): AgentFlags {
  const num = (v: unknown, parse: (s: string) => number): number => (typeof v === 'string' ? parse(v) : (v as number));
  return {
    ...f,
    stallAfter: num(f.stallAfter, durationArg),
    slowBelow: num(f.slowBelow, bytesArg),
    poll: num(f.poll, durationArg),
  };
}

export function waitForSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const on = (sig: NodeJS.Signals) => { process.off('SIGINT', on); process.off('SIGTERM', on); resolve(sig); };
    process.on('SIGINT', on);
    process.on('SIGTERM', on);
  });
}
