import type { Command } from 'commander';

/** `pullwatch start` — not built yet. */
export function registerStart(program: Command): void {
  program.command('start').description('(start: not built yet)').action(() => {
    process.stderr.write('pullwatch start: not built yet\n');
    process.exitCode = 2;
  });
}
