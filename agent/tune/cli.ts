/**
 * `pullwatch tune plan|apply`. Output goes to stdout (plan table / JSON / diff); problems to
 * stderr with a non-zero exit code (1 = refused or failed, 2 = usage).
 */
import type { Command } from 'commander';
import { Option } from 'commander';
import { envOption, durationArg } from '../../cli/options.js';
import { computePlanWithLayout } from './plan.js';
import { historyFromAgent, historyFromFile, inFlightPulls, type HistoryResult } from './history.js';
import { renderPlan } from './render.js';
import { applyPlan, DEFAULT_BACKUP_DIR, DEFAULT_LOCK } from './apply.js';
import { TuneError } from './types.js';

interface CommonOpts {
  hostRoot: string;
  agentUrl: string;
  history?: string;
  deadline?: number;
  json?: boolean;
  containerdBin?: string;
}

interface ApplyCliOpts extends CommonOpts {
  dryRun?: boolean;
  restart?: boolean;
  force?: boolean;
  only: 'runtime' | 'kubelet' | 'all';
  backupDir: string;
  lockFile: string;
  runtimeValidate: boolean;
  healthTimeout: number;
}

function common(cmd: Command): Command {
  // Usage errors surface as CommanderError to cli/main (exit code 2-ish) instead of process.exit here.
  return cmd
    .exitOverride()
    .addOption(envOption('--host-root <path>', 'the node\'s root filesystem (e.g. /host in the DaemonSet)', '/'))
    .addOption(envOption('--agent-url <url>', 'local agent, for pull history and in-flight pulls', 'http://127.0.0.1:9090'))
    .addOption(envOption('--history <file>', 'pull history JSON ({ pulls: PullRecord[] }) instead of asking the agent'))
    .addOption(envOption('--deadline <duration>', 'use this deadline instead of the evidence rule (e.g. 10m)').argParser(durationArg))
    .addOption(envOption('--containerd-bin <path>', 'host path of the containerd binary when not in /usr/bin or /usr/local/bin'))
    .addOption(envOption('--json', 'print the plan as JSON (stable, versioned by schemaVersion)'));
}

async function loadHistory(o: CommonOpts): Promise<HistoryResult> {
  return o.history ? historyFromFile(o.history) : historyFromAgent(o.agentUrl);
}

async function makePlan(o: CommonOpts): Promise<Awaited<ReturnType<typeof computePlanWithLayout>>> {
  const h = await loadHistory(o);
  return computePlanWithLayout({
    hostRoot: o.hostRoot,
    history: h.pulls,
    historyInfo: h.info,
    ...(o.deadline !== undefined ? { deadlineOverrideMs: o.deadline } : {}),
    ...(o.containerdBin ? { containerdBinary: o.containerdBin } : {}),
    now: new Date(),
  });
}

function fail(e: unknown): void {
  if (e instanceof TuneError) {
    process.stderr.write(`pullwatch tune: ${e.message}\n`);
    process.exitCode = 1;
    return;
  }
  process.stderr.write(`pullwatch tune: unexpected error: ${(e as Error).stack ?? String(e)}\n`);
  process.exitCode = 1;
}

export function registerTune(program: Command): void {
  const tune = program.command('tune').description('current and recommended pull deadlines for this node\'s kubelet and runtime; `apply` writes them').exitOverride();

  common(tune.command('plan', { isDefault: true }).description('show where each pull deadline is set, its risk, and the recommendation (read-only)'))
    .action(async (o: CommonOpts) => {
      try {
        const { plan } = await makePlan(o);
        process.stdout.write(o.json ? JSON.stringify(plan, null, 2) + '\n' : renderPlan(plan));
      } catch (e) { fail(e); }
    });

  common(tune.command('apply').description('write the recommended values (backup first; drop-ins where supported)'))
    .addOption(envOption('--dry-run', 'print the unified diff and change nothing'))
    .addOption(envOption('--restart', 'restart the changed components through the host\'s systemd, only when no pull is in flight'))
    .addOption(envOption('--force', 'restart even when the agent cannot say whether a pull is in flight'))
    .addOption(new Option('--only <what>', 'limit to the runtime or the kubelet').choices(['runtime', 'kubelet', 'all']).default('all').env('PULLWATCH_ONLY'))
    .addOption(envOption('--backup-dir <path>', 'host path for timestamped backups', DEFAULT_BACKUP_DIR))
    .addOption(envOption('--lock-file <path>', 'host path of the apply lock', DEFAULT_LOCK))
    .addOption(new Option('--no-runtime-validate', 'skip `containerd config dump` validation (parse-only)'))
    .addOption(envOption('--health-timeout <duration>', 'how long to wait for a restarted component', '60s').argParser(durationArg))
    .action(async (o: ApplyCliOpts) => {
      try {
        const { plan, layout } = await makePlan(o);
        const res = await applyPlan({
          plan, layout,
          only: o.only,
          dryRun: !!o.dryRun,
          restart: !!o.restart,
          force: !!o.force,
          backupDir: o.backupDir,
          lockPath: o.lockFile,
          runtimeValidate: o.runtimeValidate,
          healthTimeoutMs: typeof o.healthTimeout === 'number' ? o.healthTimeout : 60_000,
          inFlight: () => inFlightPulls(o.agentUrl),
          log: (l) => { if (!o.json) process.stderr.write(`${l}\n`); },
        });
        if (o.json) {
          process.stdout.write(JSON.stringify({
            changed: res.changes.map((c) => ({ path: c.path, realPath: c.realPath, component: c.component, what: c.what, created: c.before === null })),
            written: res.written, backupDir: res.backupDir ?? null, restarted: res.restarted, rolledBack: res.rolledBack,
            messages: res.messages, diff: res.diff,
          }, null, 2) + '\n');
        } else {
          if (res.diff) process.stdout.write(res.diff);
          for (const m of res.messages) process.stdout.write(`${m}\n`);
          if (res.written) process.stdout.write(`applied ${res.changes.length} file change(s); backup in ${res.backupDir ?? '?'}${res.restarted.length ? `; restarted ${res.restarted.join(', ')}` : o.restart ? '' : '; restart the component(s) for the change to take effect (or use --restart)'}\n`);
        }
      } catch (e) { fail(e); }
    });
}
