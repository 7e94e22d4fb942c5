import { formatBytes } from '../../common/bytes.js';
import type { PullRecord } from '../model/pulls.js';

/** The stable machine shape of `pullwatch status --json` (documented in README). */
export interface StatusJson {
  pulls: Array<{
    image: string; registry: string; state: string; idleSeconds: number;
    layers: Array<{ digest: string; bytesDone: number; bytesTotal: number | null }>;
    pods: string[];
  }>;
}

export function toStatusJson(pulls: PullRecord[]): StatusJson {
  return {
    pulls: pulls.map((p) => ({
      image: p.image,
      registry: p.registry,
      state: p.state,
      idleSeconds: p.idleSeconds,
      layers: p.layers.map((l) => ({ digest: l.digest, bytesDone: l.bytesDone, bytesTotal: l.bytesTotal })),
      pods: p.pods.map((x) => `${x.namespace}/${x.name}`),
    })),
  };
}

const STATE_COLOR: Record<string, string> = {
  stalled: '\x1b[31m', slow: '\x1b[33m', 'cancelled-by-runtime': '\x1b[31m', failed: '\x1b[31m',
  downloading: '\x1b[36m', unpacking: '\x1b[35m', completed: '\x1b[32m',
};
const RESET = '\x1b[0m';

export function progressBar(done: number, total: number | null, width: number): string {
  if (total === null || total <= 0) return `[${'?'.repeat(width)}]`;
  const frac = Math.min(Math.max(done / total, 0), 1);
  const full = Math.floor(frac * width);
  return `[${'#'.repeat(full)}${full < width ? '>' : ''}${' '.repeat(Math.max(width - full - 1, 0))}]`;
}

function shortDigest(d: string): string {
  const m = /^(sha256:)?([0-9a-f]{12})/.exec(d);
  return m ? `${m[1] ?? ''}${m[2]}` : d.slice(0, 19);
}

/** A terminal frame: one block per pull, one progress bar per blob in flight. Pure. */
export function renderStatus(pulls: PullRecord[], opts: { color: boolean; width: number; node?: string }): string {
  const c = (state: string, s: string) => (opts.color ? `${STATE_COLOR[state] ?? ''}${s}${RESET}` : s);
  const barWidth = Math.max(10, Math.min(40, opts.width - 70));
  const lines: string[] = [];
  lines.push(`pullwatch status${opts.node ? ` — node ${opts.node}` : ''} — ${pulls.length} pull(s) in flight`);
  if (!pulls.length) lines.push('  (no pulls in flight)');
  for (const p of pulls) {
    const total = p.bytesTotal === null ? '?' : formatBytes(p.bytesTotal);
    lines.push('');
    lines.push(`${c(p.state, p.state.toUpperCase().padEnd(10))} ${p.image}`);
    lines.push(`  ${formatBytes(p.bytesDone)} of ${total}  rate ${formatBytes(p.rateBytesPerSecond)}/s  idle ${p.idleSeconds.toFixed(0)}s  runtime ${p.runtime.name}${p.runtime.version ? ` ${p.runtime.version}` : ''}`);
    if (p.pods.length) lines.push(`  waiting: ${p.pods.map((x) => `${x.namespace}/${x.name}`).join(', ')}`);
    if (p.cancel) lines.push(`  cancelled by ${p.cancel.by}: ${p.cancel.lastProgress}`);
    for (const l of p.layers) {
      const pct = l.bytesTotal ? `${Math.floor((100 * l.bytesDone) / l.bytesTotal)}%`.padStart(4) : '  ?%';
      lines.push(`  ${shortDigest(l.digest).padEnd(19)} ${progressBar(l.bytesDone, l.bytesTotal, barWidth)} ${pct} ${formatBytes(l.bytesDone).padStart(8)} ${c(l.state, l.state.padEnd(11))} ${l.state === 'committed' ? '' : `${formatBytes(l.rateBytesPerSecond)}/s idle ${l.idleSeconds.toFixed(0)}s`}`);
    }
  }
  return lines.join('\n');
}
