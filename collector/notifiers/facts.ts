/** The facts every alert shows, computed once from an incident (pure). */
import { formatBytes } from '../../common/bytes.js';
import { formatDuration } from '../../common/duration.js';
import type { Incident, IncidentMember, Notice } from '../model.js';

export interface IncidentFacts {
  title: string;
  images: string[];
  registry?: string;
  nodes: string[];
  nodeCount: number;
  bytesDone: number;
  bytesTotal: number | null;
  /** "40.0 MB / 88.3 MB (45%)" */
  bytesText: string;
  /** Seconds since bytes last arrived on the longest-stalled member. */
  stalledForSeconds: number | null;
  stalledForText: string;
  pods: string[];
  runtime?: string;
  /** The runtime's pull-progress deadline: ms, null = none, undefined = unknown. */
  deadlineMs?: number | null;
  deadlineText: string;
  recommendation?: string;
}

const LIST = 10;

export function incidentFacts(notice: Notice): IncidentFacts {
  const inc = notice.incident;
  const nowMs = Date.parse(notice.at);
  const active = inc.members.filter((m) => m.active);
  const ms: IncidentMember[] = active.length ? active : inc.members;
  const images = uniq(ms.map((m) => m.image));
  const bytesDone = ms.reduce((s, m) => s + m.bytesDone, 0);
  const totals = ms.map((m) => m.bytesTotal);
  const bytesTotal = totals.length && totals.every((t) => t !== null) ? totals.reduce((s: number, t) => s + (t ?? 0), 0) : null;
  const lastProgress = ms.map((m) => Date.parse(m.lastProgressAt)).filter(Number.isFinite);
  const stalledForSeconds = lastProgress.length && inc.kind !== 'agent-down' ? Math.max(0, Math.round((nowMs - Math.min(...lastProgress)) / 1000)) : null;
  const pods = uniq(ms.flatMap((m) => m.pods.map((p) => `${p.namespace}/${p.name}`)));
  const deadlines = ms.map((m) => m.runtimeDeadlineMs);
  const deadlineMs = deadlines.find((d) => d !== undefined && d !== null) ?? (deadlines.some((d) => d === null) ? null : undefined);
  const rt = ms[0]?.runtime;
  const runtime = rt ? `${rt.name}${rt.version ? ` ${rt.version}` : ''}` : undefined;
  const recommendation = ms.find((m) => m.recommendation)?.recommendation ?? defaultRecommendation(inc, deadlineMs);
  const facts: IncidentFacts = {
    title: titleOf(notice),
    images,
    nodes: inc.nodes.slice(0, LIST),
    nodeCount: inc.nodes.length,
    bytesDone, bytesTotal,
    bytesText: inc.kind === 'agent-down' ? 'n/a' : `${formatBytes(bytesDone)} / ${bytesTotal === null ? 'unknown' : formatBytes(bytesTotal)}${bytesTotal ? ` (${Math.floor((bytesDone / bytesTotal) * 100)}%)` : ''}`,
    stalledForSeconds,
    stalledForText: stalledForSeconds === null ? 'n/a' : formatDuration(stalledForSeconds * 1000),
    pods: pods.slice(0, LIST),
    deadlineText: deadlineMs === undefined ? 'unknown' : deadlineMs === null || deadlineMs <= 0 ? 'none: the runtime never cancels a stalled pull' : formatDuration(deadlineMs),
  };
  if (inc.registry) facts.registry = inc.registry;
  if (runtime) facts.runtime = runtime;
  if (deadlineMs !== undefined) facts.deadlineMs = deadlineMs;
  if (recommendation) facts.recommendation = recommendation;
  return facts;
}

function defaultRecommendation(inc: Incident, deadlineMs: number | null | undefined): string | undefined {
  if (inc.kind === 'agent-down') return 'check the pullwatch DaemonSet pod on this node (kubectl -n pullwatch get pods -o wide)';
  if (inc.kind === 'registry') return `check ${inc.registry}: several nodes stall pulling from it (registry, mirror, or network path)`;
  if (deadlineMs === null) return 'the runtime has no pull-progress deadline here; run `pullwatch tune plan` on the node for one based on measured pulls';
  return undefined;
}

export function titleOf(notice: Notice): string {
  const inc = notice.incident;
  const prefix = notice.type === 'resolved' ? 'Resolved' : notice.type === 'update' ? 'Update' : 'Firing';
  return `[${prefix}] ${inc.summary}`;
}

function uniq(xs: string[]): string[] { return [...new Set(xs)]; }
