/**
 * Agent overhead: RSS and CPU of the real `pullwatch agent` process while it watches 200 concurrent
 * containerd ingests (growing every second) and follows a log file written at 1,000 lines/s.
 * Targets (issue 2): ≤ 80 MiB RSS, ≤ 2% of one core.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';

const CLK_TCK = 100;

function procStat(pid: number): { cpuTicks: number; rssKiB: number; hwmKiB: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const cpuTicks = Number(fields[11]) + Number(fields[12]);
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? 0);
  return { cpuTicks, rssKiB: kib('VmRSS'), hwmKiB: kib('VmHWM') };
}

export async function overheadOnce(opts: { ingests?: number; linesPerSecond?: number; seconds?: number; nodeFlags?: string[] } = {}): Promise<Record<string, number | string>> {
  const ingests = opts.ingests ?? 200;
  const lps = opts.linesPerSecond ?? 1000;
  const seconds = opts.seconds ?? 30;
  const dir = mkdtempSync(join(tmpdir(), 'pullwatch-bench-agent-'));
  const root = join(dir, 'containerd');
  const ingestDir = join(root, 'io.containerd.content.v1.content', 'ingest');
  mkdirSync(join(root, 'io.containerd.content.v1.content', 'blobs', 'sha256'), { recursive: true });
  const dataFiles: string[] = [];
  const started = new Date().toISOString();
  for (let i = 0; i < ingests; i++) {
    const hex = randomBytes(32).toString('hex');
    const d = join(ingestDir, hex);
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, 'ref'), `k8s.io/${i}/layer-sha256:${randomBytes(32).toString('hex')}`);
    writeFileSync(join(d, 'total'), String(50 * 1024 * 1024));
    writeFileSync(join(d, 'startedat'), started);
    writeFileSync(join(d, 'updatedat'), started);
    writeFileSync(join(d, 'data'), '');
    dataFiles.push(join(d, 'data'));
  }
  const logFile = join(dir, 'containerd.log');
  writeFileSync(logFile, '');
  const chunk = Buffer.alloc(4096, 1);
  const bin = resolve(import.meta.dirname, '..', 'bin', 'pullwatch.js');
  const child = spawn(process.execPath, [
    ...(opts.nodeFlags ?? []), bin, 'agent', '--kube', 'off', '--listen', '127.0.0.1:0', '--containerd-root', root, '--containerd-socket', join(dir, 'none.sock'),
    '--docker-root', join(dir, 'no-docker'), '--log-source', `file:${logFile}`, '--poll', '1s', '--log-level', 'error',
    '--queue-dir', join(dir, 'queue'),
  ], { stdio: ['ignore', 'ignore', 'inherit'] });
  const pid = child.pid as number;
  let line = 0;
  const writeTick = () => {
    for (const f of dataFiles) appendFileSync(f, chunk);
    const lines: string[] = [];
    const per = Math.round(lps / 10);
    for (let i = 0; i < per; i++) {
      line++;
      lines.push(line % 50 === 0
        ? `time="${new Date().toISOString()}" level=info msg="PullImage \\"registry.example.com/app/img${line % 7}:v1\\""`
        : `time="${new Date().toISOString()}" level=info msg="StartContainer for \\"${line.toString(16)}\\" returns successfully"`);
    }
    appendFileSync(logFile, `${lines.join('\n')}\n`);
  };
  let ticks = 0;
  const writer = setInterval(() => { ticks++; writeTick(); }, 100);
  try {
    await new Promise((r) => setTimeout(r, 5000)); // warm-up: startup, JIT, first polls
    const a = procStat(pid);
    const t0 = process.hrtime.bigint();
    let maxRss = a.rssKiB;
    for (let s = 0; s < seconds; s++) {
      await new Promise((r) => setTimeout(r, 1000));
      maxRss = Math.max(maxRss, procStat(pid).rssKiB);
    }
    const b = procStat(pid);
    const wall = Number(process.hrtime.bigint() - t0) / 1e9;
    const cpuSeconds = (b.cpuTicks - a.cpuTicks) / CLK_TCK;
    const polls = wall; // --poll 1s
    return {
      'agent.ingests': ingests,
      'agent.log_lines_per_s': Math.round((ticks * Math.round(lps / 10)) / (wall + 5)),
      'agent.cpu_percent_of_one_core': Number(((100 * cpuSeconds) / wall).toFixed(2)),
      'agent.rss_max_MiB': Number((maxRss / 1024).toFixed(1)),
      'agent.rss_hwm_MiB': Number((b.hwmKiB / 1024).toFixed(1)),
      'agent.cpu_us_per_ingest_per_poll': Number(((cpuSeconds * 1e6) / (polls * ingests)).toFixed(1)),
    };
  } finally {
    clearInterval(writer);
    child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 500));
    try { process.kill(pid, 'SIGKILL'); } catch { /* already gone */ }
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Side by side: Node's defaults, and the flags the DaemonSet sets (NODE_OPTIONS=--max-semi-space-size=1). */
export async function benchAgentOverhead(): Promise<Record<string, number | string>> {
  const out: Record<string, number | string> = {};
  for (const [label, flags] of [['default', []], ['daemonset_flags', ['--max-semi-space-size=1']]] as const) {
    const r = await overheadOnce({ nodeFlags: [...flags] });
    for (const [k, v] of Object.entries(r)) out[k.replace(/^agent\./, `agent.${label}.`)] = v;
  }
  return out;
}
