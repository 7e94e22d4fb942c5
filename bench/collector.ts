/**
 * Collector benchmarks (issue 3):
 *  1. ingest throughput with 1,000 simulated agents, on SQLite and on PostgreSQL
 *     (target ≥ 5,000 events/s on SQLite on 2 cores);
 *  2. event-to-webhook latency p50/p99 at 100 events/s (target p99 ≤ 500 ms);
 *  3. 5,000 nodes heartbeating every 30 s: collector CPU and RSS.
 * The load comes from a separate plain-Node process (so the generator's JSON and HTTP work does not
 * run on the collector's event loop); the collector runs in this process via startCollector().
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../common/log.js';
import { startCollector, type RunningCollector } from '../collector/run.js';
import type { PullRecord } from '../agent/model/pulls.js';
import { startPostgres } from '../test/harness/postgres.js';

const TOKEN = 'bench-token';

/** The load generator: plain ESM, run with `node file.mjs '<json args>'`; prints one JSON line. */
const LOADGEN = String.raw`
import http from 'node:http';
const a = JSON.parse(process.argv[2]);
const agent = new http.Agent({ keepAlive: true, maxSockets: a.concurrency });
const u = new URL(a.url);
function post(path, body) {
  return new Promise((resolve) => {
    const req = http.request({ host: u.hostname, port: u.port, path, method: 'POST', agent,
      headers: { 'content-type': 'application/json', authorization: 'Bearer ' + a.token, 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.resume(); res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', () => resolve(0));
    req.end(body);
  });
}
const statuses = {};
const count = (s) => { statuses[s] = (statuses[s] || 0) + 1; };
if (a.mode === 'events') {
  let sent = 0, seq = 0;
  const kinds = ['started', 'started', 'started', 'completed', 'completed', 'completed', 'slow', 'resumed', 'stalled', 'resumed'];
  const t0 = performance.now();
  const worker = async () => {
    while (sent < a.total) {
      const n = Math.min(a.batch, a.total - sent); sent += n;
      const node = 'agent-' + (seq++ % a.agents);
      const at = new Date().toISOString();
      const evs = [];
      for (let i = 0; i < n; i++) {
        const k = kinds[(seq + i) % kinds.length];
        evs.push('{"id":"' + node + '-' + seq + '-' + i + '","at":"' + at + '","kind":"' + k + '","pull":' + a.pull.replace('__STATE__', k === 'stalled' ? 'stalled' : k === 'completed' ? 'completed' : 'downloading') + '}');
      }
      const body = '{"node":"' + node + '","agentVersion":"0.1.0","events":[' + evs.join(',') + ']}';
      count(await post('/v1/events', body));
    }
  };
  await Promise.all(Array.from({ length: a.concurrency }, worker));
  process.stdout.write(JSON.stringify({ seconds: (performance.now() - t0) / 1000, statuses }) + '\n');
} else if (a.mode === 'latency') {
  // receiver + sender in this process (same clock): print the receiver port, read the collector URL on stdin
  const sentAt = new Map();
  const lat = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (d) => chunks.push(d));
    req.on('end', () => {
      const now = performance.now();
      try {
        const p = JSON.parse(Buffer.concat(chunks).toString());
        const t = p.type === 'firing' ? sentAt.get(p.incident.node) : undefined;
        if (t !== undefined) { lat.push(now - t); sentAt.delete(p.incident.node); }
      } catch {}
      res.end('ok');
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  process.stdout.write('RECEIVER ' + server.address().port + '\n');
  const url = await new Promise((resolve) => { let b = ''; process.stdin.on('data', (d) => { b += d; const m = /GO (\S+)/.exec(b); if (m) resolve(m[1]); }); });
  const cu = new URL(url);
  u.hostname = cu.hostname; u.port = cu.port;
  const total = a.rate * a.seconds;
  const t0 = performance.now();
  const posts = [];
  for (let i = 0; i < total; i++) {
    const wait = t0 + (i * 1000) / a.rate - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const node = 'lat-node-' + i;
    const reg = 'r' + i + '.example.com';
    const pull = a.pull.replace('__STATE__', 'stalled').replace('"registry":"registry.example.com"', '"registry":"' + reg + '"').replace('"image":"registry.example.com/', '"image":"' + reg + '/');
    const body = '{"node":"' + node + '","agentVersion":"0.1.0","events":[{"id":"' + node + '-' + Date.now() + '","at":"' + new Date().toISOString() + '","kind":"stalled","pull":' + pull + '}]}';
    sentAt.set(node, performance.now());
    posts.push(post('/v1/events', body).then(count));
  }
  await Promise.all(posts);
  const deadline = Date.now() + 20000;
  while (lat.length < total && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  server.close();
  process.stdout.write(JSON.stringify({ seconds: (performance.now() - t0) / 1000, sent: total, latencies: lat, statuses }) + '\n');
  process.exit(0);
} else {
  // heartbeats: a.nodes nodes, each every a.interval seconds, for a.seconds
  const perSecond = a.nodes / a.interval;
  const t0 = performance.now();
  let sent = 0, i = 0;
  const inflight = new Set();
  while ((performance.now() - t0) / 1000 < a.seconds) {
    const due = Math.floor(((performance.now() - t0) / 1000) * perSecond);
    while (sent < due) {
      const node = 'node-' + (i++ % a.nodes);
      const body = '{"node":"' + node + '","agentVersion":"0.1.0","runtime":{"name":"containerd","version":"1.7.24","pullDeadlineMs":300000},' +
        '"pullsInFlight":' + (i % 10 === 0 ? '[' + a.pull.replace('__STATE__', 'downloading') + ']' : '[]') +
        ',"eventsDropped":0,"queueDepth":0,"sourceErrors":0,"intervalSeconds":' + a.interval + ',"at":"' + new Date().toISOString() + '"}';
      const p = post('/v1/heartbeat', body).then((s) => { count(s); inflight.delete(p); });
      inflight.add(p);
      sent++;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  await Promise.all(inflight);
  process.stdout.write(JSON.stringify({ seconds: (performance.now() - t0) / 1000, sent, statuses }) + '\n');
}
`;

export function pullTemplate(): string {
  const at = new Date().toISOString();
  const p: PullRecord = {
    id: 'pull-bench', image: 'registry.example.com/team/app:1.2.3', registry: 'registry.example.com', repository: 'team/app',
    state: 'stalled', startedAt: at, updatedAt: at, lastProgressAt: at, idleSeconds: 0, rateBytesPerSecond: 1_000_000,
    bytesDone: 40_000_000, bytesTotal: 88_270_000,
    layers: [{ digest: `sha256:${'a'.repeat(64)}`, kind: 'layer', state: 'downloading', bytesDone: 40_000_000, bytesTotal: 88_270_000, idleSeconds: 0, rateBytesPerSecond: 1_000_000, startedAt: at }],
    runtime: { name: 'containerd', version: '1.7.24' }, runtimeDeadlineMs: 300_000,
    pods: [{ namespace: 'default', name: 'web-7d9f', container: 'app', reason: 'ContainerCreating' }], idleGapsMs: [],
  };
  return JSON.stringify(p).replace('"state":"stalled"', '"state":"__STATE__"');
}

export async function runLoad(dir: string, args: Record<string, unknown>): Promise<{ seconds: number; sent?: number; statuses: Record<string, number> }> {
  const file = join(dir, 'loadgen.mjs');
  writeFileSync(file, LOADGEN);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [file, JSON.stringify(args)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    const t = setTimeout(() => { if (child.pid) process.kill(child.pid, 'SIGKILL'); }, 180_000);
    child.on('exit', (code) => {
      clearTimeout(t);
      try { resolve(JSON.parse(out.trim().split('\n').pop() ?? '')); } catch { reject(new Error(`load generator failed (${code}): ${err.slice(-500)}`)); }
    });
  });
}

/** Events/s (wall clock) and events per CPU-second of this process (the collector; load runs elsewhere). */
export async function ingestThroughput(dir: string, c: RunningCollector, total: number): Promise<{ perSecond: number; perCpuSecond: number }> {
  const cpu0 = process.cpuUsage();
  const r = await runLoad(dir, { mode: 'events', url: c.url, token: TOKEN, agents: 1000, batch: 20, total, concurrency: 64, pull: pullTemplate() });
  await c.processNow();
  const cpu = process.cpuUsage(cpu0);
  const ok = r.statuses['200'] ?? 0;
  if (ok * 20 < total) throw new Error(`ingest: not all batches accepted: ${JSON.stringify(r.statuses)}`);
  const stored = await c.store.countEvents();
  if (stored !== total) throw new Error(`ingest: stored ${stored} of ${total}`);
  return { perSecond: Math.round(total / r.seconds), perCpuSecond: Math.round(total / ((cpu.user + cpu.system) / 1e6)) };
}

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] ?? NaN;
}

/**
 * Event → webhook latency against the real `pullwatch collector` process: a separate load process
 * posts one stall (its own registry: its own incident) every 10 ms and receives the webhooks, so
 * send and receive times come from one clock.
 */
async function webhookLatency(dir: string, seconds: number): Promise<{ p50: number; p99: number; delivered: number; sent: number; cpuPercent: number }> {
  const file = join(dir, 'loadgen.mjs');
  writeFileSync(file, LOADGEN);
  const gen = spawn(process.execPath, [file, JSON.stringify({ mode: 'latency', url: 'http://127.0.0.1:1', token: TOKEN, rate: 100, seconds, concurrency: 64, pull: pullTemplate() })], { stdio: ['pipe', 'pipe', 'pipe'] });
  let genOut = '';
  let genErr = '';
  gen.stdout.on('data', (d: Buffer) => { genOut += d.toString(); });
  gen.stderr.on('data', (d: Buffer) => { genErr += d.toString(); });
  const genExit = new Promise<void>((r) => gen.once('exit', () => r()));
  const port = await waitLine(() => /RECEIVER (\d+)/.exec(genOut)?.[1], () => genErr, 30_000);
  const c = await spawnCli(dir, 'latency.db', ['--webhook', `http://127.0.0.1:${port}/hook`]);
  try {
    const s0 = procStat(c.pid);
    const t0 = performance.now();
    gen.stdin.write(`GO ${c.url}\n`);
    await genExit;
    const s1 = procStat(c.pid);
    const r = JSON.parse(genOut.trim().split('\n').pop() ?? '{}') as { latencies?: number[]; sent?: number };
    if (!r.latencies) throw new Error(`latency load failed: ${genErr.slice(-500)}`);
    const cpuPercent = ((s1.cpuTicks - s0.cpuTicks) / 100 / ((performance.now() - t0) / 1000)) * 100;
    return { p50: percentile(r.latencies, 50), p99: percentile(r.latencies, 99), delivered: r.latencies.length, sent: r.sent ?? 0, cpuPercent };
  } finally {
    if (gen.exitCode === null && gen.pid) { try { process.kill(gen.pid, 'SIGKILL'); } catch { /* gone */ } }
    await c.stop();
  }
}

async function waitLine(get: () => string | undefined, err: () => string, timeoutMs: number): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = get();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out: ${err().slice(-500)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The compiled `pullwatch collector` (npm run build first) in its own process. */
async function spawnCli(dir: string, db: string, extra: string[]): Promise<{ url: string; pid: number; stop(): Promise<void> }> {
  const bin = fileURLToPath(new URL('../bin/pullwatch.js', import.meta.url));
  if (!existsSync(fileURLToPath(new URL('../dist/collector/cli.js', import.meta.url)))) throw new Error('this bench runs the compiled CLI: npm run build first');
  writeFileSync(join(dir, 'token'), `${TOKEN}\n`);
  // PULLWATCH_BENCH_CPU_PROF=<dir>: write a V8 CPU profile of the collector process there
  const prof = process.env.PULLWATCH_BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.PULLWATCH_BENCH_CPU_PROF}`] : [];
  const child = spawn(process.execPath, [...prof, bin, 'collector', '--listen', '127.0.0.1:0', '--db', join(dir, db), '--token-file', join(dir, 'token'), ...extra], {
    stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, PULLWATCH_LOG_LEVEL: 'warn' },
  });
  const pid = child.pid;
  if (!pid) throw new Error('could not start pullwatch collector');
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  let err = '';
  child.stderr.on('data', (d: Buffer) => { err += d.toString(); });
  const stop = async () => {
    try { process.kill(pid, 'SIGTERM'); } catch { /* gone */ }
    const t = setTimeout(() => { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } }, 10_000);
    await exited;
    clearTimeout(t);
  };
  try {
    const url = await waitLine(() => /listening on (http:\/\/\S+)/.exec(err)?.[1], () => err, 30_000);
    return { url, pid, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

function procStat(pid: number): { cpuTicks: number; rssKiB: number; hwmKiB: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? 0);
  return { cpuTicks: Number(fields[11]) + Number(fields[12]), rssKiB: kib('VmRSS'), hwmKiB: kib('VmHWM') };
}

/**
 * The real `pullwatch collector` process (compiled CLI, `npm run build` first), measured from
 * /proc while 5,000 simulated nodes heartbeat every 30 s (1 in 10 with a pull in flight).
 */
async function heartbeatFleet(dir: string, seconds: number): Promise<{ cpuPercent: number; rssMiB: number; peakRssMiB: number; heartbeats: number; ok: number }> {
  const c = await spawnCli(dir, 'fleet.db', []);
  try {
    const s0 = procStat(c.pid);
    const t0 = performance.now();
    const r = await runLoad(dir, { mode: 'heartbeats', url: c.url, token: TOKEN, nodes: 5000, interval: 30, seconds, concurrency: 64, pull: pullTemplate() });
    const s1 = procStat(c.pid);
    const wall = (performance.now() - t0) / 1000;
    return {
      cpuPercent: ((s1.cpuTicks - s0.cpuTicks) / 100 / wall) * 100, rssMiB: s1.rssKiB / 1024, peakRssMiB: s1.hwmKiB / 1024,
      heartbeats: r.sent ?? 0, ok: r.statuses['200'] ?? 0,
    };
  } finally {
    await c.stop();
  }
}

export async function benchCollector(opts: { events?: number; latencySeconds?: number; fleetSeconds?: number; parts?: Array<'ingest' | 'latency' | 'fleet'> } = {}): Promise<Record<string, number | string>> {
  const events = opts.events ?? 100_000;
  const parts = new Set(opts.parts ?? ['ingest', 'latency', 'fleet']);
  const dir = mkdtempSync(join(tmpdir(), 'pullwatch-bench-collector-'));
  const out: Record<string, number | string> = {};
  try {
    // 1a. SQLite
    if (parts.has('ingest')) {
      const c = await startCollector({ listen: '127.0.0.1:0', db: join(dir, 'ingest.db'), tokens: [TOKEN], dashboard: false }, silentLogger());
      try {
        const r = await ingestThroughput(dir, c, events);
        out.ingest_sqlite_events_per_s = r.perSecond;
        out.ingest_sqlite_events_per_collector_cpu_second = r.perCpuSecond;
      } finally { await c.stop(); }
    }
    // 1b. PostgreSQL
    if (parts.has('ingest')) {
      const pg = await startPostgres();
      try {
        const c = await startCollector({ listen: '127.0.0.1:0', db: pg.url, tokens: [TOKEN], dashboard: false }, silentLogger());
        try {
          const r = await ingestThroughput(dir, c, Math.min(events, 50_000));
          out.ingest_postgres_events_per_s = r.perSecond;
          out.ingest_postgres_events_per_collector_cpu_second = r.perCpuSecond;
        } finally { await c.stop(); }
      } finally {
        await pg.stop();
      }
    }
    if (parts.has('ingest')) out.ingest_simulated_agents = 1000;
    // 2. event → webhook latency at 100 events/s
    if (parts.has('latency')) {
      const lat = await webhookLatency(dir, opts.latencySeconds ?? 10);
      out.webhook_latency_p50_ms = Math.round(lat.p50);
      out.webhook_latency_p99_ms = Math.round(lat.p99);
      out.webhook_delivered = `${lat.delivered}/${lat.sent}`;
      out.webhook_collector_cpu_percent_of_one_core = Number(lat.cpuPercent.toFixed(1));
    }
    // 3. 5,000 nodes heartbeating every 30 s
    if (parts.has('fleet')) {
      const fleet = await heartbeatFleet(dir, opts.fleetSeconds ?? 20);
      out.fleet5000_collector_cpu_percent_of_one_core = Number(fleet.cpuPercent.toFixed(1));
      out.fleet5000_collector_rss_mib = Math.round(fleet.rssMiB);
      out.fleet5000_collector_peak_rss_mib = Math.round(fleet.peakRssMiB);
      out.fleet5000_heartbeats_ok = `${fleet.ok}/${fleet.heartbeats}`;
    }
    out.load_average_1m = Number(loadavg()[0]?.toFixed(1) ?? 0);
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
