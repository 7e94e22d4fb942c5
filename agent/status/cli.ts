import type { Command } from 'commander';
import { z } from 'zod';
import { envOption } from '../../cli/options.js';
import type { PullRecord } from '../model/pulls.js';
import { renderStatus, toStatusJson } from './render.js';

const PullsResponse = z.object({
  node: z.string().optional(),
  pulls: z.array(z.object({ image: z.string(), state: z.string(), layers: z.array(z.unknown()) }).passthrough()),
});

async function fetchPulls(agentUrl: string): Promise<{ node?: string; pulls: PullRecord[] }> {
  const res = await fetch(new URL('/v1/pulls', agentUrl), { signal: AbortSignal.timeout(5000) });
  if (!res.ok) throw new Error(`agent answered HTTP ${res.status}`);
  const parsed = PullsResponse.safeParse(await res.json());
  if (!parsed.success) throw new Error(`agent answered an unexpected shape: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
  return parsed.data as unknown as { node?: string; pulls: PullRecord[] };
}

export function registerStatus(program: Command): void {
  program
    .command('status')
    .description('in-flight pulls of the local agent with progress bars (--json for machines)')
    .addOption(envOption('--agent-url <url>', 'the local agent', 'http://127.0.0.1:9090'))
    .addOption(envOption('--json', 'print {"pulls":[…]} once and exit'))
    .addOption(envOption('--once', 'print one frame and exit (default when stdout is not a terminal)'))
    .addOption(envOption('--interval <seconds>', 'refresh interval of the live view', '1'))
    .action(async (flags: { agentUrl: string; json?: boolean; once?: boolean; interval: string }) => {
      const live = !flags.json && !flags.once && process.stdout.isTTY;
      const frame = async (): Promise<boolean> => {
        let data: { node?: string; pulls: PullRecord[] };
        try {
          data = await fetchPulls(flags.agentUrl);
        } catch (err) {
          process.stderr.write(`pullwatch status: cannot read ${flags.agentUrl}/v1/pulls: ${(err as Error).message}\n`);
          return false;
        }
        if (flags.json) {
          process.stdout.write(`${JSON.stringify(toStatusJson(data.pulls))}\n`);
        } else {
          const text = renderStatus(data.pulls, { color: Boolean(process.stdout.isTTY), width: process.stdout.columns ?? 100, node: data.node });
          process.stdout.write(live ? `\x1b[H\x1b[2J${text}\n` : `${text}\n`);
        }
        return true;
      };
      if (!live) {
        if (!(await frame())) process.exitCode = 1;
        return;
      }
      const everyMs = Math.max(Number(flags.interval) || 1, 0.2) * 1000;
      let stop = false;
      process.once('SIGINT', () => { stop = true; });
      while (!stop) {
        await frame();
        await new Promise((r) => setTimeout(r, everyMs));
      }
    });
}
