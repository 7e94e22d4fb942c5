/**
 * A node's filesystem built by the test: kubeadm and EKS config layouts, large and rotated logs
 * with syslog/CRI timestamps, planted secrets of every kind, and the things a collector must not
 * block on (FIFOs, sockets, device nodes, symlink loops). Journals are real journal files written
 * by systemd-journal-remote from export-format input.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, open, symlink, utimes, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { PLANTED } from '../../fixtures/bundle/planted-secrets.js';

const execFileP = promisify(execFile);
export const JOURNAL_REMOTE = '/lib/systemd/systemd-journal-remote';

export interface HostTree {
  root: string;
  now: number;
  sinceMs: number;
  untilMs: number;
  /** Secrets that must never appear in a redacted bundle. */
  secrets: string[];
  /** Journal message text inside / outside the window. */
  journalInside: string[];
  journalOutside: string[];
  servers: Server[];
}

const MON = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
export function syslogTime(ms: number): string {
  const d = new Date(ms);
  const p = (n: number): string => String(n).padStart(2, '0');
  return `${MON[d.getUTCMonth()]} ${String(d.getUTCDate()).padStart(2, ' ')} ${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())}`;
}

async function put(root: string, rel: string, text: string | Buffer, mode?: number): Promise<string> {
  const p = join(root, rel);
  await mkdir(dirname(p), { recursive: true });
  await writeFile(p, text);
  if (mode !== undefined) await chmod(p, mode);
  return p;
}

/** Writes a syslog-format file with one line every `stepMs` over [from, to], `lineBytes` long. */
export async function writeSyslog(path: string, from: number, to: number, stepMs: number, lineBytes: number, extra: Map<number, string> = new Map()): Promise<{ lines: number; bytes: number }> {
  await mkdir(dirname(path), { recursive: true });
  const fh = await open(path, 'w');
  let batch: string[] = [];
  let lines = 0;
  let bytes = 0;
  let i = 0;
  for (let t = from; t <= to; t += stepMs, i++) {
    const head = `${syslogTime(t)} node1 kernel: [${i}] seq=${i} `;
    const pad = Math.max(0, lineBytes - head.length - 1);
    let line = head + 'x'.repeat(pad) + '\n';
    const e = extra.get(i);
    if (e) line = `${syslogTime(t)} node1 agent[42]: ${e}`;
    batch.push(line);
    lines++;
    bytes += Buffer.byteLength(line);
    if (batch.length >= 4096) { await fh.write(batch.join('')); batch = []; }
  }
  if (batch.length) await fh.write(batch.join(''));
  await fh.close();
  return { lines, bytes };
}

function exportEntry(t: number, seq: number, unit: string, msg: string): string {
  const boot = '0123456789abcdef0123456789abcdef';
  return [
    `__REALTIME_TIMESTAMP=${t * 1000}`, `__MONOTONIC_TIMESTAMP=${seq * 1000}`, `_BOOT_ID=${boot}`, '_HOSTNAME=node1',
    '_TRANSPORT=journal', 'PRIORITY=6', `_SYSTEMD_UNIT=${unit}`, `SYSLOG_IDENTIFIER=${unit.replace('.service', '')}`,
    `MESSAGE=${msg}`, '', '',
  ].join('\n');
}

export async function buildHostTree(opts: { messagesBytes?: number } = {}): Promise<HostTree> {
  if (!existsSync(JOURNAL_REMOTE)) throw new Error(`${JOURNAL_REMOTE} is required (apt-get install systemd-journal-remote)`);
  const root = await mkdtemp(join(tmpdir(), 'pw-bundle-host-'));
  await chmod(root, 0o755);
  const now = Math.floor(Date.now() / 1000) * 1000;
  const sinceMs = now - 6 * 3600_000;
  const untilMs = now - 1 * 3600_000;
  const secrets = PLANTED.map((p) => p.secret);
  const servers: Server[] = [];

  // identity, kubeadm and EKS layouts
  await put(root, 'etc/hostname', 'node1\n');
  await put(root, 'etc/os-release', 'PRETTY_NAME="Amazon Linux 2023"\nID="amzn"\n');
  await put(root, 'etc/resolv.conf', 'nameserver 10.0.0.2\nsearch ec2.internal\n');
  await put(root, 'etc/fstab', 'UUID=abc / xfs defaults 0 0\n');
  await put(root, 'var/lib/kubelet/config.yaml', 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nserializeImagePulls: true\nregistryPullQPS: 5\n');
  await put(root, 'var/lib/kubelet/kubeadm-flags.env', 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.9"\n');
  await put(root, 'etc/kubernetes/kubelet.conf', 'apiVersion: v1\nkind: Config\nusers:\n- name: system:node:node1\n  user:\n    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem\n    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem\n');
  await put(root, 'etc/kubernetes/kubelet/kubelet-config.json', JSON.stringify({ kind: 'KubeletConfiguration', serializeImagePulls: false, maxParallelImagePulls: 5 }, null, 2) + '\n');
  await put(root, 'etc/kubernetes/kubelet/config.json', JSON.stringify({ kind: 'KubeletConfiguration', imageServiceEndpoint: 'unix:///run/containerd/containerd.sock' }) + '\n');
  await put(root, 'etc/kubernetes/kubelet/config.json.d/40-nodeadm.conf', JSON.stringify({ apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration', maxPods: 58 }) + '\n');
  await put(root, 'etc/systemd/system/kubelet.service.d/30-kubelet-extra-args.conf', '[Service]\nEnvironment=\'KUBELET_EXTRA_ARGS=--node-labels=x=y\'\n');
  await put(root, 'etc/cni/net.d/10-aws.conflist', JSON.stringify({ cniVersion: '0.4.0', name: 'aws-cni', plugins: [{ type: 'aws-cni' }] }) + '\n');

  // planted secrets in their files (kubeconfigs, docker/containers auth, containerd config, cloud creds, keys)
  for (const p of PLANTED) if (p.file) await put(root, p.file, p.text);

  // var/log: a big messages with timestamps over 12h, rotated and compressed ones, pod logs
  const loose = PLANTED.filter((p) => !p.file).map((p) => p.text.replace(/\n(?!$)/g, '\n'));
  const extra = new Map<number, string>();
  const step = 1000;
  const lineBytes = Math.max(80, Math.floor((opts.messagesBytes ?? 24 * 1024 * 1024) / (12 * 3600)));
  // place the loose secrets inside the window (3h ago)
  const base = Math.floor((now - 1.5 * 3600_000 - (now - 12 * 3600_000)) / step); // inside the window and the tail cap
  loose.forEach((t, i) => extra.set(base + i, t));
  await writeSyslog(join(root, 'var/log/messages'), now - 12 * 3600_000, now, step, lineBytes, extra);
  const old = await put(root, 'var/log/messages.1', `${syslogTime(now - 30 * 3600_000)} node1 old rotated\n`);
  await utimes(old, new Date(now - 29 * 3600_000), new Date(now - 29 * 3600_000));
  await put(root, 'var/log/syslog.2.gz', Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
  await put(root, 'var/log/cloud-init-output.log', 'Cloud-init v. 23.1 running\nno timestamps here\n');
  const podLog = PLANTED.find((p) => p.rule === 'jwt')!;
  await put(root, podLog.file!, [
    `${new Date(now - 8 * 3600_000).toISOString()} stdout F outside window before\n`,
    podLog.text.replace('2026-01-01T00:00:00.000000000Z', new Date(now - 2 * 3600_000).toISOString()),
    `${new Date(now - 1800_000).toISOString()} stdout F outside window after\n`,
  ].join(''));

  // things that must not block or break: FIFO, socket, char device, symlink loop, dangling link
  await execFileP('mkfifo', [join(root, 'var/log/messages.fifo')]);
  await execFileP('mkfifo', [join(root, 'var/log/pods/kube-system_aws-node-abc_1/aws-node/1.log')]);
  const sockPath = join(root, 'var/log/syslog.sock');
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(sockPath, r));
  servers.push(srv);
  try { await execFileP('mknod', [join(root, 'var/log/cron'), 'c', '1', '3']); } catch { /* no mknod permission: the others still cover it */ }
  await symlink('cron.loop2', join(root, 'var/log/cron.loop1'));
  await symlink('cron.loop1', join(root, 'var/log/cron.loop2'));
  await symlink('/nonexistent/file', join(root, 'var/log/cron.dangling'));
  await put(root, 'var/log/kube-proxy.log', `${new Date(now - 2 * 3600_000).toISOString()} I am unreadable by others\n`, 0o000);

  // containerd ingest on disk
  const ing = join(root, 'var/lib/containerd/io.containerd.content.v1.content/ingest/0f3a');
  await put(root, join('var/lib/containerd/io.containerd.content.v1.content/ingest/0f3a', 'ref'), 'k8s.io/1/layer-sha256:' + 'a'.repeat(64));
  await put(root, join('var/lib/containerd/io.containerd.content.v1.content/ingest/0f3a', 'total'), '1048576');
  await put(root, join('var/lib/containerd/io.containerd.content.v1.content/ingest/0f3a', 'startedat'), new Date(now - 600_000).toISOString());
  await put(root, join('var/lib/containerd/io.containerd.content.v1.content/ingest/0f3a', 'updatedat'), new Date(now - 600_000).toISOString());
  await writeFile(join(ing, 'data'), Buffer.alloc(4096));

  // journals: real journal files from export format
  const journalInside: string[] = [];
  const journalOutside: string[] = [];
  const entries: string[] = [];
  let seq = 1;
  const add = (t: number, unit: string, msg: string, inside: boolean): void => {
    entries.push(exportEntry(t, seq++, unit, msg));
    (inside ? journalInside : journalOutside).push(msg);
  };
  add(now - 7 * 3600_000, 'kubelet.service', 'kubelet journal before window', false);
  add(now - 5 * 3600_000, 'kubelet.service', 'I1121 "Pulling image" image="registry.example.com/app:1" kubelet inside 1', true);
  add(now - 4 * 3600_000, 'kubelet.service', 'kubelet inside 2 using --db-password Planted-Cmdline-Pa55', true);
  add(now - 4 * 3600_000 + 1, 'containerd.service', 'level=info msg="PullImage \\"registry.example.com/app:1\\"" containerd inside', true);
  add(now - 3 * 3600_000, 'containerd.service', `containerd inside token ${PLANTED.find((p) => p.rule === 'jwt')!.secret}`, true);
  add(now - 1800_000, 'kubelet.service', 'kubelet journal after window', false);
  const jdir = join(root, 'var/log/journal/0123456789abcdef0123456789abcdef');
  await mkdir(jdir, { recursive: true });
  await new Promise<void>((resolve, reject) => {
    const child = spawn(JOURNAL_REMOTE, [`--output=${join(jdir, 'remote.journal')}`, '-'], { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (b: Buffer) => { err += b.toString(); });
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`systemd-journal-remote exit ${code}: ${err}`))));
    child.stdin.end(entries.join(''));
  });
  return { root, now, sinceMs, untilMs, secrets, journalInside, journalOutside, servers };
}
