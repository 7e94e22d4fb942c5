import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Logger } from '../common/log.js';
import { pullwatchVersion } from '../cli/version.js';
import { PullTracker } from './detector/pull-tracker.js';
import { startAgentHttp } from './http/server.js';
import type { AgentState } from './model/agent-state.js';
import type { PullRecord } from './model/pulls.js';
import { AgentPipeline } from './pipeline.js';
import { createCollectorSink } from './sinks/collector/sink.js';
import { createCaptureSink } from './sinks/capture-sink.js';
import { createLogSink } from './sinks/log-sink.js';
import { createMetrics } from './sinks/metrics.js';
import type { Sink } from './sinks/sink.js';
import { ContainerdIngestSource } from './sources/containerd/ingest-source.js';
import { SourceHealth } from './sources/health.js';
import { createLogSources, LogSourceSpecError } from './sources/logs/index.js';
import type { Source } from './sources/source.js';
import { createTunePlanner } from './tune-planner.js';

/** Options of `pullwatch agent` (and of the agent inside `pullwatch start`). Durations in ms. */
export interface AgentOptions {
  hostRoot: string;
  containerdRoot?: string;
  containerdSocket?: string;
  dockerRoot?: string;
  dockerSocket?: string;
  /** "journal", "journal:DIR" or "file:PATH" entries. */
  logSources: string[];
  stallAfterMs: number;
  slowBelowBytesPerSecond: number;
  pollMs: number;
  collector?: string;
  tokenFile?: string;
  queueDir?: string;
  /** host:port; port 0 picks a free one. */
  listen: string;
  nodeName: string;
  kube: 'auto' | 'off';
  /** A kubeconfig instead of the in-cluster service account (tests, running off-cluster). */
  kubeconfig?: string;
  /** Where stall captures are kept for the bundle (default: captures/ beside the queue dir). */
  capturesDir?: string;
}

export interface RunningAgent {
  /** http://host:port of /healthz, /metrics, /v1/pulls. */
  readonly url: string;
  readonly nodeName: string;
  pulls(): PullRecord[];
  stop(): Promise<void>;
}

export class AgentOptionsError extends Error {}

function validate(o: AgentOptions): void {
  if (!(o.stallAfterMs > 0)) throw new AgentOptionsError('--stall-after must be greater than 0');
  if (!(o.pollMs > 0)) throw new AgentOptionsError('--poll must be greater than 0');
  if (o.pollMs > o.stallAfterMs) throw new AgentOptionsError('--poll must not be longer than --stall-after');
  if (!(o.slowBelowBytesPerSecond >= 0)) throw new AgentOptionsError('--slow-below must be 0 or more');
  if (!o.nodeName) throw new AgentOptionsError('--node-name is empty');
  for (const spec of o.logSources) {
    try { createLogSources([spec]); } catch (err) {
      if (err instanceof LogSourceSpecError) throw new AgentOptionsError(err.message);
      throw err;
    }
  }
  if (o.collector) {
    let u: URL;
    try { u = new URL(o.collector); } catch { throw new AgentOptionsError(`--collector "${o.collector}" is not a URL`); }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new AgentOptionsError('--collector must be http:// or https://');
    if (!o.queueDir) throw new AgentOptionsError('--collector needs --queue-dir');
  }
}

/** Builds the concrete sources for this node from the options. */
async function buildSources(o: AgentOptions, logger: Logger): Promise<Source[]> {
  const sources: Source[] = [];
  if (o.containerdRoot) {
    sources.push(new ContainerdIngestSource({ root: o.containerdRoot, pollMs: o.pollMs, socket: o.containerdSocket }));
  }
  sources.push(...createLogSources(o.logSources, { hostRoot: o.hostRoot, pollMs: Math.min(o.pollMs, 500) }));
  // A Docker data root that Docker really uses (a hostPath mount may have created an empty one).
  if (o.dockerRoot && (existsSync(join(o.dockerRoot, 'image')) || existsSync(join(o.dockerRoot, 'tmp')))) {
    // dockerode (and its ssh stack) is loaded only on Docker nodes: memory is a feature.
    const { DockerTmpSource } = await import('./sources/docker/tmp-source.js');
    sources.push(new DockerTmpSource({ dockerRoot: o.dockerRoot, pollMs: o.pollMs, socket: o.dockerSocket }));
  } else if (o.dockerRoot) {
    logger.debug({ dockerRoot: o.dockerRoot }, 'no Docker data root: Docker source off');
  }
  return sources;
}

/** Starts sources → detector → sinks and the HTTP endpoints. */
export async function startAgent(opts: AgentOptions, logger: Logger): Promise<RunningAgent> {
  validate(opts);
  const now = () => Date.now();
  const health = new SourceHealth(logger);
  const tracker = new PullTracker({ stallAfterMs: opts.stallAfterMs, slowBelowBytesPerSecond: opts.slowBelowBytesPerSecond, now });
  const metrics = createMetrics(tracker, health, opts.nodeName);
  const state: AgentState = {
    nodeName: opts.nodeName,
    agentVersion: pullwatchVersion(),
    pulls: () => tracker.records(true),
    runtime: () => tracker.runtime(),
    sourceErrors: () => health.snapshot().reduce((n, e) => n + e.count, 0),
  };
  const sinks: Sink[] = [createLogSink(logger), metrics.sink];
  let collectorSink: ReturnType<typeof createCollectorSink> | undefined;
  if (opts.collector) {
    collectorSink = createCollectorSink({
      url: opts.collector, tokenFile: opts.tokenFile, queueDir: opts.queueDir as string, state, logger,
    });
    sinks.push(collectorSink);
  }
  const sources = await buildSources(opts, logger);
  const kubeConfig = opts.kubeconfig ?? (process.env.KUBERNETES_SERVICE_HOST ? undefined : null);
  if (opts.kube === 'auto' && kubeConfig !== null) {
    // The Kubernetes client is loaded only when there is a cluster to talk to.
    const kube = await import('./kube/index.js');
    const pods = new kube.PodWatchSource({ nodeName: opts.nodeName, kubeConfig });
    sources.push(pods);
    sinks.push(kube.createKubeEventsSink({
      nodeName: opts.nodeName, kubeConfig, logger: logger.child({ sink: 'kube-events' }),
      podLookup: (ns, name) => pods.lookup(ns, name),
    }));
  } else if (opts.kube === 'auto') {
    logger.info('no in-cluster service account and no --kubeconfig: running without the Kubernetes API');
  }
  const pipeline = new AgentPipeline({ tracker, sources, sinks, health, logger, tickMs: Math.min(opts.pollMs, 1000), now });
  const tune = createTunePlanner({ hostRoot: opts.hostRoot, tracker, observe: (obs) => pipeline.observe(obs), logger });
  // First in line so it is closed before the collector client it delivers to.
  sinks.unshift(createCaptureSink({
    hostRoot: opts.hostRoot, containerdRoot: opts.containerdRoot, containerdSocket: opts.containerdSocket,
    dir: opts.capturesDir ?? (opts.queueDir ? join(dirname(opts.queueDir), 'captures') : '/var/lib/pullwatch/captures'),
    logSources: opts.logSources, logger: logger.child({ sink: 'capture' }), tunePlan: () => tune.plan(),
    ...(collectorSink ? { deliver: collectorSink.handleCapture.bind(collectorSink) } : {}),
  }));
  await pipeline.start();
  collectorSink?.start();
  let http: Awaited<ReturnType<typeof startAgentHttp>>;
  try {
    http = await startAgentHttp({
      listen: opts.listen, tracker, metrics: metrics.registry, nodeName: opts.nodeName, logger, tunePlan: () => tune.plan(),
    });
  } catch (err) {
    tune.stop();
    await pipeline.stop();
    throw err;
  }
  return {
    url: http.url,
    nodeName: opts.nodeName,
    pulls: () => tracker.records(),
    async stop() {
      tune.stop();
      await http.app.close();
      await pipeline.stop();
    },
  };
}
