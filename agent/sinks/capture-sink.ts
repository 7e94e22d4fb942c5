import { execFile } from 'node:child_process';
import { open } from 'node:fs/promises';
import { promisify } from 'node:util';
import type { Logger } from '../../common/log.js';
import { formatDuration } from '../../common/duration.js';
import type { StallCapture } from '../capture/capture.js';
import type { Transition } from '../model/pulls.js';
import { parseLogSourceSpec } from '../sources/logs/index.js';
import type { TunePlan } from '../tune/types.js';
import type { Sink } from './sink.js';

const run = promisify(execFile);
const WIRE_CAPTURE_BUDGET = 56 * 1024;

export interface CaptureSinkOptions {
  hostRoot: string;
  containerdRoot?: string;
  containerdSocket?: string;
  /** Where captures are kept for the next bundle (newest 100). */
  dir: string;
  /** The agent's --log-source values: where kubelet/runtime lines for the window come from. */
  logSources: string[];
  logger: Logger;
  timeoutMs?: number;
  /** The node's tune plan, for "what the agent recommends" in alerts. */
  tunePlan?: () => Promise<TunePlan>;
  /** Ships the capture with a stall event (the collector client). */
  deliver?: (t: Transition, capture: Record<string, unknown>) => void;
}

/** Kubelet/runtime lines since a time, from the same places the agent reads its logs. */
export function logLinesFrom(specs: string[], hostRoot: string): (sinceMs: number) => Promise<string[]> {
  return async (sinceMs) => {
    const out: string[] = [];
    for (const raw of specs) {
      let spec;
      try { spec = parseLogSourceSpec(raw); } catch { continue; }
      if (spec.kind === 'file') {
        const fh = await open(spec.path, 'r').catch(() => undefined);
        if (!fh) continue;
        try {
          const { size } = await fh.stat();
          const len = Math.min(size, 256 * 1024);
          const buf = Buffer.alloc(len);
          await fh.read(buf, 0, len, size - len);
          out.push(...buf.toString('utf8').split('\n').filter((l) => /pull|image/i.test(l)));
        } finally { await fh.close(); }
      } else {
        const where = spec.directory ? ['--directory', spec.directory] : hostRoot !== '/' ? ['--root', hostRoot] : [];
        const units = ['kubelet', 'containerd', 'crio', 'docker'].flatMap((u) => ['-u', u]);
        const r = await run('journalctl', [...where, ...units, '--since', `@${Math.floor(sinceMs / 1000)}`, '-o', 'short-iso-precise', '--utc', '--no-pager', '-n', '2000'],
          { timeout: 5000, maxBuffer: 8 * 1024 * 1024 }).catch(() => ({ stdout: '' }));
        out.push(...r.stdout.split('\n').filter((l) => /pull|image/i.test(l)));
      }
    }
    return out;
  };
}

/** The capture as it travels to the collector: bounded (the wire allows 64 KiB), recommendation added. */
export function wireCapture(c: StallCapture, recommendation?: { ms: number; text: string }): Record<string, unknown> {
  const compact: Record<string, unknown> = {
    ...c,
    ingests: { ...c.ingests, entries: c.ingests.entries.slice(0, 50) },
    logs: c.logs ? { ...c.logs, lines: c.logs.lines.slice(-40).map((l) => l.slice(0, 500)) } : null,
    ...(recommendation ? { recommendedDeadlineMs: recommendation.ms, recommendation: recommendation.text } : {}),
  };
  while (JSON.stringify(compact).length > WIRE_CAPTURE_BUDGET) {
    const logs = compact.logs as { lines: string[] } | null;
    if (logs && logs.lines.length) { logs.lines = logs.lines.slice(Math.ceil(logs.lines.length / 2)); continue; }
    const ing = compact.ingests as { entries: unknown[] };
    if (ing.entries.length) { ing.entries = ing.entries.slice(0, Math.floor(ing.entries.length / 2)); continue; }
    return { kind: c.kind, version: c.version, pullId: c.pullId, capturedAt: c.capturedAt, truncated: true };
  }
  return compact;
}

/**
 * Capture on stall: the first time a pull stalls, record its ingest/unpack state, the kubelet and
 * runtime lines of its window and a probe of its registry; keep it for the next bundle and send it
 * to the collector with the stall. Runs in the background, one at a time, at most once per pull.
 */
export function createCaptureSink(o: CaptureSinkOptions): Sink {
  const done = new Set<string>();
  let chain: Promise<void> = Promise.resolve();
  let closed = false;
  return {
    name: 'capture',
    handle(t: Transition): void {
      if (closed || t.kind !== 'stalled' || t.from === t.to || done.has(t.pull.id)) return;
      done.add(t.pull.id);
      if (done.size > 1000) done.delete(done.values().next().value as string);
      chain = chain.then(async () => {
        const [{ captureOnStall }, { saveCapture }] = await Promise.all([import('../capture/capture.js'), import('../capture/store.js')]);
        const capture = await captureOnStall(t.pull, {
          hostRoot: o.hostRoot, containerdRoot: o.containerdRoot, logger: o.logger, timeoutMs: o.timeoutMs ?? 20_000,
          logLines: logLinesFrom(o.logSources, o.hostRoot),
          ...(o.containerdSocket ? { ctr: { binary: 'ctr', socket: o.containerdSocket } } : {}),
        });
        await saveCapture(o.dir, capture).catch((err: unknown) => o.logger.warn({ err: (err as Error).message }, 'cannot save stall capture'));
        let rec: { ms: number; text: string } | undefined;
        const plan = await o.tunePlan?.().catch(() => undefined);
        if (plan) rec = { ms: plan.deadline.valueMs, text: `pull progress deadline ${formatDuration(plan.deadline.valueMs)} (${plan.deadline.basis}: ${plan.deadline.reason})` };
        if (!closed) o.deliver?.(t, wireCapture(capture, rec));
        o.logger.info({ image: t.pull.image, pullId: t.pull.id, probe: capture.probe.steps.map((s) => `${s.name}:${s.ok ? 'ok' : s.skipped ? 'skipped' : 'failed'}`) }, 'stall captured');
      }).catch((err: unknown) => o.logger.warn({ err: (err as Error).message }, 'stall capture failed'));
    },
    async close(): Promise<void> {
      // A capture in progress (probes are bounded by timeoutMs) is not waited for: shutdown stays quick.
      closed = true;
    },
  };
}
