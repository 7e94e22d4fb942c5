import type { Command } from 'commander';

/** `pullwatch bundle` — not built yet. */
export function registerBundle(program: Command): void {
  program.command('bundle').description('(bundle: not built yet)').action(() => {
    process.stderr.write('pullwatch bundle: not built yet\n');
    process.exitCode = 2;
  });
}
