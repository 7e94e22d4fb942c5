import { createWriteStream } from 'node:fs';
import { Option, type Command } from 'commander';
import { envOption, durationArg, bytesArg } from '../../cli/options.js';
import { createLogger } from '../../common/log.js';
import { formatBytes } from '../../common/bytes.js';
import { pullwatchVersion } from '../../cli/version.js';
import { writeBundle, type BundleOptions } from './bundle.js';
import { DEFAULT_CAPTURES_DIR } from '../capture/store.js';

interface BundleFlags {
  output: string;
  since: number;
  until?: string;
  hostRoot: string;
  commandTimeout: number;
  fileCap: number;
  redact: boolean;
  containerdRoot?: string;
  containerdSocket?: string;
  agentUrl?: string;
  capturesDir: string;
  goroutines: boolean;
  journalDir?: string;
  exec: 'auto' | 'nsenter' | 'local';
  only?: string[];
  progress: boolean;
  gzipLevel: string;
}

/** "6h" (ago), an ISO time, or epoch seconds → epoch ms. */
export function parseTimeArg(value: string, now: number): number {
  const v = value.trim();
  if (/^\d{4}-\d\d-\d\d/.test(v)) {
    const t = Date.parse(v);
    if (Number.isNaN(t)) throw new Error(`invalid time "${value}"`);
    return t;
  }
  if (/^@?\d+$/.test(v)) return Number(v.replace('@', '')) * 1000;
  return now - durationArg(v);
}

/** `pullwatch bundle`: a redacted diagnostics tar.gz streamed to a file or stdout. */
export function registerBundle(program: Command): void {
  program.command('bundle')
    .description('stream a redacted diagnostics bundle (tar.gz) of this node: OS, kubelet, runtime, network, pullwatch')
    .addOption(envOption('-o, --output <file>', 'output file, or - for stdout (for kubectl exec)', 'pullwatch-bundle.tar.gz'))
    .addOption(envOption('--since <time>', 'start of the window: a duration ago (6h), an ISO time or @epoch', '6h'))
    .addOption(envOption('--until <time>', 'end of the window (default now)'))
    .addOption(envOption('--host-root <dir>', 'where the host\'s filesystem is', '/'))
    .addOption(envOption('--command-timeout <duration>', 'timeout per command (the process group is killed)', '30s').argParser(durationArg))
    .addOption(envOption('--file-cap <size>', 'max bytes per item (the tail is kept)', '100MiB').argParser(bytesArg))
    .addOption(new Option('--no-redact', 'do NOT mask secrets (recorded in the manifest)'))
    .addOption(envOption('--containerd-root <dir>', 'containerd root as this process sees it (default <host-root>/var/lib/containerd)'))
    .addOption(envOption('--containerd-socket <path>', 'containerd socket for ctr (default /run/containerd/containerd.sock on the host)'))
    .addOption(envOption('--agent-url <url>', 'the local agent (for /v1/pulls and /v1/tune)', 'http://127.0.0.1:9090'))
    .addOption(envOption('--captures-dir <dir>', 'where the agent saves stall captures', DEFAULT_CAPTURES_DIR))
    .addOption(envOption('--goroutines', 'send SIGUSR1 to containerd to dump goroutine stacks', false))
    .addOption(envOption('--journal-dir <dir>', 'read journals from this directory (journalctl --directory)'))
    .addOption(envOption('--exec <mode>', 'how to run host tools: auto, nsenter, local', 'auto'))
    .addOption(new Option('--only <prefix...>', 'only items whose archive path starts with one of these'))
    .addOption(envOption('--gzip-level <n>', 'gzip level 1 (fast) .. 9 (small); zlib 5 ≈ the size of gzip -6, faster', '5'))
    .addOption(envOption('--progress', 'progress on stderr (default: when stderr is a terminal)', false))
    .action(async (flags: BundleFlags) => {
      const logger = createLogger({ name: 'bundle' });
      const now = Date.now();
      let sinceMs: number; let untilMs: number;
      try {
        untilMs = flags.until ? parseTimeArg(flags.until, now) : now;
        sinceMs = typeof flags.since === 'number' ? flags.since : parseTimeArg(String(flags.since), now);
      } catch (e) {
        process.stderr.write(`pullwatch bundle: ${(e as Error).message}\n`);
        process.exitCode = 2;
        return;
      }
      if (!['auto', 'nsenter', 'local'].includes(flags.exec)) {
        process.stderr.write(`pullwatch bundle: --exec must be auto, nsenter or local\n`);
        process.exitCode = 2;
        return;
      }
      const gzipLevel = Number(flags.gzipLevel);
      if (!Number.isInteger(gzipLevel) || gzipLevel < 1 || gzipLevel > 9) {
        process.stderr.write('pullwatch bundle: --gzip-level must be 1..9\n');
        process.exitCode = 2;
        return;
      }
      const toStdout = flags.output === '-';
      if (toStdout && process.stdout.isTTY) {
        process.stderr.write('pullwatch bundle: refusing to write a tar.gz to a terminal; use -o FILE or redirect stdout\n');
        process.exitCode = 2;
        return;
      }
      const out = toStdout ? process.stdout : createWriteStream(flags.output, { mode: 0o600 });
      const progress = flags.progress || process.stderr.isTTY === true;
      let items = 0;
      const opts: BundleOptions = {
        hostRoot: flags.hostRoot, sinceMs, untilMs, fileCap: flags.fileCap, commandTimeoutMs: flags.commandTimeout,
        redact: flags.redact, exec: flags.exec, gzipLevel, goroutines: flags.goroutines, capturesDir: flags.capturesDir,
        version: pullwatchVersion(),
        ...(flags.containerdRoot ? { containerdRoot: flags.containerdRoot } : {}),
        ...(flags.containerdSocket ? { containerdSocket: flags.containerdSocket } : {}),
        ...(flags.agentUrl ? { agentUrl: flags.agentUrl } : {}),
        ...(flags.journalDir ? { journalDir: flags.journalDir } : {}),
        ...(flags.only ? { only: flags.only } : {}),
        ...(progress ? { onItem: (item, bytes) => { items++; process.stderr.write(`\r\x1b[K${items} items, ${formatBytes(bytes)}: ${item.status} ${item.path.slice(0, 60)}`); } } : {}),
      };
      try {
        const m = await writeBundle(opts, out, logger);
        if (progress) process.stderr.write('\n');
        const s = m.totals.byStatus;
        process.stderr.write(`pullwatch bundle: ${m.totals.archived} files, ${formatBytes(m.totals.bytes)} before compression, ` +
          `${Object.entries(s).map(([k, v]) => `${v} ${k}`).join(', ')}; redacted ${Object.values(m.totals.redactions).reduce((a, b) => a + (b ?? 0), 0)} secrets` +
          `${toStdout ? '' : ` → ${flags.output}`}\n`);
      } catch (e) {
        process.stderr.write(`pullwatch bundle: ${(e as Error).message}\n`);
        process.exitCode = 1;
      }
    });
}
