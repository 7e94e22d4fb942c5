/**
 * Cost of the log sources: parse time per line (pull lines and the ordinary noise around them,
 * plain and as journal JSON), and the CPU a FileLogSource spends following a file that grows by
 * 1,000 lines/s. The writer is a separate process, so this process's CPU time is the follower's.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { silentLogger } from '../common/log.js';
import { FileLogSource } from '../agent/sources/logs/file-source.js';
import { parseJournalLine, parseLogLine } from '../agent/sources/logs/parse/index.js';
import { SourceHealth } from '../agent/sources/health.js';
import type { SourceContext } from '../agent/sources/source.js';

export interface BenchLogsOptions {
  /** Seconds of following at `linesPerSecond` (default 10, or PULLWATCH_BENCH_LOG_SECONDS). */
  seconds?: number;
  linesPerSecond?: number;
  /** Lines parsed for the per-line cost (default 200,000). */
  parseLines?: number;
}

/** Ordinary lines a node writes around pulls (none of them is a pull line). */
const NOISE = [
  'I1121 09:44:10.123456    1234 kubelet.go:2421] "SyncLoop (PLEG): event for pod" pod="default/web-0" event={"ID":"0f6f7f2e","Type":"ContainerStarted","Data":"8a1b"}',
  'I1121 09:44:10.223456    1234 prober.go:107] "Probe failed" probeType="Readiness" pod="default/web-1" podUID="0f6f7f2e-1111" containerName="web" probeResult="failure" output="Get \\"http://10.0.0.7:8080/ready\\": dial tcp 10.0.0.7:8080: connect: connection refused"',
  'time="2026-11-21T09:44:10.778268260Z" level=info msg="ImageCreate event name:\\"sha256:b58f4bc39345002ec3201b4a944a723612a8b58b5c4c15c9e37543e256335c25\\" labels:{key:\\"io.cri-containerd.image\\" value:\\"managed\\"}"',
  'time="2026-11-21T09:44:10.812226326Z" level=info msg="CreateContainer within sandbox \\"79abc1e1ca89ae284e0da7d53cf0de68292b54a9e58653b4ceb09163b7072134\\" for container &ContainerMetadata{Name:web,Attempt:0,}"',
  'time="2026-11-21 09:44:10.194341109Z" level=info msg="Checking image status: registry.example.com/team/web:2.1" id=9fd4db69-a648-421f-9a1c-6b1c2d3e4f50 name=/runtime.v1.ImageService/ImageStatus',
  'E1121 09:44:11.047988  290854 pod_workers.go:1298] "Error syncing pod, skipping" err="failed to \\"StartContainer\\" for \\"web\\" with CrashLoopBackOff" pod="default/web-2" podUID="c8c87ab9"',
];

function pullLines(): string[] {
  // bench/ run by tsx, or dist/bench/ after tsc (which does not copy fixtures): fall back to the repo checkout
  let dir = fileURLToPath(new URL('../test/fixtures/logs/', import.meta.url));
  if (!existsSync(dir)) dir = join(process.cwd(), 'test', 'fixtures', 'logs');
  const out: string[] = [];
  for (const f of ['containerd-1.7.txt', 'kubelet-1.30.txt', 'crio-1.30.txt']) {
    for (const l of readFileSync(join(dir, f), 'utf8').split('\n')) if (l && !l.startsWith('#')) out.push(l);
  }
  return out;
}

function nsPerCall(n: number, fn: (i: number) => unknown): number {
  for (let i = 0; i < Math.min(n, 5000); i++) fn(i); // warm up
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) fn(i);
  return Number(process.hrtime.bigint() - t0) / n;
}

export async function benchLogs(opts: BenchLogsOptions = {}): Promise<Record<string, number | string>> {
  const seconds = opts.seconds ?? Number(process.env.PULLWATCH_BENCH_LOG_SECONDS ?? 10);
  const rate = opts.linesPerSecond ?? 1000;
  const parseN = opts.parseLines ?? 200_000;
  const now = Date.now();
  const pulls = pullLines();

  const noiseNs = nsPerCall(parseN, (i) => parseLogLine(NOISE[i % NOISE.length] as string, { fallbackAt: now }));
  const pullNs = nsPerCall(parseN, (i) => parseLogLine(pulls[i % pulls.length] as string, { fallbackAt: now }));
  const toJson = (m: string, i: number) => JSON.stringify({
    __CURSOR: `s=1;i=${i}`, __REALTIME_TIMESTAMP: String(now * 1000 + i), _SYSTEMD_UNIT: m.startsWith('time=') ? 'containerd.service' : 'kubelet.service', MESSAGE: m,
  });
  const journalNoise = NOISE.map(toJson);
  const journalPull = pulls.map(toJson);
  const journalNoiseNs = nsPerCall(parseN, (i) => parseJournalLine(journalNoise[i % journalNoise.length] as string, now));
  const journalPullNs = nsPerCall(parseN / 4, (i) => parseJournalLine(journalPull[i % journalPull.length] as string, now));

  // Follow a file growing by `rate` lines/s (5% pull lines) written by another process.
  const dir = mkdtempSync(join(tmpdir(), 'pw-bench-logs-'));
  const file = join(dir, 'node.log');
  writeFileSync(file, '');
  const mix = Array.from({ length: 100 }, (_, i) => (i % 20 === 0 ? pulls[i % pulls.length] : NOISE[i % NOISE.length]) as string);
  const writerScript = `
    const fs = require('node:fs');
    const lines = ${JSON.stringify(mix)};
    const perTick = Math.max(1, Math.round(${rate} / 10));
    let i = 0;
    setInterval(() => {
      let s = '';
      for (let k = 0; k < perTick; k++) s += lines[(i++) % lines.length] + '\\n';
      fs.appendFileSync(${JSON.stringify(file)}, s);
    }, 100);`;
  let emitted = 0;
  const ctx: SourceContext = {
    emit: () => { emitted++; },
    health: new SourceHealth(silentLogger()),
    logger: silentLogger(),
    now: () => Date.now(),
  };
  const src = new FileLogSource(file, { pollMs: 500 });
  const writer = spawn(process.execPath, ['-e', writerScript], { stdio: 'ignore' });
  try {
    await src.start(ctx);
    await new Promise((r) => setTimeout(r, 1000)); // settle
    (globalThis as { gc?: () => void }).gc?.();
    const linesBefore = src.linesRead;
    const cpu0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const cpu = process.cpuUsage(cpu0);
    const wallUs = Number(process.hrtime.bigint() - t0) / 1000;
    const lines = src.linesRead - linesBefore;
    const cpuUs = cpu.user + cpu.system;
    return {
      parse_ns_per_noise_line: Math.round(noiseNs),
      parse_ns_per_pull_line: Math.round(pullNs),
      journal_ns_per_noise_entry: Math.round(journalNoiseNs),
      journal_ns_per_pull_entry: Math.round(journalPullNs),
      follow_seconds: seconds,
      follow_lines_per_second: Math.round(lines / (wallUs / 1e6)),
      follow_cpu_percent_of_one_core: Number(((cpuUs / wallUs) * 100).toFixed(2)),
      follow_cpu_us_per_line: lines ? Number((cpuUs / lines).toFixed(2)) : 'n/a',
      follow_events_emitted: emitted,
      rss_mib: Number((process.memoryUsage().rss / 1048576).toFixed(1)),
    };
  } finally {
    if (writer.pid !== undefined) { try { process.kill(writer.pid, 'SIGKILL'); } catch { /* gone */ } }
    await src.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
