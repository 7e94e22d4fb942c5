import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeKubeApi } from '../../harness/kube-api/server.js';

const BIN = resolve(import.meta.dirname, '../../../bin/pullwatch.js');
const DIGEST = `sha256:${'cd34'.repeat(16)}`;
const IMAGE = 'registry.example.com/team/app:v1';

async function waitFor<T>(what: string, fn: () => T | undefined | Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    const v = await fn();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * The whole agent process (pods from the API, ingests from disk, pull start from a containerd log
 * line) puts a PullStalled Event on the pod that waits for the stalled image.
 */
describe('pullwatch agent with the Kubernetes API (in-test API server)', () => {
  let dir: string;
  let api: FakeKubeApi;
  let agent: ChildProcess;
  let logs = '';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'pullwatch-agent-kube-'));
    api = await FakeKubeApi.start({ nodeName: 'node-k', containerRuntimeVersion: 'containerd://1.7.24' });
    api.addPod({ namespace: 'shop', name: 'web-0', nodeName: 'node-k', containers: [{ name: 'app', image: IMAGE, waiting: 'ContainerCreating' }] });
    api.addPod({ namespace: 'shop', name: 'other', nodeName: 'node-x', containers: [{ name: 'app', image: IMAGE, waiting: 'ContainerCreating' }] });
    const content = join(dir, 'containerd', 'io.containerd.content.v1.content');
    const ingest = join(content, 'ingest', 'e'.repeat(64));
    mkdirSync(ingest, { recursive: true });
    mkdirSync(join(content, 'blobs', 'sha256'), { recursive: true });
    const now = new Date().toISOString();
    writeFileSync(join(ingest, 'ref'), `k8s.io/3/layer-${DIGEST}`);
    writeFileSync(join(ingest, 'total'), '40000000');
    writeFileSync(join(ingest, 'startedat'), now);
    writeFileSync(join(ingest, 'updatedat'), now);
    writeFileSync(join(ingest, 'data'), Buffer.alloc(4_200_000));
    const log = join(dir, 'containerd.log');
    writeFileSync(log, `time="${now}" level=info msg="PullImage \\"${IMAGE}\\""\n`);
    agent = spawn(process.execPath, [
      BIN, 'agent', '--kubeconfig', api.writeKubeconfig(dir), '--node-name', 'node-k', '--listen', '127.0.0.1:0',
      '--containerd-root', join(dir, 'containerd'), '--containerd-socket', join(dir, 'none.sock'), '--docker-root', join(dir, 'none'),
      '--log-source', `file:${log}`, '--stall-after', '3s', '--poll', '500ms', '--queue-dir', join(dir, 'q'),
    ], { stdio: ['ignore', 'ignore', 'pipe'] });
    agent.stderr?.on('data', (b: Buffer) => { logs += b.toString(); });
    // keep the blob growing for a moment so the pull is live, then let it stall
    const grow = setInterval(() => appendFileSync(join(ingest, 'data'), Buffer.alloc(50_000)), 200);
    await new Promise((r) => setTimeout(r, 1500));
    clearInterval(grow);
  });

  afterAll(async () => {
    if (agent?.pid) { try { process.kill(agent.pid, 'SIGKILL'); } catch { /* gone */ } }
    await api?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('creates a PullStalled Event on the waiting pod of this node only, with a message a person reads', async () => {
    const ev = await waitFor('PullStalled event', () => [...api.events.values()].find((e) => e.reason === 'PullStalled'), 20_000)
      .catch((err: Error) => { throw new Error(`${err.message}\nagent log:\n${logs}`); });
    expect(ev).toMatchObject({
      type: 'Warning', reportingController: 'pullwatch.io/agent', reportingInstance: 'node-k',
      regarding: { kind: 'Pod', namespace: 'shop', name: 'web-0' },
    });
    expect(String(ev.note)).toMatch(/layer sha256:cd34cd34cd34\S* stalled at \d+(\.\d)? MB of 40(\.0)? MB/);
    expect(String(ev.note)).toMatch(/registry\.example\.com/);
    expect([...api.events.values()].filter((e) => (e.regarding as { name: string }).name === 'other')).toHaveLength(0);
  });
});
