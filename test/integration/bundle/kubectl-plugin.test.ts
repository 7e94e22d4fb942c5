/**
 * The kubectl plugin, tested in two parts (exec is a streaming protocol the in-test API server
 * does not speak):
 *  1. pod lookup: the real kubectl against a small in-test HTTP server serving the real API paths
 *     (discovery, /api/v1/pods with labelSelector/fieldSelector), via a kubeconfig pointing at it;
 *  2. streaming: a fake `kubectl` first on PATH whose `exec` runs the local `pullwatch bundle -o -`.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildHostTree, type HostTree } from './host-tree.js';

const execFileP = promisify(execFile);
const REPO = resolve(import.meta.dirname, '../../..');
const PLUGIN = join(REPO, 'bin/kubectl-pullwatch');

function pod(name: string, node: string, phase: string, ns = 'pullwatch') {
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: ns, labels: { 'app.kubernetes.io/name': 'pullwatch-agent' } },
    spec: { nodeName: node, containers: [{ name: 'agent', image: 'pullwatch:dev' }] }, status: { phase } };
}
const PODS = [pod('pullwatch-agent-old', 'node-a', 'Failed'), pod('pullwatch-agent-x1', 'node-a', 'Running'), pod('pullwatch-agent-y2', 'node-b', 'Running')];

let work: string;
let api: Server;
let kubeconfig: string;
const requests: string[] = [];

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  return new Promise((res, rej) => {
    const c = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = []; let err = '';
    c.stdout.on('data', (b: Buffer) => out.push(b));
    c.stderr.on('data', (b: Buffer) => { err += b.toString(); });
    c.on('error', rej);
    c.on('close', (code) => res({ code, stdout: Buffer.concat(out), stderr: err }));
  });
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'pw-kplugin-'));
  api = createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    requests.push(req.url ?? '');
    res.setHeader('content-type', 'application/json');
    const send = (o: unknown) => res.end(JSON.stringify(o));
    if (u.pathname === '/api') return send({ kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: '127.0.0.1' }] });
    if (u.pathname === '/apis') return send({ kind: 'APIGroupList', apiVersion: 'v1', groups: [] });
    if (u.pathname === '/api/v1') return send({ kind: 'APIResourceList', groupVersion: 'v1', resources: [{ name: 'pods', singularName: 'pod', namespaced: true, kind: 'Pod', verbs: ['get', 'list', 'watch'], shortNames: ['po'] }] });
    const m = /^\/api\/v1(?:\/namespaces\/([^/]+))?\/pods$/.exec(u.pathname);
    if (m) {
      const label = u.searchParams.get('labelSelector');
      const field = u.searchParams.get('fieldSelector') ?? '';
      const node = /spec\.nodeName=([^,]+)/.exec(field)?.[1];
      const items = PODS.filter((p) => label === 'app.kubernetes.io/name=pullwatch-agent' && (!node || p.spec.nodeName === node) && (!m[1] || p.metadata.namespace === m[1]));
      return send({ kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: '1' }, items });
    }
    res.statusCode = 404;
    send({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'NotFound', code: 404 });
  });
  await new Promise<void>((r) => api.listen(0, '127.0.0.1', r));
  const a = api.address();
  const port = typeof a === 'object' && a ? a.port : 0;
  kubeconfig = join(work, 'kubeconfig');
  await writeFile(kubeconfig, `apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: http://127.0.0.1:${port}\ncontexts:\n- name: t\n  context:\n    cluster: t\n    user: u\ncurrent-context: t\nusers:\n- name: u\n  user: {}\n`);
});

afterAll(async () => {
  api?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

describe('kubectl pullwatch: pod lookup with the real kubectl', () => {
  const env = () => ({ ...process.env, KUBECONFIG: kubeconfig, HOME: work });

  it('finds the running agent pod on the node by label and field selector', async () => {
    expect(existsSync('/usr/bin/kubectl') || existsSync('/usr/local/bin/kubectl'), 'kubectl is required').toBe(true);
    const r = await run(process.execPath, [PLUGIN, 'pod', 'node-a'], env());
    expect(r.stderr).toBe('');
    expect(r.stdout.toString()).toBe('pullwatch/pullwatch-agent-x1 agent\n');
    const list = requests.find((q) => q.startsWith('/api/v1/pods?'))!;
    const q = new URL(list, 'http://x').searchParams;
    expect(q.get('labelSelector')).toBe('app.kubernetes.io/name=pullwatch-agent');
    expect(q.get('fieldSelector')).toBe('spec.nodeName=node-a');
  });

  it('uses the namespace when given, and fails clearly when no pod runs there', async () => {
    const ok = await run(process.execPath, [PLUGIN, 'pod', 'node-b', '-n', 'pullwatch'], env());
    expect(ok.stdout.toString()).toBe('pullwatch/pullwatch-agent-y2 agent\n');
    expect(requests.some((q) => q.startsWith('/api/v1/namespaces/pullwatch/pods?'))).toBe(true);
    const none = await run(process.execPath, [PLUGIN, 'bundle', 'node-z', '-o', join(work, 'x.tgz')], env());
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/no running pullwatch agent pod .* on node node-z/);
  });
});

describe('kubectl pullwatch bundle: streaming through a fake kubectl exec', () => {
  let tree: HostTree;
  beforeAll(async () => {
    tree = await buildHostTree({ messagesBytes: 2 * 1024 * 1024 });
    const bin = join(work, 'fakebin');
    await mkdir(bin);
    // fake kubectl: `get pods` answers from a fixture, `exec … -- pullwatch bundle …` runs the local CLI
    await writeFile(join(bin, 'kubectl'), `#!${process.execPath}
const a = process.argv.slice(2);
if (a.includes('get')) { process.stdout.write(${JSON.stringify(JSON.stringify({ kind: 'PodList', items: PODS }))}); process.exit(0); }
const i = a.indexOf('--');
if (a.includes('exec') && i >= 0 && a[i + 1] === 'pullwatch') {
  const { spawn } = require('node:child_process');
  const c = spawn(process.execPath, [${JSON.stringify(join(REPO, 'bin/pullwatch.js'))}, ...a.slice(i + 2)], { stdio: 'inherit' });
  c.on('close', (code) => process.exit(code ?? 1));
} else { process.stderr.write('fake kubectl: unexpected ' + a.join(' ')); process.exit(3); }
`);
    await chmod(join(bin, 'kubectl'), 0o755);
    process.env.PW_FAKE_BIN = bin;
  }, 60_000);
  afterAll(async () => {
    for (const s of tree?.servers ?? []) s.close();
    if (tree) await rm(tree.root, { recursive: true, force: true });
  });

  it('writes a valid, redacted tar.gz of the node', async () => {
    expect(existsSync(join(REPO, 'dist/cli/main.js')), 'dist/ missing: run `npm run build` first (npm test does)').toBe(true);
    const out = join(work, 'node-a.tar.gz');
    const env = { ...process.env, PATH: `${process.env.PW_FAKE_BIN}:${process.env.PATH}` };
    const r = await run(process.execPath, [PLUGIN, 'bundle', 'node-a', '-o', out, '--', '--host-root', tree.root, '--exec', 'local', '--only', 'kubelet/', 'var_log/',
      '--since', `@${tree.sinceMs / 1000}`, '--until', `@${tree.untilMs / 1000}`], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/bundling node node-a from pod pullwatch\/pullwatch-agent-x1/);
    const { stdout } = await execFileP('tar', ['-tzf', out]);
    const list = stdout.trim().split('\n');
    expect(list[0]).toBe('README.txt');
    expect(list[list.length - 1]).toBe('manifest.json');
    expect(list).toContain('kubelet/kubeconfig');
    const raw = gunzipSync(readFileSync(out)).toString('latin1');
    for (const s of tree.secrets) expect(raw.includes(s), s).toBe(false);
  });
});
