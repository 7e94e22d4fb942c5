/**
 * `pullwatch bundle` against `tar -czf` of the same file set, side by side in one run: 2 GiB of
 * time-stamped pod logs (CRI format, real bytes written, not sparse) in a built host tree. Our side
 * runs the real CLI in a child process (`--only var_log/`, window covering every line, cap above
 * the file size, redaction on), so its peak RSS is measured alone (VmHWM polled from /proc).
 * Both write to a pipe this process drains. The files are removed at the end.
 */
import { spawn } from 'node:child_process';
import { existsSync, promises as fsp } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const REPO = resolve(import.meta.dirname, '..');

export interface BenchBundleOptions { totalBytes?: number; files?: number }

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => { s = (s * 1664525 + 1013904223) >>> 0; return s / 2 ** 32; };
}

/** Message bodies shaped like kubelet/CNI/app log lines, varied so gzip sees realistic text. */
function bodies(n: number): string[] {
  const r = rng(42);
  const words = ['Pulling', 'image', 'pod', 'container', 'sandbox', 'ready', 'probe', 'failed', 'succeeded', 'network', 'eni', 'ip', 'allocated', 'released',
    'volume', 'mount', 'sync', 'loop', 'reconcile', 'status', 'update', 'kube-system', 'default', 'registry.example.com/app', 'layer', 'bytes', 'duration'];
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const k = 6 + Math.floor(r() * 14);
    const parts: string[] = [];
    for (let j = 0; j < k; j++) {
      const w = words[Math.floor(r() * words.length)]!;
      parts.push(r() < 0.3 ? `${w}=${Math.floor(r() * 1e9).toString(16)}` : w);
    }
    out.push(`{"level":"info","msg":"${parts.join(' ')}","req":${Math.floor(r() * 1e6)}}`);
  }
  return out;
}

async function writeLogs(dir: string, total: number, files: number, fromMs: number, toMs: number): Promise<string[]> {
  const per = Math.floor(total / files);
  const bs = bodies(8192);
  const paths: string[] = [];
  for (let f = 0; f < files; f++) {
    const p = join(dir, `var/log/pods/kube-system_aws-node-${f}_uid${f}/aws-node/0.log`);
    await fsp.mkdir(join(p, '..'), { recursive: true });
    const fh = await fsp.open(p, 'w');
    let written = 0;
    let block = 0;
    const blocks = Math.ceil(per / (1 << 20));
    while (written < per) {
      const t = new Date(fromMs + ((toMs - fromMs) * block) / blocks).toISOString().replace('Z', '000000Z');
      const lines: string[] = [];
      let n = 0;
      for (let i = 0; n < (1 << 20) && i < bs.length; i++) {
        const l = `${t} stdout F ${bs[(i + block * 31) % bs.length]}\n`;
        lines.push(l);
        n += l.length;
      }
      const buf = Buffer.from(lines.join(''));
      await fh.write(buf);
      written += buf.length;
      block++;
    }
    await fh.close();
    paths.push(p);
  }
  return paths;
}

function timeChild(cmd: string, args: string[], cwd?: string): Promise<{ ms: number; peakRssBytes: number; code: number | null; stderr: string; outBytes: number }> {
  return new Promise((resolveP, reject) => {
    const t0 = performance.now();
    // stdout is a pipe we drain (not /dev/null: GNU tar skips reading files when writing to /dev/null)
    const c = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...(cwd ? { cwd } : {}) });
    let outBytes = 0;
    c.stdout.on('data', (b: Buffer) => { outBytes += b.length; });
    let peak = 0;
    let err = '';
    c.stderr.on('data', (b: Buffer) => { err = (err + b.toString()).slice(-4000); });
    const poll = setInterval(() => {
      void fsp.readFile(`/proc/${c.pid}/status`, 'utf8').then((s) => {
        const m = /VmHWM:\s+(\d+) kB/.exec(s);
        if (m) peak = Math.max(peak, Number(m[1]) * 1024);
      }, () => undefined);
    }, 25);
    c.on('error', reject);
    c.on('close', (code) => { clearInterval(poll); resolveP({ ms: performance.now() - t0, peakRssBytes: peak, code, stderr: err, outBytes }); });
  });
}

export async function benchBundle(opts: BenchBundleOptions = {}): Promise<Record<string, number | string>> {
  const total = opts.totalBytes ?? 2 * 1024 ** 3;
  const files = opts.files ?? 8;
  const cli = join(REPO, 'bin/pullwatch.js');
  if (!existsSync(join(REPO, 'dist/cli/main.js'))) throw new Error('run `npm run build` first');
  const root = await fsp.mkdtemp(join(tmpdir(), 'pw-bench-bundle-'));
  try {
    const now = Date.now();
    const since = now - 6 * 3600_000;
    const tGen = performance.now();
    await writeLogs(root, total, files, now - 5 * 3600_000, now - 60_000);
    const genMs = performance.now() - tGen;
    let bytes = 0;
    for (let f = 0; f < files; f++) bytes += (await fsp.stat(join(root, `var/log/pods/kube-system_aws-node-${f}_uid${f}/aws-node/0.log`))).size;

    // warm the page cache equally for both sides
    await timeChild('tar', ['-cf', '-', '-C', root, 'var/log/pods']);
    const cap = `${Math.ceil(total / files) + (1 << 20)}`;
    const runTar = () => timeChild('tar', ['-czf', '-', '-C', root, 'var/log/pods']);
    const runOurs = () => timeChild(process.execPath, [cli, 'bundle', '-o', '-', '--host-root', root, '--exec', 'local', '--only', 'var_log/',
      '--file-cap', cap, '--since', `@${Math.floor(since / 1000)}`, '--until', `@${Math.ceil(now / 1000)}`, '--captures-dir', join(root, 'none')]);
    // The same engine without the rest of the CLI (the pullwatch CLI loads every subcommand's modules).
    const engine = `import { writeBundle } from ${JSON.stringify(join(REPO, 'dist/agent/bundle/bundle.js'))};
import { silentLogger } from ${JSON.stringify(join(REPO, 'dist/common/log.js'))};
await writeBundle({ hostRoot: ${JSON.stringify(root)}, sinceMs: ${since}, untilMs: ${now + 1000}, fileCap: ${cap}, commandTimeoutMs: 30000,
  redact: true, exec: 'local', goroutines: false, only: ['var_log/'] }, process.stdout, silentLogger());`;
    const runEngine = (flags: string[] = []) => timeChild(process.execPath, [...flags, '--input-type=module', '-e', engine]);
    // interleaved, best of two each: the machine may be shared
    const tars = [await runTar()];
    const ourss = [await runOurs()];
    tars.push(await runTar());
    ourss.push(await runOurs());
    const eng = await runEngine();
    const base = await timeChild(process.execPath, [cli, '--version']);
    for (const r of [...tars, ...ourss, eng]) if (r.code !== 0) throw new Error(`bench child failed: ${r.stderr}`);
    const tar = tars.reduce((a, b) => (b.ms < a.ms ? b : a));
    const ours = ourss.reduce((a, b) => (b.ms < a.ms ? b : a));
    const mib = bytes / 1024 ** 2;
    return {
      input_mib: Math.round(mib),
      files,
      generate_seconds: +(genMs / 1000).toFixed(1),
      tar_czf_seconds: +(tar.ms / 1000).toFixed(2),
      tar_czf_mib_per_s: +(mib / (tar.ms / 1000)).toFixed(1),
      bundle_seconds: +(ours.ms / 1000).toFixed(2),
      bundle_mib_per_s: +(mib / (ours.ms / 1000)).toFixed(1),
      bundle_vs_tar_throughput: +(tar.ms / ours.ms).toFixed(2),
      bundle_peak_rss_mib: +(Math.max(...ourss.map((o) => o.peakRssBytes)) / 1024 ** 2).toFixed(1),
      bundle_engine_only_seconds: +(eng.ms / 1000).toFixed(2),
      bundle_engine_only_peak_rss_mib: +(eng.peakRssBytes / 1024 ** 2).toFixed(1),
      node_bare_peak_rss_mib: +((await timeChild(process.execPath, ['-e', '0'])).peakRssBytes / 1024 ** 2).toFixed(1),
      cli_version_peak_rss_mib: +(base.peakRssBytes / 1024 ** 2).toFixed(1),
      tar_peak_rss_mib: +(tar.peakRssBytes / 1024 ** 2).toFixed(1),
      tar_gz_mib: +(tar.outBytes / 1024 ** 2).toFixed(1),
      bundle_gz_mib: +(ours.outBytes / 1024 ** 2).toFixed(1),
    };
  } finally {
    await fsp.rm(root, { recursive: true, force: true });
  }
}
