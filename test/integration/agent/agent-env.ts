/**
 * Starts the real agent (startAgent) against harness components and reads what it reports the
 * way users and the CLI do: GET /v1/pulls, plus the transition log lines it writes.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '../../../common/log.js';
import { startAgent, type AgentOptions, type RunningAgent } from '../../../agent/run.js';
import type { PullRecord } from '../../../agent/model/pulls.js';
import type { RunningContainerd } from '../../harness/containerd.js';
import type { RunningDockerd } from '../../harness/dockerd.js';
import { waitFor } from '../../harness/wait.js';

export interface LogLine {
  level: number;
  msg: string;
  transition?: string;
  image?: string;
  [k: string]: unknown;
}

export interface TestAgent {
  agent: RunningAgent;
  /** Every JSON log line the agent wrote. */
  lines: LogLine[];
  /** Transition lines ("pull stalled: …") in order. */
  transitions(image?: string): LogLine[];
  /** GET /v1/pulls (all=true adds finished pulls). */
  pulls(all?: boolean): Promise<PullRecord[]>;
  /** Polls /v1/pulls until `pick` returns a record. */
  waitPull(what: string, pick: (p: PullRecord) => boolean, opts?: { timeoutMs?: number; all?: boolean }): Promise<PullRecord>;
  stop(): Promise<void>;
}

export async function startTestAgent(o: {
  containerd?: RunningContainerd;
  dockerd?: RunningDockerd;
  stallAfterMs: number;
  slowBelowBytesPerSecond?: number;
  pollMs?: number;
  logSources?: string[];
}): Promise<TestAgent> {
  const lines: LogLine[] = [];
  let partial = '';
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      partial += chunk.toString('utf8');
      let nl: number;
      while ((nl = partial.indexOf('\n')) >= 0) {
        const line = partial.slice(0, nl);
        partial = partial.slice(nl + 1);
        try {
          lines.push(JSON.parse(line) as LogLine);
        } catch {
          lines.push({ level: 0, msg: line });
        }
      }
      cb();
    },
  });
  const logger = createLogger({ level: 'debug', name: 'agent-under-test', destination: sink });
  // An empty host root: this machine runs several runtimes for several tests at once, so the
  // agent must learn about its runtime from the sockets/dirs it is given, not from host binaries
  // and configs (the tune planner probes those under --host-root).
  const hostRoot = await mkdtemp(join(tmpdir(), 'pw-agent-host-'));
  const opts: AgentOptions = {
    hostRoot,
    containerdRoot: o.containerd?.root,
    containerdSocket: o.containerd?.socket,
    dockerRoot: o.dockerd?.dataRoot,
    dockerSocket: o.dockerd?.socket,
    logSources: o.logSources ?? (o.containerd ? [`file:${o.containerd.logFile}`] : []),
    stallAfterMs: o.stallAfterMs,
    slowBelowBytesPerSecond: o.slowBelowBytesPerSecond ?? 64 * 1024,
    pollMs: o.pollMs ?? 250,
    listen: '127.0.0.1:0',
    nodeName: 'harness-node',
    kube: 'off',
  };
  const agent = await startAgent(opts, logger);
  const pulls = async (all = false): Promise<PullRecord[]> => {
    const res = await fetch(`${agent.url}/v1/pulls${all ? '?all=1' : ''}`);
    if (res.status !== 200) throw new Error(`/v1/pulls: HTTP ${res.status}`);
    const body = (await res.json()) as { pulls: PullRecord[] };
    return body.pulls;
  };
  return {
    agent,
    lines,
    transitions: (image) => lines.filter((l) => typeof l.transition === 'string' && (image === undefined || l.image === image)),
    pulls,
    async waitPull(what, pick, w = {}) {
      return waitFor(async () => (await pulls(w.all ?? false)).find(pick), {
        timeoutMs: w.timeoutMs ?? 30_000,
        intervalMs: 100,
        what: `${what} in ${agent.url}/v1/pulls`,
      }).catch(async (err: unknown) => {
        const seen = JSON.stringify(await pulls(true).catch(() => []), null, 1).slice(0, 4000);
        throw new Error(`${(err as Error).message}\nall pulls: ${seen}`, { cause: err });
      });
    },
    async stop() {
      await agent.stop();
      await rm(hostRoot, { recursive: true, force: true });
    },
  };
}
