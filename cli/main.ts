import { Command, CommanderError } from 'commander';
import { pullwatchVersion } from './version.js';

type Register = (program: Command) => void;

/**
 * Subcommands, loaded on demand: `pullwatch agent` must not pay (in start time and resident
 * memory, on every node) for the collector's database drivers or the bundle's archive code.
 */
const COMMANDS: Record<string, () => Promise<Register>> = {
  agent: async () => (await import('../agent/cli.js')).registerAgent,
  collector: async () => (await import('../collector/cli.js')).registerCollector,
  start: async () => (await import('./start.js')).registerStart,
  status: async () => (await import('../agent/status/cli.js')).registerStatus,
  bundle: async () => (await import('../agent/bundle/cli.js')).registerBundle,
  tune: async () => (await import('../agent/tune/cli.js')).registerTune,
};

export async function buildProgram(argv: string[] = []): Promise<Command> {
  const program = new Command('pullwatch')
    .description('See every image pull\'s real byte progress on Kubernetes nodes; detect stalled and crawling pulls.')
    .version(pullwatchVersion(), '-V, --version')
    .showHelpAfterError()
    .enablePositionalOptions();
  const sub = argv[2];
  const names = sub && sub in COMMANDS ? [sub] : Object.keys(COMMANDS);
  for (const name of names) (await (COMMANDS[name] as () => Promise<Register>)())(program);
  return program;
}

export async function main(argv: string[]): Promise<void> {
  const program = await buildProgram(argv);
  program.exitOverride();
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      process.exitCode = err.exitCode;
      return;
    }
    throw err;
  }
}
