/**
 * systemd unit files, drop-ins and environment files, as far as tune needs them (pure): the
 * effective ExecStart with $VAR / ${VAR} expanded from Environment= and EnvironmentFile=, each
 * word remembering the file and line it came from, and command-line flags parsed from it.
 */

export interface Origin { path: string; line: number }
export interface Directive { key: string; value: string; origin: Origin }
export interface Word { text: string; origin: Origin }

/** Directives of one section ("Service") with backslash continuations joined. */
export function parseUnitSection(text: string, path: string, section = 'Service'): Directive[] {
  const out: Directive[] = [];
  const lines = text.split(/\r?\n/);
  let current = '';
  for (let i = 0; i < lines.length; i++) {
    const startLine = i + 1;
    let line = lines[i] as string;
    const trimmed = line.trim();
    if (/^\[.*\]$/.test(trimmed)) { current = trimmed.slice(1, -1); continue; }
    if (trimmed === '' || trimmed.startsWith('#') || trimmed.startsWith(';')) continue;
    while (line.trimEnd().endsWith('\\') && i + 1 < lines.length) {
      line = line.trimEnd().slice(0, -1) + ' ';
      i++;
      const next = lines[i] as string;
      if (next.trim().startsWith('#') || next.trim().startsWith(';')) continue; // comment lines inside continuations are skipped
      line += next;
    }
    if (current !== section) continue;
    const eq = line.indexOf('=');
    if (eq < 0) continue;
    out.push({ key: line.slice(0, eq).trim(), value: line.slice(eq + 1).trim(), origin: { path, line: startLine } });
  }
  return out;
}

/** systemd-style word splitting with "double" / 'single' quotes and backslash escapes. */
export function splitWords(s: string): string[] {
  const out: string[] = [];
  let i = 0;
  const n = s.length;
  while (i < n) {
    while (i < n && /\s/.test(s[i] as string)) i++;
    if (i >= n) break;
    let w = '';
    while (i < n && !/\s/.test(s[i] as string)) {
      const c = s[i] as string;
      if (c === '"' || c === "'") {
        const q = c; i++;
        while (i < n && s[i] !== q) {
          if (s[i] === '\\' && q === '"' && i + 1 < n) { w += s[i + 1]; i += 2; continue; }
          w += s[i]; i++;
        }
        i++;
      } else if (c === '\\' && i + 1 < n) { w += s[i + 1]; i += 2; } else { w += c; i++; }
    }
    out.push(w);
  }
  return out;
}

/** `Environment=` value: one or more (quoted) VAR=value assignments. */
export function parseEnvironmentValue(value: string): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const w of splitWords(value)) {
    const eq = w.indexOf('=');
    if (eq > 0) out.push([w.slice(0, eq), w.slice(eq + 1)]);
  }
  return out;
}

/** EnvironmentFile: KEY=VALUE per line, optional quotes, # and ; comments, `export ` tolerated. */
export function parseEnvFile(text: string, path: string): Array<{ name: string; value: string; origin: Origin }> {
  const out: Array<{ name: string; value: string; origin: Origin }> = [];
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    let line = (lines[i] as string).trim();
    if (!line || line.startsWith('#') || line.startsWith(';')) continue;
    if (line.startsWith('export ')) line = line.slice(7).trim();
    const m = /^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/.exec(line);
    if (!m) continue;
    let v = m[2] as string;
    if ((v.startsWith('"') && v.endsWith('"') && v.length >= 2) || (v.startsWith("'") && v.endsWith("'") && v.length >= 2)) {
      v = v.slice(1, -1);
    } else if (v.startsWith('"') || v.startsWith("'")) {
      v = splitWords(v).join(' ');
    }
    out.push({ name: m[1] as string, value: v, origin: { path, line: i + 1 } });
  }
  return out;
}

export interface ServiceView {
  /** ExecStart words after expansion (first = binary). */
  exec: Word[];
  execOrigin?: Origin;
  env: Map<string, { value: string; origin: Origin }>;
  environmentFiles: Array<{ path: string; optional: boolean; origin: Origin }>;
}

/**
 * Folds directives of a unit and its drop-ins (already in systemd order) into the effective
 * ExecStart. Environment files are given by the caller (it reads them) via `readEnvFile`.
 */
export function effectiveService(
  directives: Directive[],
  envFiles: Map<string, Array<{ name: string; value: string; origin: Origin }>>,
): ServiceView {
  let execRaw: { value: string; origin: Origin } | undefined;
  const env = new Map<string, { value: string; origin: Origin }>();
  const environmentFiles: ServiceView['environmentFiles'] = [];
  for (const d of directives) {
    if (d.key === 'ExecStart') {
      execRaw = d.value === '' ? undefined : { value: d.value, origin: d.origin };
    } else if (d.key === 'Environment') {
      if (d.value === '') continue;
      for (const [k, v] of parseEnvironmentValue(d.value)) env.set(k, { value: v, origin: d.origin });
    } else if (d.key === 'EnvironmentFile') {
      if (d.value === '') { environmentFiles.length = 0; continue; }
      const optional = d.value.startsWith('-');
      environmentFiles.push({ path: optional ? d.value.slice(1) : d.value, optional, origin: d.origin });
    }
  }
  // EnvironmentFile= settings override Environment= (systemd.exec(5)).
  for (const f of environmentFiles) for (const e of envFiles.get(f.path) ?? []) env.set(e.name, { value: e.value, origin: e.origin });
  const exec: Word[] = [];
  if (execRaw) {
    const raw = execRaw.value.replace(/^[-@:+!]+/, '');
    for (const w of splitWords(raw)) {
      const whole = /^\$([A-Za-z_][A-Za-z0-9_]*)$/.exec(w);
      if (whole) {
        const v = env.get(whole[1] as string);
        if (v) for (const part of splitWords(v.value)) exec.push({ text: part, origin: v.origin });
        continue;
      }
      let origin = execRaw.origin;
      const text = w.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_m, name: string) => {
        const v = env.get(name);
        if (v) origin = v.origin;
        return v?.value ?? '';
      });
      exec.push({ text, origin });
    }
  }
  return { exec, ...(execRaw ? { execOrigin: execRaw.origin } : {}), env, environmentFiles };
}

export interface Flag { name: string; value: string | null; origin: Origin }

/**
 * Flags of a Go (pflag) command line. `valueFlags` names flags that take the next word as value
 * when written without `=`. Later flags override earlier ones (pflag semantics).
 */
export function parseFlags(words: Word[], valueFlags: Set<string>): Map<string, Flag> {
  const out = new Map<string, Flag>();
  for (let i = 1; i < words.length; i++) {
    const w = words[i] as Word;
    const m = /^--?([A-Za-z0-9][A-Za-z0-9-]*)(?:=(.*))?$/.exec(w.text);
    if (!m) continue;
    const name = m[1] as string;
    let value: string | null = m[2] ?? null;
    if (value === null && valueFlags.has(name) && i + 1 < words.length && !(words[i + 1] as Word).text.startsWith('-')) {
      value = (words[i + 1] as Word).text;
      i++;
    }
    out.set(name, { name, value, origin: w.origin });
  }
  return out;
}

export const UNIT_DIRS = ['/etc/systemd/system', '/run/systemd/system', '/usr/local/lib/systemd/system', '/usr/lib/systemd/system', '/lib/systemd/system'];
