import { cp, copyFile, mkdtemp, mkdir, rm, link } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { HistoryPull } from '../../../agent/tune/types.js';

export const FIXTURES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../fixtures/tune');
export const CONTAINERD16 = '/usr/bin/containerd';
export const CONTAINERD17_DIR = process.env.PULLWATCH_CONTAINERD17_DIR ?? '/opt/pullwatch-test/containerd-1.7';
export const CONTAINERD17 = `${CONTAINERD17_DIR}/usr/bin/containerd`;

export function requireBinary(p: string): void {
  if (!existsSync(p)) throw new Error(`required binary ${p} is missing: run scripts/ensure-test-deps.sh`);
}

/** A writable copy of a recorded layout under a fresh temp dir, with a real containerd binary when asked. */
export async function layoutCopy(name: string, opts: { containerd?: '1.6' | '1.7'; libs?: boolean } = {}): Promise<{ root: string; cleanup: () => Promise<void> }> {
  const root = await mkdtemp(path.join(os.tmpdir(), `pw-tune-${name}-`));
  await cp(path.join(FIXTURES, name), root, { recursive: true, verbatimSymlinks: true });
  if (opts.containerd) {
    const bin = opts.containerd === '1.6' ? CONTAINERD16 : CONTAINERD17;
    requireBinary(bin);
    await mkdir(path.join(root, 'usr/bin'), { recursive: true });
    await linkOrCopy(bin, path.join(root, 'usr/bin/containerd'));
    if (opts.libs) await addLibc(root);
  }
  return { root, cleanup: () => rm(root, { recursive: true, force: true }) };
}

async function linkOrCopy(from: string, to: string): Promise<void> {
  await rm(to, { force: true });
  try { await link(from, to); } catch { await copyFile(from, to); }
}

/** The dynamic loader and libc, so `chroot ROOT /usr/bin/containerd` runs (containerd is linked against libc only). */
export async function addLibc(root: string): Promise<void> {
  for (const lib of ['/lib64/ld-linux-x86-64.so.2', '/lib/x86_64-linux-gnu/libc.so.6']) {
    const real = (await import('node:fs/promises')).realpath(lib);
    const dest = path.join(root, lib);
    await mkdir(path.dirname(dest), { recursive: true });
    await linkOrCopy(await real, dest);
  }
}

/** n completed pulls from one registry whose idle gaps are `gaps` (ms), repeated. */
export function pulls(registry: string, n: number, gaps: number[], extra: Partial<HistoryPull> = {}): HistoryPull[] {
  return Array.from({ length: n }, (_, i) => ({
    id: `${registry}-${i}`, registry, state: 'completed', idleGapsMs: gaps,
    bytesDone: 50_000_000, durationMs: 10_000, rateBytesPerSecond: 5_000_000,
    layers: [{ bytesTotal: 30_000_000 }, { bytesTotal: 20_000_000 }],
    ...extra,
  }));
}
