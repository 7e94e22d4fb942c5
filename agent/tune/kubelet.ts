/**
 * kubelet: effective pull-related settings from its command line (systemd unit + drop-ins + env
 * files), its --config file (YAML or JSON) and --config-dir drop-ins (`*.conf`, lexical order).
 * Precedence (kubelet docs): flags > --config-dir drop-ins > --config file > built-in defaults.
 */
import { parseDocument, isMap, isScalar, type Document } from 'yaml';
import type { HostFs } from './hostfs.js';
import type { Flag } from './systemd.js';
import type { SettingSource } from './types.js';

export type KubeletKey = 'serializeImagePulls' | 'maxParallelImagePulls' | 'registryPullQPS' | 'registryBurst';

export const KUBELET_DEFAULTS: Record<KubeletKey, number | boolean | null> = {
  serializeImagePulls: true,
  maxParallelImagePulls: null,
  registryPullQPS: 5,
  registryBurst: 10,
};

/** Deprecated kubelet flags that still override the config file. */
export const KUBELET_FLAG_FOR: Partial<Record<KubeletKey, string>> = {
  serializeImagePulls: 'serialize-image-pulls',
  registryPullQPS: 'registry-qps',
  registryBurst: 'registry-burst',
};

export const KUBELET_VALUE_FLAGS = new Set([
  'config', 'config-dir', 'image-pull-progress-deadline', 'registry-qps', 'registry-burst',
  'container-runtime-endpoint', 'kubeconfig', 'bootstrap-kubeconfig', 'container-runtime', 'network-plugin',
  'image-credential-provider-config', 'image-credential-provider-bin-dir', 'node-ip', 'node-labels',
  'pod-infra-container-image', 'hostname-override', 'cloud-provider', 'provider-id', 'v', 'runtime-cgroups',
]);

export interface KubeletFile {
  path: string;
  realPath: string;
  text: string;
  format: 'yaml' | 'json';
  data: Record<string, unknown>;
  doc: Document;
}

export interface KubeletValue { raw: string | null; value: number | boolean | null; source: SettingSource; error?: string }

export interface KubeletView {
  configFile?: KubeletFile;
  configPath?: string;
  configDir?: string;
  dropIns: KubeletFile[];
  errors: string[];
  values: Record<KubeletKey, KubeletValue>;
  runtimeEndpoint?: string;
}

export function parseKubeletConfigText(text: string, path: string): KubeletFile {
  const trimmed = text.trimStart();
  const format: 'yaml' | 'json' = trimmed.startsWith('{') ? 'json' : 'yaml';
  const doc = parseDocument(text, { uniqueKeys: true, prettyErrors: false });
  if (doc.errors.length > 0) {
    const e = doc.errors[0];
    throw new Error(`malformed ${format.toUpperCase()} in ${path}: ${e?.message.split('\n')[0] ?? 'parse error'}`);
  }
  const data: unknown = doc.toJS();
  if (data === null || typeof data !== 'object' || Array.isArray(data)) throw new Error(`${path} is not a KubeletConfiguration object`);
  const obj = data as Record<string, unknown>;
  if (obj.kind !== undefined && obj.kind !== 'KubeletConfiguration') throw new Error(`${path} has kind ${String(obj.kind)}, expected KubeletConfiguration`);
  return { path, realPath: path, text, format, data: obj, doc };
}

/** 1-based line of a top-level key, or null. */
export function topLevelKeyLine(file: KubeletFile, key: string): number | null {
  const contents = file.doc.contents;
  if (!isMap(contents)) return null;
  for (const item of contents.items) {
    const k = item.key;
    if (isScalar(k) && k.value === key && k.range) return lineAt(file.text, k.range[0]);
  }
  return null;
}

function lineAt(text: string, offset: number): number {
  let l = 1;
  for (let i = 0; i < offset && i < text.length; i++) if (text.charCodeAt(i) === 10) l++;
  return l;
}

export async function loadKubeletConfig(fs: HostFs, flags: Map<string, Flag>, fallbackConfig?: string): Promise<KubeletView> {
  const view: KubeletView = { dropIns: [], errors: [], values: {} as Record<KubeletKey, KubeletValue> };
  const configPath = flags.get('config')?.value ?? fallbackConfig;
  const configDir = flags.get('config-dir')?.value ?? undefined;
  if (configPath) view.configPath = configPath;
  if (configDir) view.configDir = configDir;
  const layers: KubeletFile[] = [];
  if (configPath) {
    const r = await fs.read(configPath, 'kubelet config');
    if (r.ok) {
      try { view.configFile = { ...parseKubeletConfigText(r.text, configPath), realPath: r.realPath }; layers.push(view.configFile); } catch (e) { view.errors.push((e as Error).message); }
    } else view.errors.push(r.reason === 'missing' ? `kubelet --config ${configPath} does not exist` : `cannot read ${configPath}: ${r.error}`);
  }
  if (configDir) {
    for (const name of await fs.list(configDir)) {
      if (!name.endsWith('.conf')) continue;
      const p = `${configDir}/${name}`;
      const r = await fs.read(p, 'kubelet config drop-in');
      if (!r.ok) continue;
      try { const f = { ...parseKubeletConfigText(r.text, p), realPath: r.realPath }; view.dropIns.push(f); layers.push(f); } catch (e) { view.errors.push((e as Error).message); }
    }
  }
  for (const key of Object.keys(KUBELET_DEFAULTS) as KubeletKey[]) {
    let v: KubeletValue = { raw: null, value: KUBELET_DEFAULTS[key], source: { kind: 'default' } };
    for (const f of layers) {
      if (!(key in f.data)) continue;
      const x = f.data[key];
      v = { raw: JSON.stringify(x), value: null, source: { kind: 'file', path: f.path, line: topLevelKeyLine(f, key), key } };
      if (key === 'serializeImagePulls' ? typeof x === 'boolean' : (typeof x === 'number' && Number.isFinite(x)) || (key === 'maxParallelImagePulls' && x === null)) v.value = x as number | boolean | null;
      else { v.error = `${key} in ${f.path} has an invalid value ${JSON.stringify(x)}`; view.errors.push(v.error); }
    }
    const flagName = KUBELET_FLAG_FOR[key];
    const flag = flagName ? flags.get(flagName) : undefined;
    if (flag) {
      const raw = flag.value ?? 'true';
      const value: number | boolean | null = key === 'serializeImagePulls'
        ? (raw === 'true' ? true : raw === 'false' ? false : null)
        : (Number.isFinite(Number(raw)) ? Number(raw) : null);
      v = { raw, value, source: { kind: 'flag', path: flag.origin.path, line: flag.origin.line, flag: `--${flag.name}` } };
      if (value === null) { v.error = `--${flag.name}=${raw} is not a valid value`; view.errors.push(v.error); }
    }
    view.values[key] = v;
  }
  const ep = flags.get('container-runtime-endpoint')?.value ?? (layers.map((l) => l.data.containerRuntimeEndpoint).filter((x): x is string => typeof x === 'string').pop());
  if (ep) view.runtimeEndpoint = ep;
  return view;
}

/**
 * Minimal edit of a kubelet config file: sets top-level keys, keeping every other byte. YAML:
 * replaces the scalar in place or appends `key: value`; JSON: replaces the value or inserts a
 * member after the opening brace. Throws when it cannot do so safely.
 */
export function setKubeletKeys(file: KubeletFile, changes: Record<string, number | boolean>): string {
  let text = file.text;
  // apply from the end of the file backwards so offsets stay valid
  const doc = parseDocument(text, { uniqueKeys: true });
  const contents = doc.contents;
  if (!isMap(contents)) throw new Error(`${file.path}: top level is not a map`);
  const edits: Array<{ at: number; del: number; ins: string }> = [];
  const appends: string[] = [];
  for (const [key, value] of Object.entries(changes)) {
    const item = contents.items.find((i) => isScalar(i.key) && i.key.value === key);
    const lit = JSON.stringify(value);
    if (item && isScalar(item.value) && item.value.range) {
      const [s, e] = item.value.range;
      edits.push({ at: s, del: e - s, ins: lit });
    } else if (item) {
      throw new Error(`${file.path}: ${key} is not a plain value; refusing to edit`);
    } else if (file.format === 'json') {
      const open = text.indexOf('{');
      const first = contents.items[0];
      const firstStart = first && isScalar(first.key) && first.key.range ? first.key.range[0] : -1;
      if (firstStart < 0) edits.push({ at: open + 1, del: 0, ins: `${JSON.stringify(key)}: ${lit}` });
      else {
        const ls = text.lastIndexOf('\n', firstStart - 1) + 1;
        const multiLine = ls > open;
        const indent = multiLine ? text.slice(ls, firstStart) : '';
        edits.push(multiLine
          ? { at: ls, del: 0, ins: `${indent}${JSON.stringify(key)}: ${lit},\n` }
          : { at: firstStart, del: 0, ins: `${JSON.stringify(key)}: ${lit}, ` });
      }
    } else {
      appends.push(`${key}: ${lit}`);
    }
  }
  edits.sort((a, b) => b.at - a.at);
  for (const e of edits) text = text.slice(0, e.at) + e.ins + text.slice(e.at + e.del);
  if (appends.length > 0) text = text + (text.endsWith('\n') || text === '' ? '' : '\n') + appends.join('\n') + '\n';
  return text;
}
