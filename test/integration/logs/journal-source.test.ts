import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLogSources, JournalLogSource } from '../../../agent/sources/logs/index.js';
import { FIXTURES } from '../../unit/logs/fixtures.js';
import { sleep, testContext, waitFor } from './helpers.js';

const JOURNAL_REMOTE = '/lib/systemd/systemd-journal-remote';
const BOOT_ID = '0123456789abcdef0123456789abcdef';

interface Entry { unit?: string; ident?: string; at: number; message: string | Buffer }

/** Journal export format (systemd.journal-export-formats(7)); binary-safe form for non-text values. */
function exportFormat(entries: Entry[], monoStart: number): Buffer {
  const parts: Buffer[] = [];
  const text = (k: string, v: string) => parts.push(Buffer.from(`${k}=${v}\n`));
  entries.forEach((e, i) => {
    text('__REALTIME_TIMESTAMP', String(e.at * 1000));
    text('__MONOTONIC_TIMESTAMP', String(monoStart + i));
    text('_BOOT_ID', BOOT_ID);
    if (e.unit) text('_SYSTEMD_UNIT', e.unit);
    if (e.ident) text('SYSLOG_IDENTIFIER', e.ident);
    if (typeof e.message === 'string' && !e.message.includes('\n')) text('MESSAGE', e.message);
    else {
      const data = Buffer.isBuffer(e.message) ? e.message : Buffer.from(e.message);
      const len = Buffer.alloc(8);
      len.writeBigUInt64LE(BigInt(data.length));
      parts.push(Buffer.from('MESSAGE\n'), len, data, Buffer.from('\n'));
    }
    parts.push(Buffer.from('\n'));
  });
  return Buffer.concat(parts);
}

/** Writes entries into DIR/system.journal with the real systemd-journal-remote. */
function writeJournal(dir: string, entries: Entry[], monoStart: number): void {
  const r = spawnSync(JOURNAL_REMOTE, [`--output=${join(dir, 'system.journal')}`, '-'], {
    input: exportFormat(entries, monoStart), timeout: 20_000, killSignal: 'SIGKILL',
  });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`systemd-journal-remote failed (${r.status}): ${r.stderr.toString()}`);
}

const T0 = Date.UTC(2026, 10, 21, 9, 0, 0);
const KUBELET_PULLING = 'I1121 09:00:00.000000    1234 event.go:389] "Event occurred" object="default/web-0" fieldPath="spec.containers{web}" kind="Pod" apiVersion="v1" type="Normal" reason="Pulling" message="Pulling image \\"nginx:1.27\\""';
const CONTAINERD_PULL = 'time="2026-11-21T09:00:00.100Z" level=info msg="PullImage \\"nginx:1.27\\""';
const CONTAINERD_CANCEL_NON_UTF8 = Buffer.concat([Buffer.from('time="2026-11-21T09:05:00Z" level=error msg="cancel pulling image nginx:1.27 because of no progress in 5m0s" junk='), Buffer.from([0xff, 0xfe])]);
const CRIO_PULL = 'time="2026-11-21 09:00:01.000000000Z" level=info msg="Pulling image: quay.io/pw/a:1" id=req-1 name=/runtime.v1.ImageService/PullImage';
const CRIO_TIMEOUT = 'time="2026-11-21 09:00:11.000000000Z" level=warning msg="Timed out on waiting up to 10s for image pull progress updates" id=req-1 name=/runtime.v1.ImageService/PullImage';

describe('JournalLogSource on real journal files (systemd-journal-remote → journalctl)', () => {
  let dir: string;
  const sources: JournalLogSource[] = [];

  beforeAll(() => {
    if (!existsSync(JOURNAL_REMOTE)) {
      throw new Error(`${JOURNAL_REMOTE} is missing: install the Debian package systemd-journal-remote (scripts/ensure-test-deps.sh does)`);
    }
    const jc = spawnSync('journalctl', ['--version']);
    if (jc.error || jc.status !== 0) throw new Error('journalctl is missing: install systemd (journalctl) to run the journal tests');
    dir = mkdtempSync(join(tmpdir(), 'pw-journal-'));
  });
  afterEach(async () => {
    for (const s of sources.splice(0)) await s.stop();
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('reads kubelet/containerd/crio entries with their journal time, non-UTF-8 messages, and follows appends', async () => {
    const jdir = join(dir, 'follow');
    mkdirSync(jdir);
    writeJournal(jdir, [
      { unit: 'kubelet.service', ident: 'kubelet', at: T0, message: KUBELET_PULLING },
      { unit: 'containerd.service', ident: 'containerd', at: T0 + 100, message: CONTAINERD_PULL },
      { unit: 'sshd.service', ident: 'sshd', at: T0 + 150, message: 'Accepted publickey for root' },
      { unit: 'crio.service', ident: 'crio', at: T0 + 1000, message: CRIO_PULL },
    ], 1000);
    const ctx = testContext();
    const src = new JournalLogSource({ directory: jdir, restartMinMs: 200 });
    sources.push(src);
    await src.start(ctx);
    await waitFor('three pull starts', () => ctx.observations.length === 3);
    expect(ctx.observations).toEqual([
      { kind: 'log', at: T0, source: `journal:${jdir}`, event: { type: 'pull-started', component: 'kubelet', image: 'nginx:1.27', pod: 'default/web-0' } },
      { kind: 'log', at: T0 + 100, source: `journal:${jdir}`, event: { type: 'pull-started', component: 'containerd', image: 'nginx:1.27' } },
      { kind: 'log', at: T0 + 1000, source: `journal:${jdir}`, event: { type: 'pull-started', component: 'cri-o', image: 'quay.io/pw/a:1' } },
    ]);
    expect(src.pid).toBeGreaterThan(0);

    // entries appended later reach the running journalctl --follow
    writeJournal(jdir, [
      { unit: 'containerd.service', ident: 'containerd', at: T0 + 300_000, message: CONTAINERD_CANCEL_NON_UTF8 },
      { unit: 'crio.service', ident: 'crio', at: T0 + 11_000, message: CRIO_TIMEOUT },
    ], 2000);
    await waitFor('appended cancel lines', () => ctx.observations.length === 5, 20_000);
    expect(ctx.events().slice(3)).toEqual([
      { type: 'pull-cancelled', component: 'containerd', image: 'nginx:1.27', deadlineMs: 300_000 },
      { type: 'pull-cancelled', component: 'cri-o', image: 'quay.io/pw/a:1', deadlineMs: 10_000 },
    ]);
    expect(ctx.observations[3]?.at).toBe(T0 + 300_000);

    // journalctl killed: reported, restarted, resumes after the last cursor (no duplicates)
    const pid = src.pid as number;
    process.kill(pid, 'SIGKILL');
    await waitFor('restart', () => src.starts >= 2 && src.pid !== undefined && src.pid !== pid, 20_000);
    expect(ctx.healthCount('journalctl-exited')).toBeGreaterThanOrEqual(1);
    expect(src.args()).toContain('--after-cursor');
    writeJournal(jdir, [{ unit: 'kubelet.service', ident: 'kubelet', at: T0 + 400_000, message: KUBELET_PULLING.replace('nginx:1.27', 'nginx:1.28') }], 3000);
    await waitFor('entry after restart', () => ctx.observations.length >= 6, 20_000);
    await sleep(300);
    expect(ctx.events().map((e) => e.image)).toEqual(['nginx:1.27', 'nginx:1.27', 'quay.io/pw/a:1', 'nginx:1.27', 'quay.io/pw/a:1', 'nginx:1.28']);

    const lastPid = src.pid as number;
    await src.stop();
    expect(() => process.kill(lastPid, 0)).toThrow(); // the child is gone
  });

  it('plain `journal` with a host root reads <root>/var/log/journal/<machine-id> through journalctl --root', async () => {
    const root = join(dir, 'hostroot');
    const jdir = join(root, 'var', 'log', 'journal', BOOT_ID);
    mkdirSync(join(root, 'etc'), { recursive: true });
    mkdirSync(jdir, { recursive: true });
    writeFileSync(join(root, 'etc', 'machine-id'), `${BOOT_ID}\n`);
    writeJournal(jdir, [{ unit: 'containerd.service', ident: 'containerd', at: T0, message: CONTAINERD_PULL }], 1);
    const [src] = createLogSources(['journal'], { hostRoot: root }) as JournalLogSource[];
    sources.push(src as JournalLogSource);
    const ctx = testContext();
    await src!.start(ctx);
    await waitFor('entry read through --root', () => ctx.observations.length === 1);
    expect(ctx.observations[0]).toEqual({ kind: 'log', at: T0, source: 'journal', event: { type: 'pull-started', component: 'containerd', image: 'nginx:1.27' } });
  });

  it('the recorded export sample (a containerd 1.7.0-1.7.9 default-timeout cancel) read back through a real journal', async () => {
    // test/fixtures/logs/journal-export.txt is journal export format (BUILT: the 1m0s default of 1.7.0-1.7.9, the wording of the real lines in containerd-1.7-captured.txt)
    const jdir = join(dir, 'export-sample');
    mkdirSync(jdir);
    const r = spawnSync(JOURNAL_REMOTE, [`--output=${join(jdir, 'system.journal')}`, '-'], {
      input: readFileSync(`${FIXTURES}journal-export.txt`), timeout: 20_000, killSignal: 'SIGKILL',
    });
    expect(r.status, r.stderr?.toString()).toBe(0);
    const ctx = testContext();
    const src = new JournalLogSource({ directory: jdir, restartMinMs: 200 });
    sources.push(src);
    await src.start(ctx);
    await waitFor('four pull lines', () => ctx.observations.length === 4);
    const image = 'registry.example.com/team/web:2.1';
    expect(ctx.observations.map((o) => [o.at, o.event])).toEqual([
      [1795251600000, { type: 'pull-started', component: 'kubelet', image, pod: 'default/web-0' }],
      [1795251600100, { type: 'pull-started', component: 'containerd', image }],
      [1795251660200, { type: 'pull-cancelled', component: 'containerd', image, deadlineMs: 60_000 }],
      [1795251660300, { type: 'pull-failed', component: 'containerd', image, error: `rpc error: code = Canceled desc = failed to pull and unpack image "${image}": context canceled` }],
    ]);
  });

  it('no journal directory: reported, retried with backoff, never fatal', async () => {
    const ctx = testContext();
    const src = new JournalLogSource({ directory: join(dir, 'does-not-exist'), restartMinMs: 100, restartMaxMs: 400 });
    sources.push(src);
    await src.start(ctx);
    await waitFor('journalctl exits reported and retried', () => ctx.healthCount('journalctl-exited') >= 2 && src.starts >= 2);
    const entry = ctx.health.snapshot().find((e) => e.cause === 'journalctl-exited');
    expect(entry?.lastMessage).toMatch(/journalctl exited \(code 1\)/);
    expect(ctx.observations).toEqual([]);
  });

  it('an empty journal directory that gets a journal later is picked up', async () => {
    const jdir = join(dir, 'later');
    mkdirSync(jdir);
    const ctx = testContext();
    const src = new JournalLogSource({ directory: jdir, restartMinMs: 100, restartMaxMs: 300 });
    sources.push(src);
    await src.start(ctx);
    await sleep(300);
    writeJournal(jdir, [{ unit: 'containerd.service', at: T0, message: CONTAINERD_PULL }], 1);
    await waitFor('entry from the new journal', () => ctx.observations.length === 1, 20_000);
  });

  it('journalctl missing: reported as journalctl-missing, agent keeps running', async () => {
    const ctx = testContext();
    const src = new JournalLogSource({ directory: dir, journalctl: join(dir, 'no-such-journalctl'), restartMinMs: 100, restartMaxMs: 200 });
    sources.push(src);
    await src.start(ctx);
    await waitFor('missing reported twice', () => ctx.healthCount('journalctl-missing') >= 2);
    await src.stop();
  });
});
