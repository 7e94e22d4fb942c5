import { Command, CommanderError } from 'commander';
import { pullwatchVersion } from './version.js';
import { registerAgent } from '../agent/cli.js';
import { registerStatus } from '../agent/status/cli.js';
import { registerCollector } from '../collector/cli.js';
import { registerStart } from './start.js';
import { registerBundle } from '../agent/bundle/cli.js';
import { registerTune } from '../agent/tune/cli.js';

export function buildProgram(): Command {
  const program = new Command('pullwatch')
    .description('See every image pull\'s real byte progress on Kubernetes nodes; detect stalled and crawling pulls.')
    .version(pullwatchVersion(), '-V, --version')
    .showHelpAfterError()
    .enablePositionalOptions();
  registerAgent(program);
  registerCollector(program);
  registerStart(program);
  registerStatus(program);
  registerBundle(program);
  registerTune(program);
  return program;
}

export async function main(argv: string[]): Promise<void> {
  const program = buildProgram();
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
