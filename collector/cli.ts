import { InvalidArgumentError, type Command } from 'commander';
import { collect, durationArg, envOption } from '../cli/options.js';
import { createLogger } from '../common/log.js';
import { startCollector, type CollectorOptions } from './run.js';

interface CollectorFlags {
  listen: string; db: string; slackWebhook?: string; webhook?: string[]; webhookSecretFile?: string; alertmanager?: string;
  tokenFile?: string; retention: number; registryNodes: number; registryWindow: number; heartbeatInterval: number;
  flapWindow: number; updateThrottle: number; publicUrl?: string;
}

function positiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`expected a positive integer, got "${v}"`);
  return n;
}

/** Maps parsed flags to startCollector options (exported for tests). */
export function collectorOptionsFromFlags(f: CollectorFlags): CollectorOptions {
  const o: CollectorOptions = {
    listen: f.listen, db: f.db, retentionMs: f.retention, registryNodes: f.registryNodes, registryWindowMs: f.registryWindow,
    heartbeatIntervalMs: f.heartbeatInterval, flapWindowMs: f.flapWindow, updateThrottleMs: f.updateThrottle,
    webhooks: f.webhook ?? [],
  };
  if (f.slackWebhook) o.slackWebhook = f.slackWebhook;
  if (f.webhookSecretFile) o.webhookSecretFile = f.webhookSecretFile;
  if (f.alertmanager) o.alertmanager = f.alertmanager;
  if (f.tokenFile) o.tokenFile = f.tokenFile;
  if (f.publicUrl) o.publicUrl = f.publicUrl;
  return o;
}

/** `pullwatch collector` — the central service: ingest API → store → incidents → notifiers, dashboard. */
export function registerCollector(program: Command): void {
  program.command('collector')
    .description('Run the central collector: agent ingest API, incidents, Slack/webhook/Alertmanager alerts, dashboard')
    .addOption(envOption('--listen <host:port>', 'address to listen on', '0.0.0.0:8080'))
    .addOption(envOption('--db <path|url>', 'SQLite file path, or postgres://… for several replicas', './pullwatch-data/collector.db'))
    .addOption(envOption('--slack-webhook <url>', 'Slack incoming-webhook URL (a secret: prefer PULLWATCH_SLACK_WEBHOOK)'))
    .addOption(envOption('--webhook <url>', 'generic webhook URL (repeatable)').argParser(collect))
    .addOption(envOption('--webhook-secret-file <path>', 'file with the HMAC secret that signs webhook deliveries'))
    .addOption(envOption('--alertmanager <url>', 'Alertmanager base URL (alerts go to <url>/api/v2/alerts)'))
    .addOption(envOption('--token-file <path>', 'file with the bearer token(s) agents must send, one per line'))
    .addOption(envOption('--retention <duration>', 'how long events and resolved incidents are kept', '14d').argParser(durationArg))
    .addOption(envOption('--registry-nodes <n>', 'nodes stalling on one registry that make a registry incident', '3').argParser(positiveInt))
    .addOption(envOption('--registry-window <duration>', 'window in which those nodes must stall', '5m').argParser(durationArg))
    .addOption(envOption('--heartbeat-interval <duration>', 'heartbeat interval agents are told to use', '30s').argParser(durationArg))
    .addOption(envOption('--flap-window <duration>', 'a resolve waits this long; a re-stall within it continues the incident', '1m').argParser(durationArg))
    .addOption(envOption('--update-throttle <duration>', 'at most one update message per incident per this long', '5m').argParser(durationArg))
    .addOption(envOption('--public-url <url>', 'dashboard URL to link from alerts'))
    .action(async (flags: CollectorFlags) => {
      const logger = createLogger({ name: 'pullwatch-collector' });
      // commander gives string defaults unparsed
      const f: CollectorFlags = {
        ...flags,
        retention: typeof flags.retention === 'string' ? durationArg(flags.retention) : flags.retention,
        registryNodes: typeof flags.registryNodes === 'string' ? positiveInt(flags.registryNodes) : flags.registryNodes,
        registryWindow: typeof flags.registryWindow === 'string' ? durationArg(flags.registryWindow) : flags.registryWindow,
        heartbeatInterval: typeof flags.heartbeatInterval === 'string' ? durationArg(flags.heartbeatInterval) : flags.heartbeatInterval,
        flapWindow: typeof flags.flapWindow === 'string' ? durationArg(flags.flapWindow) : flags.flapWindow,
        updateThrottle: typeof flags.updateThrottle === 'string' ? durationArg(flags.updateThrottle) : flags.updateThrottle,
      };
      let running;
      try {
        running = await startCollector(collectorOptionsFromFlags(f), logger);
      } catch (e) {
        process.stderr.write(`pullwatch collector: ${(e as Error).message}\n`);
        process.exitCode = 1;
        return;
      }
      process.stderr.write(`pullwatch collector listening on ${running.url}\n`);
      const r = running;
      await new Promise<void>((resolve) => {
        const shutdown = (sig: string) => {
          logger.info({ signal: sig }, 'collector stopping');
          void r.stop().finally(resolve);
        };
        process.once('SIGTERM', () => shutdown('SIGTERM'));
        process.once('SIGINT', () => shutdown('SIGINT'));
      });
    });
}
