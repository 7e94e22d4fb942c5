import type { Command } from 'commander';

/** `pullwatch collector` — not built yet. */
export function registerCollector(program: Command): void {
  program.command('collector').description('(collector: not built yet)').action(() => {
    process.stderr.write('pullwatch collector: not built yet\n');
    process.exitCode = 2;
  });
}
