/**
 * Minimal, comment- and order-preserving edits of TOML files (pure). A small scanner records
 * where every table header and key/value sits (byte offsets, lines); edits splice text at those
 * offsets and leave every other byte alone. Callers parse the result with smol-toml and compare it
 * with the original (verifyTomlEdit) so an edit can never change anything but the intended key.
 */
import { isDeepStrictEqual } from 'node:util';
import { parse as parseToml } from 'smol-toml';

export interface TomlHeader { path: string[]; array: boolean; line: number; start: number; end: number; indent: string }
export interface TomlKv {
  table: string[]; key: string[]; line: number; lineStart: number;
  valueStart: number; valueEnd: number; indent: string;
  /** For array values: offsets of the elements (for appending). */
  elements?: Array<{ start: number; end: number }>;
  /** Index of the header this kv belongs to (-1 = top level). */
  headerIndex: number;
}
export interface TomlScan { text: string; headers: TomlHeader[]; kvs: TomlKv[] }

export class TomlEditError extends Error {}

const BARE = /[A-Za-z0-9_-]/;

/** Scans TOML text. Throws TomlEditError on input it cannot follow (parse first with smol-toml for a good message). */
export function scanToml(text: string): TomlScan {
  const headers: TomlHeader[] = [];
  const kvs: TomlKv[] = [];
  let pos = 0;
  let table: string[] = [];
  let headerIndex = -1;
  const n = text.length;

  const lineOf = (p: number): number => {
    let l = 1;
    for (let i = 0; i < p && i < n; i++) if (text.charCodeAt(i) === 10) l++;
    return l;
  };
  const fail = (msg: string): never => { throw new TomlEditError(`${msg} at line ${lineOf(pos)}`); };
  const skipWs = (): void => { while (pos < n && (text[pos] === ' ' || text[pos] === '\t')) pos++; };
  const skipComment = (): void => { if (text[pos] === '#') while (pos < n && text[pos] !== '\n') pos++; };
  const skipWsNlComments = (): void => {
    for (;;) {
      const before = pos;
      while (pos < n && /[ \t\r\n]/.test(text[pos] as string)) pos++;
      skipComment();
      if (pos === before) return;
    }
  };
  const toEol = (): void => {
    skipWs(); skipComment();
    if (pos < n && text[pos] === '\r') pos++;
    if (pos < n && text[pos] !== '\n') fail('unexpected text after value');
    if (pos < n) pos++;
  };

  const parseBasicString = (): string => {
    // at opening quote
    pos++;
    let out = '';
    while (pos < n && text[pos] !== '"') {
      if (text[pos] === '\n') fail('newline in string');
      if (text[pos] === '\\') { out += text.slice(pos, pos + 2); pos += 2; continue; }
      out += text[pos]; pos++;
    }
    if (pos >= n) fail('unterminated string');
    pos++;
    try { return JSON.parse(`"${out}"`) as string; } catch { return out; }
  };
  const parseLiteralString = (): string => {
    pos++;
    const end = text.indexOf("'", pos);
    if (end < 0 || text.slice(pos, end).includes('\n')) fail('unterminated literal string');
    const s = text.slice(pos, end);
    pos = end + 1;
    return s;
  };
  const parseKey = (): string[] => {
    const parts: string[] = [];
    for (;;) {
      skipWs();
      const c = text[pos];
      if (c === '"') parts.push(parseBasicString());
      else if (c === "'") parts.push(parseLiteralString());
      else {
        const s = pos;
        while (pos < n && BARE.test(text[pos] as string)) pos++;
        if (pos === s) fail('expected a key');
        parts.push(text.slice(s, pos));
      }
      skipWs();
      if (text[pos] === '.') { pos++; continue; }
      return parts;
    }
  };
  const parseValue = (collect?: Array<{ start: number; end: number }>): void => {
    const c = text[pos];
    if (text.startsWith('"""', pos)) {
      pos += 3;
      for (;;) {
        if (pos >= n) fail('unterminated multi-line string');
        if (text[pos] === '\\') { pos += 2; continue; }
        if (text.startsWith('"""', pos)) { pos += 3; while (text[pos] === '"') pos++; return; }
        pos++;
      }
    }
    if (text.startsWith("'''", pos)) {
      const end = text.indexOf("'''", pos + 3);
      if (end < 0) fail('unterminated multi-line literal string');
      pos = end + 3;
      while (text[pos] === "'") pos++;
      return;
    }
    if (c === '"') { parseBasicString(); return; }
    if (c === "'") { parseLiteralString(); return; }
    if (c === '[') {
      pos++;
      for (;;) {
        skipWsNlComments();
        if (text[pos] === ']') { pos++; return; }
        const s = pos;
        parseValue();
        collect?.push({ start: s, end: pos });
        skipWsNlComments();
        if (text[pos] === ',') { pos++; continue; }
        if (text[pos] === ']') { pos++; return; }
        fail('expected , or ] in array');
      }
    }
    if (c === '{') {
      pos++;
      for (;;) {
        skipWs();
        if (text[pos] === '}') { pos++; return; }
        parseKey();
        if (text[pos] !== '=') fail('expected = in inline table');
        pos++; skipWs();
        parseValue();
        skipWs();
        if (text[pos] === ',') { pos++; continue; }
        if (text[pos] === '}') { pos++; return; }
        fail('expected , or } in inline table');
      }
    }
    const s = pos;
    while (pos < n && !/[\s,\]}#]/.test(text[pos] as string)) pos++;
    if (pos === s) fail('expected a value');
  };

  while (pos < n) {
    skipWsNlComments();
    if (pos >= n) break;
    const lineStart = text.lastIndexOf('\n', pos - 1) + 1;
    const indent = text.slice(lineStart, pos);
    if (text[pos] === '[') {
      const start = pos;
      const array = text[pos + 1] === '[';
      pos += array ? 2 : 1;
      const path = parseKey();
      if (text[pos] !== ']' || (array && text[pos + 1] !== ']')) fail('expected ] after table name');
      pos += array ? 2 : 1;
      headers.push({ path, array, line: lineOf(start), start, end: pos, indent });
      headerIndex = headers.length - 1;
      table = path;
      toEol();
      continue;
    }
    const key = parseKey();
    if (text[pos] !== '=') fail('expected =');
    pos++; skipWs();
    const valueStart = pos;
    const elements: Array<{ start: number; end: number }> = [];
    const isArray = text[pos] === '[';
    parseValue(isArray ? elements : undefined);
    kvs.push({
      table, key, line: lineOf(lineStart), lineStart, valueStart, valueEnd: pos, indent, headerIndex,
      ...(isArray ? { elements } : {}),
    });
    toEol();
  }
  return { text, headers, kvs };
}

const eqPath = (a: string[], b: string[]): boolean => a.length === b.length && a.every((x, i) => x === b[i]);

export function findKv(scan: TomlScan, fullPath: string[]): TomlKv | undefined {
  let found: TomlKv | undefined;
  for (const kv of scan.kvs) if (eqPath([...kv.table, ...kv.key], fullPath)) found = kv;
  return found;
}

export function findHeader(scan: TomlScan, path: string[]): TomlHeader | undefined {
  return scan.headers.find((h) => !h.array && eqPath(h.path, path));
}

/** True when the file mentions the table at all (header, sub-table header, or dotted key under it). */
export function mentionsTable(scan: TomlScan, path: string[]): boolean {
  const starts = (p: string[]): boolean => p.length >= path.length && eqPath(p.slice(0, path.length), path);
  return scan.headers.some((h) => starts(h.path)) || scan.kvs.some((kv) => starts([...kv.table, ...kv.key]));
}

export function formatTomlKey(part: string): string {
  return /^[A-Za-z0-9_-]+$/.test(part) ? part : JSON.stringify(part);
}

export function tomlString(s: string): string { return JSON.stringify(s); }

/** Sets `fullPath` (table path + key) to the TOML literal `literal` with a minimal splice. */
export function setTomlValue(text: string, tablePath: string[], key: string, literal: string): string {
  const scan = scanToml(text);
  const kv = findKv(scan, [...tablePath, key]);
  if (kv) return text.slice(0, kv.valueStart) + literal + text.slice(kv.valueEnd);
  const header = findHeader(scan, tablePath);
  const anyIndented = scan.kvs.some((k) => k.headerIndex >= 0 && k.indent.length > (scan.headers[k.headerIndex]?.indent.length ?? 0));
  if (header) {
    const hi = scan.headers.indexOf(header);
    const body = scan.kvs.filter((k) => k.headerIndex === hi);
    const last = body[body.length - 1];
    const indent = last ? last.indent : header.indent + (anyIndented ? '  ' : '');
    const line = `${indent}${formatTomlKey(key)} = ${literal}`;
    let at: number;
    if (last) at = endOfLine(text, last.valueEnd);
    else at = endOfLine(text, header.end);
    return insertLine(text, at, line);
  }
  const block = `[${tablePath.map(formatTomlKey).join('.')}]\n${anyIndented ? '  ' : ''}${formatTomlKey(key)} = ${literal}\n`;
  const sep = text.length === 0 ? '' : text.endsWith('\n\n') ? '' : text.endsWith('\n') ? '\n' : '\n\n';
  return text + sep + block;
}

/** Adds `entry` to the top-level `imports` array (creating the key when absent). */
export function addTomlImport(text: string, entry: string): string {
  const scan = scanToml(text);
  const kv = scan.kvs.find((k) => k.headerIndex === -1 && eqPath(k.key, ['imports']));
  const lit = tomlString(entry);
  if (kv) {
    if (!kv.elements) throw new TomlEditError('imports is not an array');
    const last = kv.elements[kv.elements.length - 1];
    if (!last) {
      const inner = text.slice(kv.valueStart + 1, kv.valueEnd - 1);
      if (inner.trim() !== '') throw new TomlEditError('imports array holds only comments; refusing to edit');
      return text.slice(0, kv.valueStart) + `[${lit}]` + text.slice(kv.valueEnd);
    }
    const arrayText = text.slice(kv.valueStart, kv.valueEnd);
    if (arrayText.includes('\n')) {
      const ls = text.lastIndexOf('\n', last.start - 1) + 1;
      const indent = text.slice(ls, last.start);
      return text.slice(0, last.end) + `,\n${indent}${lit}` + text.slice(last.end);
    }
    return text.slice(0, last.end) + `, ${lit}` + text.slice(last.end);
  }
  const line = `imports = [${lit}]`;
  const top = scan.kvs.filter((k) => k.headerIndex === -1);
  const lastTop = top[top.length - 1];
  if (lastTop) return insertLine(text, endOfLine(text, lastTop.valueEnd), line);
  const first = scan.headers[0];
  if (first) {
    const ls = text.lastIndexOf('\n', first.start - 1) + 1;
    return text.slice(0, ls) + line + '\n\n' + text.slice(ls);
  }
  return text + (text === '' || text.endsWith('\n') ? '' : '\n') + line + '\n';
}

/** Offset just past the newline that ends the line containing `pos` (or text end). */
function endOfLine(text: string, pos: number): number {
  const nl = text.indexOf('\n', pos);
  return nl < 0 ? text.length : nl + 1;
}

function insertLine(text: string, at: number, line: string): string {
  if (at >= text.length && !text.endsWith('\n') && text.length > 0) return text + '\n' + line + '\n';
  return text.slice(0, at) + line + '\n' + text.slice(at);
}

/** Deep get in a parsed TOML object. */
export function getPath(obj: unknown, path: string[]): unknown {
  let cur: unknown = obj;
  for (const p of path) {
    if (cur === null || typeof cur !== 'object' || Array.isArray(cur)) return undefined;
    cur = (cur as Record<string, unknown>)[p];
  }
  return cur;
}

function setPath(obj: Record<string, unknown>, path: string[], value: unknown): void {
  let cur = obj;
  for (const p of path.slice(0, -1)) {
    const next = cur[p];
    if (next === null || typeof next !== 'object' || Array.isArray(next)) cur[p] = {};
    cur = cur[p] as Record<string, unknown>;
  }
  cur[path[path.length - 1] as string] = value;
}

/**
 * Proves an edit touched only what it should: parse both texts; the edited one must equal the
 * original with the given paths set to the given values (and nothing else different).
 */
export function verifyTomlEdit(before: string, after: string, changes: Array<{ path: string[]; value: unknown }>): void {
  let a: Record<string, unknown>;
  let b: Record<string, unknown>;
  try { a = parseToml(before) as Record<string, unknown>; } catch (e) { throw new TomlEditError(`original does not parse: ${(e as Error).message}`); }
  try { b = parseToml(after) as Record<string, unknown>; } catch (e) { throw new TomlEditError(`edited text does not parse: ${(e as Error).message}`); }
  // plain JSON shapes: smol-toml builds objects with their own prototypes; dates compare as text
  const plain = (x: unknown): Record<string, unknown> => JSON.parse(JSON.stringify(x)) as Record<string, unknown>;
  const expected = plain(a);
  for (const c of changes) setPath(expected, c.path, c.value);
  if (!isDeepStrictEqual(expected, plain(b))) throw new TomlEditError('edit changed more than the intended keys; refusing to write');
}
