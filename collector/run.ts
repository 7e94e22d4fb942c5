/**
 * startCollector(): the whole collector in-process — store, HTTP server (+ dashboard), incident
 * processing loop, outbox delivery, retention. Used by `pullwatch collector`, `pullwatch start`,
 * the tests and the benchmark.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type { FastifyInstance } from 'fastify';
import type { Logger } from '../common/log.js';
import { WIRE_LIMITS } from '../common/wire.js';
import { pullwatchVersion } from '../cli/version.js';
import { DEFAULT_ENGINE_CONFIG } from './incidents.js';
import { createMetrics, type CollectorMetrics } from './metrics.js';
import type { Notice } from './model.js';
import { AlertmanagerNotifier } from './notifiers/alertmanager.js';
import { safeHost, type Notifier } from './notifiers/notifier.js';
import { SlackNotifier } from './notifiers/slack.js';
import { WebhookNotifier } from './notifiers/webhook.js';
import { DEFAULT_OUTBOX, OutboxWorker, type OutboxOptions } from './outbox.js';
import { processStep } from './processor.js';
import { buildServer } from './server.js';
import { describeDb, openStore } from './store/open.js';
import type { Store } from './store/store.js';

export interface CollectorOptions {
  /** host:port; port 0 = ephemeral. Default 0.0.0.0:8080. */
  listen?: string;
  /** SQLite file path, or postgres://… Default ./pullwatch-data/collector.db. Ignored when `store` is given. */
  db?: string;
  /** An already opened and migrated store (tests, bench). The collector does not close it on stop(). */
  store?: Store;
  /** Bearer tokens accepted on ingest (in addition to tokenFile). */
  tokens?: string[];
  /** File with one token per line (several lines: rotation). */
  tokenFile?: string;
  slackWebhook?: string;
  webhooks?: string[];
  webhookSecret?: string;
  webhookSecretFile?: string;
  /** Alertmanager base URL (…/api/v2/alerts is appended). */
  alertmanager?: string;
  /** Extra notifiers (tests). */
  notifiers?: Notifier[];
  retentionMs?: number;
  registryNodes?: number;
  registryWindowMs?: number;
  /** Heartbeat interval agents are told to use; nodes are down after `missedHeartbeats` of their own interval. */
  heartbeatIntervalMs?: number;
  missedHeartbeats?: number;
  flapWindowMs?: number;
  updateThrottleMs?: number;
  bodyLimitBytes?: number;
  rateLimit?: { perSecond: number; burst: number };
  /** How often open incidents are re-evaluated (flap window, throttled updates, agent-down). */
  tickMs?: number;
  retentionEveryMs?: number;
  outbox?: Partial<Omit<OutboxOptions, 'owner'>>;
  notifierTimeoutMs?: number;
  /** Public URL of the dashboard for links in alerts. */
  publicUrl?: string;
  /** Serve the dashboard at / (default true). */
  dashboard?: boolean;
  /** Events per incident-processing step. */
  processBatch?: number;
  /** Delay between an ingest and the processing step it triggers (batching), ms. Default 20. */
  processDelayMs?: number;
}

export interface RunningCollector {
  /** http://host:port the server listens on (127.0.0.1 when bound to 0.0.0.0). */
  url: string;
  port: number;
  app: FastifyInstance;
  store: Store;
  metrics: CollectorMetrics;
  notifiers: string[];
  instanceId: string;
  /** Process stored events and timers now; resolves when done (tests). */
  processNow(): Promise<void>;
  /** Deliver due outbox rows now (tests). */
  deliverNow(): Promise<void>;
  /** Subscribe to notices as they are produced by this instance (dashboard live updates, bench). */
  onNotice(fn: (n: Notice) => void): () => void;
  stop(): Promise<void>;
}

function readSecret(path: string, what: string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch (e) {
    throw new Error(`cannot read ${what} file ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, { cause: e });
  }
}

export function parseListen(listen: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d+)$/.exec(listen.trim()) ?? /^()()(\d+)$/.exec(listen.trim());
  if (!m) throw new Error(`invalid --listen "${listen}" (expected host:port, e.g. 0.0.0.0:8080)`);
  const port = Number(m[3]);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`invalid port in --listen "${listen}"`);
  return { host: m[1] || m[2] || '0.0.0.0', port };
}

export async function startCollector(opts: CollectorOptions, logger: Logger): Promise<RunningCollector> {
  const log = logger.child({ component: 'collector' });
  const tokens = [...(opts.tokens ?? [])];
  if (opts.tokenFile) tokens.push(...readSecret(opts.tokenFile, 'token').split(/\r?\n/).map((t) => t.trim()).filter(Boolean));
  const webhookSecret = opts.webhookSecret ?? (opts.webhookSecretFile ? readSecret(opts.webhookSecretFile, 'webhook secret') : undefined);
  const { host, port } = parseListen(opts.listen ?? '0.0.0.0:8080');
  const publicUrl = opts.publicUrl;
  const timeoutMs = opts.notifierTimeoutMs ?? 10_000;
  const ua = `pullwatch/${pullwatchVersion()}`;

  const notifiers: Notifier[] = [];
  if (opts.slackWebhook) notifiers.push(new SlackNotifier('slack', { url: opts.slackWebhook, timeoutMs }, publicUrl));
  (opts.webhooks ?? []).forEach((url, i) => notifiers.push(new WebhookNotifier(`webhook-${i + 1}`, { url, timeoutMs }, webhookSecret, ua)));
  if (opts.alertmanager) notifiers.push(new AlertmanagerNotifier('alertmanager', { url: opts.alertmanager, timeoutMs }, publicUrl));
  notifiers.push(...(opts.notifiers ?? []));
  const byName = new Map(notifiers.map((n) => [n.name, n]));
  if (byName.size !== notifiers.length) throw new Error('notifier names must be unique');

  const ownStore = !opts.store;
  const db = opts.db ?? './pullwatch-data/collector.db';
  const store = opts.store ?? await openStore(db);
  const metrics = createMetrics(store);
  const instanceId = `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
  const missedHeartbeats = opts.missedHeartbeats ?? 3;
  const engineCfg = {
    registryNodes: opts.registryNodes ?? DEFAULT_ENGINE_CONFIG.registryNodes,
    registryWindowMs: opts.registryWindowMs ?? DEFAULT_ENGINE_CONFIG.registryWindowMs,
    flapWindowMs: opts.flapWindowMs ?? DEFAULT_ENGINE_CONFIG.flapWindowMs,
    updateThrottleMs: opts.updateThrottleMs ?? DEFAULT_ENGINE_CONFIG.updateThrottleMs,
  };
  const notifierNames = notifiers.map((n) => n.name);
  const listeners = new Set<(n: Notice) => void>();
  const onNotice = (n: Notice) => {
    if (n.type === 'firing') metrics.incidentsOpened.inc({ kind: n.incident.kind });
    log.info({ incident: n.incident.id, kind: n.incident.kind, type: n.type, summary: n.incident.summary }, 'incident notice');
    for (const l of listeners) { try { l(n); } catch { /* a listener's bug is not ours */ } }
  };

  const outbox = new OutboxWorker(store, byName, { ...DEFAULT_OUTBOX, ...opts.outbox, owner: instanceId }, metrics, log);

  // incident processing: coalesced; loops while a full batch came back
  const batch = opts.processBatch ?? 1000;
  let processing: Promise<void> | null = null;
  let pending = false;
  let stopped = false;
  let lockedOut = false;
  const processLoop = async () => {
    lockedOut = false;
    do {
      pending = false;
      for (;;) {
        const now = Date.now();
        let wrote = false;
        const n = await store.processIncidents({ nowMs: now, missedHeartbeats, limit: batch }, (input) => {
          const out = processStep(engineCfg, notifierNames, now, onNotice)(input);
          wrote = out.outbox.length > 0;
          return out;
        });
        if (wrote) outbox.wake();
        // another replica holds the processing lock: look again soon (our events may have missed its step)
        if (n === null) { lockedOut = true; break; }
        if (n < batch || stopped) break;
      }
    } while (pending && !stopped);
  };
  const processNow = (): Promise<void> => {
    if (processing) { pending = true; return processing; }
    processing = processLoop()
      .catch((e) => { log.warn({ err: (e as Error).message }, 'incident processing failed; will retry'); })
      .finally(() => { processing = null; if (lockedOut) scheduleProcess(); });
    return processing;
  };

  // after ingest: wait a moment so one step handles many requests' events (throughput), not one each
  const processDelayMs = opts.processDelayMs ?? 20;
  let processTimer: NodeJS.Timeout | null = null;
  function scheduleProcess(): void {
    if (processTimer || stopped) return;
    processTimer = setTimeout(() => { processTimer = null; void processNow(); }, lockedOut ? 50 : processDelayMs);
  }

  const app = await buildServer({
    store, metrics, logger: log, tokens,
    bodyLimitBytes: opts.bodyLimitBytes ?? WIRE_LIMITS.defaultBodyLimitBytes,
    rateLimit: opts.rateLimit ?? { perSecond: 20, burst: 60 },
    missedHeartbeats,
    heartbeatIntervalSeconds: (opts.heartbeatIntervalMs ?? 30_000) / 1000,
    onEvents: scheduleProcess,
    dashboard: opts.dashboard,
  });

  const tick = setInterval(() => { void processNow(); }, opts.tickMs ?? 1000);
  tick.unref();
  const retentionMs = opts.retentionMs ?? 14 * 86_400_000;
  const runRetention = async () => {
    try {
      const r = await store.retention(Date.now(), retentionMs);
      if (Object.values(r).some((n) => n > 0)) log.info(r, 'retention: removed old rows');
    } catch (e) {
      log.warn({ err: (e as Error).message }, 'retention failed');
    }
  };
  const retention = setInterval(() => { void runRetention(); }, opts.retentionEveryMs ?? 3_600_000);
  retention.unref();

  try {
    await app.listen({ host, port });
  } catch (e) {
    clearInterval(tick); clearInterval(retention);
    if (ownStore) await store.close().catch(() => undefined);
    throw e;
  }
  const addr = app.server.address();
  const boundPort = typeof addr === 'object' && addr ? addr.port : port;
  const urlHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
  const url = `http://${urlHost}:${boundPort}`;
  outbox.start();
  void processNow();
  void runRetention();

  if (!tokens.length) log.warn('no --token-file: ingest endpoints accept unauthenticated requests');
  if ((opts.webhooks ?? []).length && !webhookSecret) log.warn('webhooks configured without --webhook-secret-file: deliveries are unsigned');
  log.info({
    listening: url, store: ownStore ? describeDb(db) : store.kind,
    notifiers: notifiers.map((n) => ({ name: n.name, kind: n.kind })),
    // hosts only: webhook URLs carry secrets in their paths
    notifierHosts: [opts.slackWebhook, ...(opts.webhooks ?? []), opts.alertmanager].filter((u): u is string => !!u).map(safeHost),
  }, 'collector listening');

  let stopping: Promise<void> | null = null;
  return {
    url, port: boundPort, app, store, metrics, notifiers: notifierNames, instanceId,
    processNow,
    deliverNow: async () => { await outbox.drainOnce(); },
    onNotice: (fn) => { listeners.add(fn); return () => listeners.delete(fn); },
    stop: () => {
      stopping ??= (async () => {
        stopped = true;
        clearInterval(tick);
        clearInterval(retention);
        if (processTimer) clearTimeout(processTimer);
        await app.close();
        await processing?.catch(() => undefined);
        await outbox.stop();
        if (ownStore) await store.close();
      })();
      return stopping;
    },
  };
}
