import type { Command } from 'commander';

/** `pullwatch status` — not built yet. */
export function registerStatus(program: Command): void {
  program.command('status').description('(status: not built yet)').action(() => {
    process.stderr.write('pullwatch status: not built yet\n');
    process.exitCode = 2;
  });
}
