/**
 * CRI-O config: /etc/crio/crio.conf, then every file of /etc/crio/crio.conf.d/ in lexical order,
 * each overriding single keys (crio.conf(5)). The deadline is `[crio.image] pull_progress_timeout`.
 */
import { parse as parseToml } from 'smol-toml';
import { parseDuration } from '../../common/duration.js';
import type { HostFs } from './hostfs.js';
import { scanToml, findKv, getPath } from './toml-edit.js';
import type { SettingSource } from './types.js';

export const CRIO_CONFIG = '/etc/crio/crio.conf';
export const CRIO_DROPIN_DIR = '/etc/crio/crio.conf.d';
export const CRIO_TABLE = ['crio', 'image'];
export const CRIO_KEY = 'pull_progress_timeout';

export interface CrioView {
  files: Array<{ path: string; realPath: string; text: string }>;
  errors: string[];
  timeout: { raw: string | null; ms: number | null; source: SettingSource; error?: string };
  dropInDir: string;
}

export async function loadCrioConfig(fs: HostFs, mainPath = CRIO_CONFIG, dropInDir = CRIO_DROPIN_DIR): Promise<CrioView> {
  const view: CrioView = { files: [], errors: [], timeout: { raw: null, ms: null, source: { kind: 'default' } }, dropInDir };
  const paths = [mainPath, ...(await fs.list(dropInDir)).map((n) => `${dropInDir}/${n}`)];
  for (const p of paths) {
    const r = await fs.read(p, p === mainPath ? 'cri-o config' : 'cri-o drop-in');
    if (!r.ok) { if (r.reason !== 'missing') view.errors.push(`cannot read ${p}: ${r.error}`); continue; }
    let parsed: Record<string, unknown>;
    try { parsed = parseToml(r.text) as Record<string, unknown>; } catch (e) {
      view.errors.push(`malformed TOML in ${p}: ${(e as Error).message.split('\n')[0]}`);
      continue;
    }
    view.files.push({ path: p, realPath: r.realPath, text: r.text });
    const v = getPath(parsed, [...CRIO_TABLE, CRIO_KEY]);
    if (v === undefined) continue;
    let line: number | null = null;
    try { line = findKv(scanToml(r.text), [...CRIO_TABLE, CRIO_KEY])?.line ?? null; } catch { /* located by parse only */ }
    view.timeout = { raw: String(v), ms: null, source: { kind: 'file', path: p, line, key: `[crio.image] ${CRIO_KEY}` } };
    if (typeof v !== 'string') view.timeout.error = `${CRIO_KEY} in ${p} must be a duration string such as "5m0s"`;
    else {
      try { view.timeout.ms = parseDuration(v); } catch (e) { view.timeout.error = `${CRIO_KEY} = "${v}" in ${p}: ${(e as Error).message}`; }
    }
  }
  if (view.timeout.error) view.errors.push(view.timeout.error);
  return view;
}
