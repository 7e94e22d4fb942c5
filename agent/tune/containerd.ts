/**
 * containerd config as containerd itself loads it: the main file, then `imports` breadth-first
 * (relative paths against the importing file's directory, `*` globbed, sorted), later files
 * overriding earlier ones. Merge semantics differ by major version (checked against the real
 * 1.6/1.7 binaries and containerd#5837 / #9982):
 *  - 1.x: an imported file that mentions a plugin *replaces that plugin's whole section*;
 *  - 2.x: plugin sections are merged key by key.
 */
import path from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { parseDuration, formatDuration } from '../../common/duration.js';
import type { HostFs } from './hostfs.js';
import { scanToml, findKv, findHeader, mentionsTable, getPath, type TomlScan } from './toml-edit.js';
import type { ContainerdFamily, SettingSource } from './types.js';

export const CONTAINERD_DEFAULT_CONFIG = '/etc/containerd/config.toml';
export const TIMEOUT_KEY = 'image_pull_progress_timeout';

export interface ContainerdFile {
  path: string;
  realPath: string;
  text: string;
  version: number;
  parsed: Record<string, unknown>;
  scan: TomlScan;
  imports: string[];
}

export interface ContainerdView {
  mainPath: string;
  mainExists: boolean;
  files: ContainerdFile[];
  errors: string[];
  warnings: string[];
  /** Effective image_pull_progress_timeout; ms null = not set anywhere (built-in default applies). */
  timeout: { raw: string | null; ms: number | null; source: SettingSource; file?: ContainerdFile; error?: string };
  /** 1.x: the file whose CRI section is effective (the last one that mentions the CRI plugin). */
  criSectionFile?: ContainerdFile;
  grpcAddress: string;
}

/** Table that holds image_pull_progress_timeout for a file of this config version. */
export function timeoutTable(fileVersion: number): string[] {
  if (fileVersion >= 3) return ['plugins', 'io.containerd.cri.v1.images'];
  if (fileVersion === 2) return ['plugins', 'io.containerd.grpc.v1.cri'];
  return ['plugins', 'cri'];
}

export function isMajor2(f: ContainerdFamily): boolean { return f === '2.0' || f === '2.1+'; }

export async function loadContainerdConfig(fs: HostFs, mainPath: string, family: ContainerdFamily): Promise<ContainerdView> {
  const errors: string[] = [];
  const warnings: string[] = [];
  const files: ContainerdFile[] = [];
  const loaded = new Set<string>();
  const pending: string[] = [mainPath];
  let mainExists = true;
  while (pending.length > 0) {
    const p = pending.shift() as string;
    if (loaded.has(p)) continue;
    loaded.add(p);
    const r = await fs.read(p, p === mainPath ? 'containerd config' : 'containerd import');
    if (!r.ok) {
      if (p === mainPath && r.reason === 'missing') { mainExists = false; continue; }
      errors.push(r.reason === 'missing' ? `containerd imports ${p}, which does not exist (containerd would fail to start)` : `cannot read ${p}: ${r.error}`);
      continue;
    }
    let parsed: Record<string, unknown>;
    let scan: TomlScan;
    try {
      parsed = parseToml(r.text) as Record<string, unknown>;
      scan = scanToml(r.text);
    } catch (e) {
      errors.push(`malformed TOML in ${p}: ${(e as Error).message.split('\n')[0]}`);
      continue;
    }
    const version = typeof parsed.version === 'number' ? parsed.version : isMajor2(family) ? 1 : 1;
    const rawImports = Array.isArray(parsed.imports) ? parsed.imports.filter((x): x is string => typeof x === 'string') : [];
    const imports: string[] = [];
    for (const imp of rawImports) {
      let abs = path.posix.normalize(imp);
      if (!path.posix.isAbsolute(abs)) abs = path.posix.join(path.posix.dirname(p), abs);
      if (abs.includes('*')) imports.push(...await fs.glob(abs));
      else imports.push(abs);
    }
    files.push({ path: p, realPath: r.realPath, text: r.text, version, parsed, scan, imports });
    pending.push(...imports);
  }

  let grpcAddress = '/run/containerd/containerd.sock';
  for (const f of files) {
    const a = getPath(f.parsed, ['grpc', 'address']);
    if (typeof a === 'string' && a) grpcAddress = a;
  }

  const view: ContainerdView = {
    mainPath, mainExists, files, errors, warnings, grpcAddress,
    timeout: { raw: null, ms: null, source: { kind: 'default' } },
  };
  if (family === 'no-deadline') return view;

  const major2 = isMajor2(family);
  let setIn: ContainerdFile | undefined;
  if (major2) {
    for (const f of files) if (getPath(f.parsed, [...timeoutTable(f.version), TIMEOUT_KEY]) !== undefined) setIn = f;
  } else {
    for (const f of files) {
      if (mentionsTable(f.scan, timeoutTable(f.version))) view.criSectionFile = f;
    }
    const cri = view.criSectionFile;
    if (cri && getPath(cri.parsed, [...timeoutTable(cri.version), TIMEOUT_KEY]) !== undefined) setIn = cri;
    for (const f of files) {
      if (f !== cri && getPath(f.parsed, [...timeoutTable(f.version), TIMEOUT_KEY]) !== undefined) {
        warnings.push(`${f.path} sets ${TIMEOUT_KEY}, but on containerd 1.x the CRI section of ${cri?.path ?? '?'} replaces it (imports replace whole plugin sections)`);
      }
    }
  }
  if (setIn) {
    const table = timeoutTable(setIn.version);
    const value = getPath(setIn.parsed, [...table, TIMEOUT_KEY]);
    const kv = findKv(setIn.scan, [...table, TIMEOUT_KEY]);
    const key = `${tableDisplay(table)}.${TIMEOUT_KEY}`;
    view.timeout.source = { kind: 'file', path: setIn.path, line: kv?.line ?? null, key };
    view.timeout.file = setIn;
    if (typeof value !== 'string') {
      view.timeout.raw = String(value);
      view.timeout.error = `${TIMEOUT_KEY} in ${setIn.path} must be a duration string such as "5m0s" (found ${typeof value}); containerd would fail to start`;
      errors.push(view.timeout.error);
    } else {
      view.timeout.raw = value;
      try { view.timeout.ms = parseDuration(value); } catch (e) {
        view.timeout.error = `${TIMEOUT_KEY} = "${value}" in ${setIn.path}: ${(e as Error).message}`;
        errors.push(view.timeout.error);
      }
    }
  }
  return view;
}

export function tableDisplay(table: string[]): string {
  return table.map((p, i) => (i === 0 || /^[A-Za-z0-9_-]+$/.test(p) ? p : `"${p}"`)).join('.');
}

/** Parses `containerd config dump` output and returns the effective timeout string (or undefined). */
export function timeoutFromDump(dump: string): string | undefined {
  const parsed = parseToml(dump) as Record<string, unknown>;
  const version = typeof parsed.version === 'number' ? parsed.version : 2;
  const v = getPath(parsed, [...timeoutTable(version), TIMEOUT_KEY]);
  return typeof v === 'string' ? v : undefined;
}

export function goDuration(ms: number): string { return formatDuration(ms); }

export { findHeader };
