import type { Command } from 'commander';

/** `pullwatch agent` — not built yet. */
export function registerAgent(program: Command): void {
  program.command('agent').description('(agent: not built yet)').action(() => {
    process.stderr.write('pullwatch agent: not built yet\n');
    process.exitCode = 2;
  });
}
