import type { Command } from 'commander';

/** `pullwatch tune` — not built yet. */
export function registerTune(program: Command): void {
  program.command('tune').description('(tune: not built yet)').action(() => {
    process.stderr.write('pullwatch tune: not built yet\n');
    process.exitCode = 2;
  });
}
