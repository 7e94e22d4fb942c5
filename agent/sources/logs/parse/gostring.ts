/**
 * Go's quoted-string syntax (strconv.Quote / fmt %q), which klog, logrus (logfmt) and every
 * `%q` in the format strings we match use. Pure; never throws.
 */

/**
 * Reads a Go double-quoted string starting at `text[start] === '"'`.
 * Returns the unescaped value and the index just past the closing quote, or null when there is
 * no closing quote (a truncated line).
 */
export function readGoQuoted(text: string, start: number): { value: string; end: number } | null {
  if (text.charCodeAt(start) !== 0x22) return null;
  let out = '';
  let i = start + 1;
  let runStart = i;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      out += text.slice(runStart, i);
      return { value: out, end: i + 1 };
    }
    if (c !== 0x5c) { i++; continue; }
    out += text.slice(runStart, i);
    const e = text[i + 1];
    if (e === undefined) return null;
    let consumed = 2;
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'a': out += '\x07'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\\': out += '\\'; break;
      case '"': out += '"'; break;
      case "'": out += "'"; break;
      case 'x': case 'u': case 'U': {
        const len = e === 'x' ? 2 : e === 'u' ? 4 : 8;
        const hex = text.slice(i + 2, i + 2 + len);
        const code = /^[0-9a-fA-F]+$/.test(hex) && hex.length === len ? parseInt(hex, 16) : NaN;
        if (Number.isNaN(code) || code > 0x10ffff) { out += '\\' + e; break; }
        // \xNN is a raw byte in Go; as text we keep bytes < 0x80 and map the rest to U+FFFD.
        out += e === 'x' && code >= 0x80 ? '\ufffd' : String.fromCodePoint(code);
        consumed = 2 + len;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          const oct = text.slice(i + 1, i + 4);
          if (/^[0-7]{3}$/.test(oct)) {
            const code = parseInt(oct, 8);
            out += code >= 0x80 ? '\ufffd' : String.fromCharCode(code);
            consumed = 4;
            break;
          }
        }
        out += '\\' + e;
    }
    i += consumed;
    runStart = i;
  }
  return null;
}

/** Unquotes a whole Go-quoted string (`"a \"b\""` → `a "b"`); returns null if it is not exactly one. */
export function unquoteGo(text: string): string | null {
  const r = readGoQuoted(text, 0);
  return r && r.end === text.length ? r.value : null;
}

/** Source of a regex fragment matching one Go-quoted string (escaped quotes included). */
export const GO_QUOTED = String.raw`"(?:[^"\\]|\\.)*"`;
