import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, stat, symlink } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeBundle, type BundleOptions, type Manifest } from '../../../agent/bundle/bundle.js';
import { parseLineTime } from '../../../agent/bundle/line-time.js';
import { saveCapture } from '../../../agent/capture/store.js';
import { silentLogger } from '../../../common/log.js';
import { buildHostTree, type HostTree } from './host-tree.js';

const execFileP = promisify(execFile);
const REPO = resolve(import.meta.dirname, '../../..');

let tree: HostTree;
let work: string;
let toolBin: string;
let agent: Server;
let agentUrl: string;
let psChild: ChildProcess | undefined;
const CMDLINE_SECRET = 'Planted-Cmdline-Pa55';

/** Tools this "image" has; everything else (iptables, nft, lsblk, sysctl, ethtool, ctr, docker…) is missing. */
const TOOLS = ['journalctl', 'ps', 'uname', 'sleep', 'sh'];

async function which(t: string): Promise<string> {
  for (const d of ['/usr/bin', '/bin', '/usr/sbin', '/sbin']) if (existsSync(join(d, t))) return join(d, t);
  throw new Error(`test needs ${t} on this machine`);
}

async function runBundle(name: string, o: Partial<BundleOptions>): Promise<{ file: string; manifest: Manifest; dir: string; raw: Buffer; list: string[] }> {
  const file = join(work, `${name}.tar.gz`);
  const out = createWriteStream(file);
  const manifest = await writeBundle({
    hostRoot: tree.root, sinceMs: tree.sinceMs, untilMs: tree.untilMs, fileCap: 8 * 1024 * 1024, commandTimeoutMs: 10_000,
    redact: true, exec: 'local', goroutines: false, toolPath: toolBin, agentUrl, capturesDir: join(work, 'captures'), ...o,
  }, out, silentLogger());
  const { stdout } = await execFileP('tar', ['-tzf', file], { maxBuffer: 64 << 20 });
  const list = stdout.trim().split('\n');
  const dir = join(work, `${name}-x`);
  await mkdir(dir);
  await execFileP('tar', ['-xzf', file, '-C', dir]);
  return { file, manifest, dir, raw: gunzipSync(readFileSync(file)), list };
}

beforeAll(async () => {
  tree = await buildHostTree();
  work = await mkdtemp(join(tmpdir(), 'pw-bundle-work-'));
  toolBin = join(work, 'bin');
  await mkdir(toolBin);
  for (const t of TOOLS) await symlink(await which(t), join(toolBin, t));
  await saveCapture(join(work, 'captures'), { pullId: 'registry.example.com/app:1@1', capturedAt: new Date(tree.now - 3600_000).toISOString() });
  agent = createServer((req, res) => {
    if (req.url === '/v1/pulls?all=1') {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ node: 'node1', pulls: [{ id: 'p1', image: 'registry.example.com/app:1', state: 'stalled', layers: [{ digest: 'sha256:aa', bytesDone: 4096, bytesTotal: 1048576, state: 'stalled' }] },
        { id: 'p2', image: 'nginx:1', state: 'completed', layers: [] }] }));
    } else { res.statusCode = 404; res.end('not found'); }
  });
  await new Promise<void>((r) => agent.listen(0, '127.0.0.1', r));
  const addr = agent.address();
  agentUrl = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`;
  // a process whose command line carries a password, for ps
  psChild = spawn(process.execPath, ['-e', 'setTimeout(()=>{}, 120000)', '--', '--db-password', CMDLINE_SECRET], { stdio: 'ignore' });
});

afterAll(async () => {
  if (psChild?.pid) { try { process.kill(psChild.pid, 'SIGKILL'); } catch { /* gone */ } }
  for (const s of tree?.servers ?? []) s.close();
  agent?.close();
  if (tree) await rm(tree.root, { recursive: true, force: true });
  if (work) await rm(work, { recursive: true, force: true });
});

describe('pullwatch bundle on a built host tree', () => {
  let r: Awaited<ReturnType<typeof runBundle>>;
  beforeAll(async () => { r = await runBundle('full', {}); }, 120_000);

  it('lists and extracts with GNU tar; README first, manifest last', () => {
    expect(r.list[0]).toBe('README.txt');
    expect(r.list[r.list.length - 1]).toBe('manifest.json');
    expect(JSON.parse(readFileSync(join(r.dir, 'manifest.json'), 'utf8')).formatVersion).toBe(1);
  });

  it('manifest matches the archive (paths and sizes)', async () => {
    const archived = r.manifest.items.filter((i) => i.archived).map((i) => i.path).sort();
    const inTar = r.list.filter((p) => p !== 'README.txt' && p !== 'manifest.json').sort();
    expect(inTar).toEqual(archived);
    for (const i of r.manifest.items.filter((x) => x.archived)) {
      expect((await stat(join(r.dir, i.path))).size, i.path).toBe(i.bytes);
    }
    expect(r.manifest.totals.archived).toBe(archived.length);
    expect(r.manifest.options.noRedact).toBe(false);
  });

  it('no planted secret appears anywhere in the decompressed archive', () => {
    const text = r.raw.toString('latin1');
    for (const s of [...tree.secrets, CMDLINE_SECRET]) expect(text.includes(s), s).toBe(false);
    const red = r.manifest.totals.redactions;
    for (const rule of ['registry-auth', 'dockerconfigjson', 'kubeconfig-credential', 'jwt', 'pem-private-key', 'aws-access-key-id', 'aws-secret', 'azure-key', 'secret-key-value', 'url-credentials', 'gcp-api-key', 'bearer-token']) {
      expect(red[rule as keyof typeof red] ?? 0, rule).toBeGreaterThan(0);
    }
  });

  it('ps is collected and its command-line password is masked', () => {
    const ps = r.manifest.items.find((i) => i.path === 'system/ps.txt')!;
    expect(ps.status).toBe('ok');
    const text = readFileSync(join(r.dir, 'system/ps.txt'), 'latin1');
    expect(text).toContain('--db-password <redacted');
  });

  it('text logs keep the window, then the tail within --file-cap', () => {
    const m = r.manifest.items.find((i) => i.path === 'var_log/messages')!;
    expect(m.status).toBe('truncated');
    expect(m.bytes).toBeLessThanOrEqual(8 * 1024 * 1024);
    const lines = readFileSync(join(r.dir, 'var_log/messages'), 'latin1').split('\n').filter((l) => /^[A-Z][a-z]{2} /.test(l));
    const year = new Date(tree.now).getUTCFullYear();
    const first = parseLineTime(lines[0]!, year)!;
    const last = parseLineTime(lines[lines.length - 1]!, year)!;
    expect(first).toBeGreaterThanOrEqual(tree.sinceMs);
    expect(last).toBe(tree.untilMs);
    const pod = readFileSync(join(r.dir, 'var_log/pods/kube-system_aws-node-abc_1/aws-node/0.log'), 'utf8');
    expect(pod).toContain('using token <redacted:jwt>');
    expect(pod).not.toContain('outside window');
  });

  it('never blocks on FIFOs, sockets, devices, loops; records each with a status', () => {
    const by = (p: string) => r.manifest.items.find((i) => i.path === p);
    expect(by('var_log/messages.fifo')).toMatchObject({ status: 'skipped', archived: false });
    expect(by('var_log/messages.fifo')!.error).toMatch(/fifo/);
    expect(by('var_log/pods/kube-system_aws-node-abc_1/aws-node/1.log')).toMatchObject({ status: 'skipped' });
    expect(by('var_log/syslog.sock')!.error).toMatch(/socket/);
    const cron = by('var_log/cron');
    if (cron) expect(cron.error).toMatch(/device/);
    expect(by('var_log/cron.loop1')).toMatchObject({ status: 'error' });
    expect(by('var_log/cron.loop1')!.error).toMatch(/ELOOP/);
    expect(by('var_log/cron.dangling')).toMatchObject({ status: 'missing' });
    expect(by('var_log/messages.1')).toMatchObject({ status: 'skipped' });
    expect(by('var_log/syslog.2.gz')).toMatchObject({ status: 'skipped' });
  });

  it('journals: the same window, ISO-8601 UTC microsecond timestamps, redacted', () => {
    const k = readFileSync(join(r.dir, 'kubelet/kubelet.log'), 'utf8');
    const c = readFileSync(join(r.dir, 'containerd/containerd-log.txt'), 'utf8');
    for (const msg of tree.journalInside.filter((m) => m.includes('kubelet inside'))) expect(k).toContain(msg.split(' using')[0]);
    expect(c).toContain('containerd inside');
    for (const msg of tree.journalOutside) { expect(k).not.toContain(msg); expect(c).not.toContain(msg); }
    for (const line of k.trim().split('\n')) expect(line).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+0000 /);
    const item = r.manifest.items.find((i) => i.path === 'kubelet/kubelet.log')!;
    expect(item.source).toBe('journal');
    expect(item.command).toEqual(expect.arrayContaining(['--root', tree.root, '--utc', '-o', 'short-iso-precise']));
  });

  it('missing tools are missing (or fall back to /proc), never fatal', () => {
    const by = (p: string) => r.manifest.items.find((i) => i.path === p)!;
    for (const p of ['networking/nft-ruleset.txt', 'storage/lsblk.txt', 'networking/ip6tables-nat.txt', 'docker/docker-info.txt', 'modinfo/lustre']) {
      expect(by(p).status, p).toBe('missing');
      expect(by(p).error, p).toMatch(/not found/);
    }
    expect(by('containerd/containerd-images.txt').status).toBe('missing');
    expect(by('sysctls/sysctl_all.txt')).toMatchObject({ status: 'ok', source: 'generated' });
    expect(by('sysctls/sysctl_all.txt').note).toMatch(/sysctl not found; fell back/);
    expect(by('system/uname.txt')).toMatchObject({ status: 'ok', source: 'command', via: 'local' });
  });

  it('config layouts of kubeadm and EKS are collected', () => {
    for (const p of ['kubelet/config.yaml', 'kubelet/kubeadm-flags.env', 'kubelet/kubelet-config.json', 'kubelet/config.json', 'kubelet/config.json.d/40-nodeadm.conf',
      'kubelet/unit/etc/systemd/system/kubelet.service.d/30-kubelet-extra-args.conf', 'kubelet/kubeconfig', 'kubelet/eksctl-kubeconfig.yaml', 'cni/10-aws.conflist', 'networking/resolv.conf', 'containerd/config.toml']) {
      expect(existsSync(join(r.dir, p)), p).toBe(true);
    }
    const kc = readFileSync(join(r.dir, 'kubelet/kubeconfig'), 'utf8');
    expect(kc).toMatch(/client-key-data: <redacted:kubeconfig-credential>\**\n/);
    expect(kc).toContain('client-certificate-data:');
  });

  it('pullwatch/: pulls, stalls, in-flight layers from the agent, ingests from disk, saved captures', () => {
    const stalls = JSON.parse(readFileSync(join(r.dir, 'pullwatch/stalls.json'), 'utf8')) as { id: string }[];
    expect(stalls.map((s) => s.id)).toEqual(['p1']);
    const inflight = JSON.parse(readFileSync(join(r.dir, 'pullwatch/in-flight.json'), 'utf8')) as { layers: unknown[] }[];
    expect(inflight).toHaveLength(1);
    expect(r.manifest.items.find((i) => i.path === 'pullwatch/tune-plan.json')).toMatchObject({ status: 'missing', error: 'HTTP 404' });
    const ing = JSON.parse(readFileSync(join(r.dir, 'pullwatch/containerd-ingests.json'), 'utf8')) as { ingests: { ref: string; offset: number; total: number }[] };
    expect(ing.ingests[0]).toMatchObject({ ref: 'k8s.io/1/layer-sha256:' + 'a'.repeat(64), offset: 4096, total: 1048576 });
    expect(r.list.some((p) => p.startsWith('pullwatch/captures/') && p.endsWith('.json'))).toBe(true);
  });

  it('never reads /proc/*/environ', () => {
    expect(JSON.stringify(r.manifest)).not.toMatch(/environ/);
  });
});

describe('bundle options', () => {
  it('--no-redact is explicit and recorded', async () => {
    const r = await runBundle('noredact', { redact: false, only: ['kubelet/'] });
    expect(r.manifest.options.noRedact).toBe(true);
    expect(r.raw.toString('latin1')).toContain('plantedKubeconfigToken0987');
    expect(readFileSync(join(r.dir, 'README.txt'), 'utf8')).toMatch(/redaction: +OFF/);
  });

  it('a command over --command-timeout is killed and recorded as timeout', async () => {
    const t0 = Date.now();
    const r = await runBundle('timeout', { commandTimeoutMs: 500, items: [{ kind: 'command', path: 'system/slow.txt', argv: ['sh', '-c', 'echo partial; sleep 60'] }] });
    expect(Date.now() - t0).toBeLessThan(20_000);
    const it0 = r.manifest.items[0]!;
    expect(it0).toMatchObject({ status: 'timeout', archived: true });
    expect(readFileSync(join(r.dir, 'system/slow.txt'), 'utf8')).toContain('partial');
    const { stdout } = await execFileP('ps', ['-eo', 'args']);
    expect(stdout).not.toMatch(/echo partial; sleep 60/);
  });

  it('--exec nsenter runs host tools in the target\'s namespaces, resolved under /proc/PID/root', async () => {
    // PID 1 of this sandbox is not ours to enter; a child of the test stands in for it (same code path).
    const pid = psChild!.pid!;
    const r = await runBundle('nsenter', { hostRoot: '/', exec: 'nsenter', hostPid: pid, items: [
      { kind: 'command', path: 'system/uname.txt', argv: ['uname', '-a'] },
      { kind: 'command', path: 'system/nope.txt', argv: ['pullwatch-no-such-tool'] },
    ] });
    const u = r.manifest.items[0]!;
    expect(u).toMatchObject({ status: 'ok', via: 'nsenter' });
    expect(u.command![0]).toMatch(/\/nsenter$/);
    expect(u.command!.slice(1, 8)).toEqual(['-t', String(pid), '-m', '-u', '-i', '-n', '-p']);
    expect(readFileSync(join(r.dir, 'system/uname.txt'), 'utf8')).toMatch(/Linux/);
    expect(r.manifest.options.exec).toBe('nsenter');
    expect(r.manifest.items[1]).toMatchObject({ status: 'missing' });
  });

  it('a file that grows while bundled is read to its size at open; the archive stays valid', async () => {
    const grow = join(tree.root, 'var/log/cloud-init.log');
    const { appendFileSync, writeFileSync } = await import('node:fs');
    writeFileSync(grow, 'start\n');
    const timer = setInterval(() => appendFileSync(grow, `${new Date().toISOString()} more ${'y'.repeat(4000)}\n`), 1);
    try {
      const r = await runBundle('grow', { only: ['var_log/'] });
      const item = r.manifest.items.find((i) => i.path === 'var_log/cloud-init.log')!;
      expect((await stat(join(r.dir, 'var_log/cloud-init.log'))).size).toBe(item.bytes);
    } finally { clearInterval(timer); }
  });

  it('unreadable files are recorded as errors (CLI run as an unprivileged user)', async () => {
    const main = join(REPO, 'dist/cli/main.js');
    expect(existsSync(main), 'dist/ missing: run `npm run build` first (npm test does)').toBe(true);
    const out = join(work, 'nobody.tar.gz');
    await new Promise<void>((resolveP, reject) => {
      const child = spawn('/usr/bin/setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, join(REPO, 'bin/pullwatch.js'), 'bundle', '-o', '-',
        '--host-root', tree.root, '--exec', 'local', '--only', 'var_log/', '--since', `@${tree.sinceMs / 1000}`, '--until', `@${tree.untilMs / 1000}`, '--captures-dir', join(work, 'none')],
      { stdio: ['ignore', 'pipe', 'pipe'] });
      const ws = createWriteStream(out);
      child.stdout.pipe(ws);
      let err = '';
      child.stderr.on('data', (b: Buffer) => { err += b.toString(); });
      const wsClosed = new Promise<void>((r) => ws.on('close', () => r()));
      child.on('close', (code) => (code === 0 ? wsClosed.then(() => resolveP()) : reject(new Error(`exit ${code}: ${err}`))));
    });
    const dir = join(work, 'nobody-x');
    await mkdir(dir);
    await execFileP('tar', ['-xzf', out, '-C', dir]);
    const m = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as Manifest;
    expect(m.items.find((i) => i.path === 'var_log/kube-proxy.log')).toMatchObject({ status: 'error', archived: false, error: 'unreadable (EACCES)' });
  });
});
