/**
 * Pull history for the recommendation: from the local agent (GET /v1/pulls?all=1) or a JSON file
 * of the same shape ({ pulls: PullRecord[] }). An unreachable agent is not an error: the plan says
 * so and falls back to the default.
 */
import { readFile } from 'node:fs/promises';
import { historySchema, TuneError, type HistoryInfo, type HistoryPull } from './types.js';

export interface HistoryResult { pulls: HistoryPull[] | null; info: HistoryInfo }

function validate(body: unknown, where: string): HistoryPull[] {
  const r = historySchema.safeParse(body);
  if (!r.success) {
    const first = r.error.issues[0];
    throw new TuneError(`${where}: not a pull history ({ pulls: PullRecord[] }): ${first ? `${first.path.join('.')}: ${first.message}` : 'invalid'}`, 'bad-history');
  }
  return r.data.pulls as HistoryPull[];
}

export async function historyFromFile(file: string): Promise<HistoryResult> {
  let text: string;
  try { text = await readFile(file, 'utf8'); } catch (e) { throw new TuneError(`--history ${file}: ${(e as Error).message}`, 'bad-history'); }
  let body: unknown;
  try { body = JSON.parse(text); } catch (e) { throw new TuneError(`--history ${file}: malformed JSON: ${(e as Error).message}`, 'bad-history'); }
  const pulls = validate(body, `--history ${file}`);
  return { pulls, info: { source: 'file', note: `${pulls.length} pulls from ${file}`, pulls: pulls.length } };
}

export async function historyFromAgent(agentUrl: string, timeoutMs = 3000): Promise<HistoryResult> {
  let res: Response;
  try {
    res = await fetch(new URL('/v1/pulls?all=1', agentUrl), { signal: AbortSignal.timeout(timeoutMs) });
  } catch {
    return { pulls: null, info: { source: 'none', note: 'no history (agent unreachable)', pulls: 0 } };
  }
  if (!res.ok) return { pulls: null, info: { source: 'none', note: `no history (agent answered HTTP ${res.status})`, pulls: 0 } };
  try {
    const pulls = validate(await res.json(), `${agentUrl}/v1/pulls`);
    return { pulls, info: { source: 'agent', note: `${pulls.length} pulls from the local agent`, pulls: pulls.length } };
  } catch (e) {
    return { pulls: null, info: { source: 'none', note: `no history (agent returned invalid data: ${(e as Error).message})`, pulls: 0 } };
  }
}

const IN_FLIGHT = new Set(['downloading', 'slow', 'stalled', 'unpacking']);

/** Number of pulls in flight according to the local agent; throws TuneError when it cannot tell. */
export async function inFlightPulls(agentUrl: string, timeoutMs = 3000): Promise<number> {
  let res: Response;
  try {
    res = await fetch(new URL('/v1/pulls', agentUrl), { signal: AbortSignal.timeout(timeoutMs) });
  } catch (e) {
    throw new TuneError(`cannot ask the local agent at ${agentUrl} whether a pull is in flight (${(e as Error).message}); refusing to restart (use --force to restart anyway)`, 'agent-unreachable');
  }
  if (!res.ok) throw new TuneError(`agent at ${agentUrl} answered HTTP ${res.status}; refusing to restart (use --force)`, 'agent-unreachable');
  const pulls = validate(await res.json(), `${agentUrl}/v1/pulls`);
  return pulls.filter((p) => IN_FLIGHT.has(p.state)).length;
}
