/**
 * Redaction of secrets in bundle content. Pure: no I/O.
 *
 * Every rule replaces the secret's bytes with a mask of EXACTLY the same byte length, so an
 * item's size is known before its bytes are read (a tar header needs it up front) and large
 * files can be redacted while they stream, with constant memory. Text is handled as latin1
 * (one char = one byte), so multi-byte UTF-8 elsewhere in a line passes through unchanged.
 *
 * The cost of length preservation is that a mask reveals the secret's length; the value
 * itself never leaves the node.
 *
 * `StreamRedactor` works across chunk boundaries: it redacts whole lines (carrying a partial
 * line to the next chunk), keeps PEM private-key state across lines, and cuts lines longer
 * than `maxLine` only where no match straddles the cut.
 */

export type RedactionRuleName =
  | 'pem-private-key'
  | 'jwt'
  | 'bearer-token'
  | 'basic-auth'
  | 'aws-access-key-id'
  | 'aws-secret'
  | 'gcp-api-key'
  | 'gcp-oauth-token'
  | 'azure-key'
  | 'registry-auth'
  | 'dockerconfigjson'
  | 'kubeconfig-credential'
  | 'url-credentials'
  | 'secret-key-value';

export type RedactionCounts = Partial<Record<RedactionRuleName, number>>;

interface Rule {
  name: RedactionRuleName;
  /** Global regex; `group` is the capture group to mask (0 = whole match). */
  re: RegExp;
  group: number;
  /** Cheap literal pre-check (lowercased line must contain one of these), to keep throughput. */
  hint?: string[];
  /** Values that are not secrets (paths, booleans, empty placeholders). */
  keep?: (value: string) => boolean;
}

const NOT_A_SECRET = /^(?:|true|false|null|none|nil|yes|no|\*+|<redacted[^>]*>?|redacted|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\/[^\s]*|""|'')$/i;
const keepPlain = (v: string): boolean => NOT_A_SECRET.test(v.replace(/^["']|["']$/g, ''));

/** Names of keys whose values are secrets (env vars, flags, JSON/YAML/TOML keys). */
const SECRET_NAME = String.raw`[A-Za-z0-9_.-]*(?:passw(?:or)?d|passwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|client[_-]?key|credentials?|sas[_-]?key|account[_-]?key|auth[_-]?key|session[_-]?key)[A-Za-z0-9_.-]*`;

const RULES: Rule[] = [
  {
    // "-----BEGIN RSA PRIVATE KEY-----\nMIIE…\n-----END RSA PRIVATE KEY-----" inside one line (JSON strings).
    name: 'pem-private-key',
    re: /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----((?:(?!-----END).)+)(?=-----END [A-Z0-9 ]*PRIVATE KEY-----)/g,
    group: 1,
    hint: ['private key-----'],
  },
  {
    name: 'jwt',
    re: /\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g,
    group: 0,
    hint: ['eyj'],
  },
  {
    name: 'bearer-token',
    re: /\bBearer\s+([A-Za-z0-9._~+/-]{8,}=*)/gi,
    group: 1,
    hint: ['bearer'],
  },
  {
    name: 'basic-auth',
    re: /\bBasic\s+([A-Za-z0-9+/]{8,}={0,2})/g,
    group: 1,
    hint: ['basic'],
  },
  {
    name: 'aws-access-key-id',
    re: /\b((?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{16})\b/g,
    group: 1,
    hint: ['akia', 'asia', 'agpa', 'aida', 'aroa', 'anpa', 'anva', 'aipa', 'abia', 'acca'],
  },
  {
    // aws_secret_access_key = …, AWS_SESSION_TOKEN=…, "SecretAccessKey": "…", "SessionToken": "…"
    name: 'aws-secret',
    re: /(?:aws_?secret_?access_?key|secret_?access_?key|aws_?session_?token|session_?token)["']?\s*[:=]\s*["']?([A-Za-z0-9/+=]{16,})/gi,
    group: 1,
    hint: ['secret', 'session'],
  },
  {
    name: 'gcp-api-key',
    re: /\b(AIza[0-9A-Za-z_-]{30,})/g,
    group: 1,
    hint: ['aiza'],
  },
  {
    name: 'gcp-oauth-token',
    re: /\b(ya29\.[0-9A-Za-z_-]{20,})/g,
    group: 1,
    hint: ['ya29.'],
  },
  {
    // Azure storage / service bus connection strings and SAS signatures.
    name: 'azure-key',
    re: /(?:AccountKey|SharedAccessKey|SharedAccessSignature)=([^;"'\s]+)|[?&]sig=([A-Za-z0-9%+/=]{16,})/gi,
    group: -1,
    hint: ['accountkey', 'sharedaccess', 'sig='],
  },
  {
    // docker config.json / containers auth.json: "auth": "base64(user:pass)", "identitytoken": "…",
    // containerd hosts/registry configs: auth = "…", identitytoken = "…"
    name: 'registry-auth',
    re: /["']?\b(?:auth|identitytoken|identity_token|registrytoken|registry_token)\b["']?\s*[:=]\s*["']([^"']+)["']/gi,
    group: 1,
    hint: ['auth', 'token'],
  },
  {
    name: 'dockerconfigjson',
    re: /\.docker(?:config)?(?:json|cfg)["']?\s*:\s*["']?([A-Za-z0-9+/=]{8,})/gi,
    group: 1,
    hint: ['.docker'],
  },
  {
    // kubeconfig: token, client-key-data, password, and auth-provider refresh/id tokens.
    name: 'kubeconfig-credential',
    re: /\b(?:client-key-data|client-certificate-data-key|id-token|refresh-token|access-token)["']?\s*:\s*["']?([^\s"',}]+)/gi,
    group: 1,
    hint: ['-data', '-token'],
  },
  {
    name: 'url-credentials',
    re: /\b[a-z][a-z0-9+.-]*:\/\/[^\s:@/"']+:([^\s@/"']+)@/gi,
    group: 1,
    hint: ['://'],
  },
  {
    // Env-like text, command lines, JSON/YAML/TOML keys: NAME=value, --name=value, --name value,
    // "name": "value", name: value.
    name: 'secret-key-value',
    re: new RegExp(
      String.raw`(?:--?${SECRET_NAME}(?:[= ]+)|["']?\b${SECRET_NAME}["']?\s*(?:=|:(?!//))\s*)("[^"]*"|'[^']*'|[^\s"',;}&]+)`,
      'gi',
    ),
    group: 1,
    hint: ['pass', 'secret', 'token', 'key', 'credential'],
    keep: keepPlain,
  },
];

export const REDACTION_RULES: readonly RedactionRuleName[] = [...RULES.map((r) => r.name)];

/**
 * One case-insensitive scan for any rule's hint: lines without a hit (most log lines) are passed
 * through without running the rules; that keeps redaction near memcpy speed.
 */
const HINT_RE = new RegExp(
  [...new Set(RULES.flatMap((r) => r.hint ?? []).concat(['private key-----']))]
    .map((h) => h.toLowerCase().replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|'),
  'g',
);
if (RULES.some((r) => !r.hint)) throw new Error('every redaction rule needs hints (the fast path relies on them)');

const PEM_BEGIN = /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----/;
const PEM_END = /-----END [A-Z0-9 ]*PRIVATE KEY-----/;

/** A mask of exactly `len` chars: "<redacted:rule>" padded with '*' when it fits, else "<redacted>***", else '*'s. */
export function mask(rule: RedactionRuleName, len: number): string {
  const label = `<redacted:${rule}>`;
  if (len >= label.length) return label + '*'.repeat(len - label.length);
  if (len >= 10) return '<redacted>' + '*'.repeat(len - 10);
  return '*'.repeat(len);
}

function addCount(counts: RedactionCounts, rule: RedactionRuleName, n = 1): void {
  counts[rule] = (counts[rule] ?? 0) + n;
}

interface Span { start: number; end: number; rule: RedactionRuleName }

/** Spans to mask in one line (no PEM multi-line state). */
function findSpans(line: string, lower: string): Span[] {
  const spans: Span[] = [];
  for (const rule of RULES) {
    if (rule.hint && !rule.hint.some((h) => lower.includes(h))) continue;
    rule.re.lastIndex = 0;
    let m: RegExpExecArray | null;
    while ((m = rule.re.exec(line)) !== null) {
      if (m[0].length === 0) { rule.re.lastIndex++; continue; }
      let value: string | undefined;
      let start: number;
      if (rule.group === -1) {
        // first defined capture group
        const gi = m.findIndex((g, i) => i > 0 && g !== undefined);
        if (gi < 0) continue;
        value = m[gi] as string;
        start = m.index + m[0].lastIndexOf(value);
      } else if (rule.group === 0) {
        value = m[0];
        start = m.index;
      } else {
        value = m[rule.group];
        if (value === undefined) continue;
        start = m.index + m[0].lastIndexOf(value);
      }
      if (!value || (rule.keep && rule.keep(value))) continue;
      // keep the quotes of a quoted value visible
      let s = start;
      let e = start + value.length;
      if (value.length >= 2 && (value[0] === '"' || value[0] === "'") && value[value.length - 1] === value[0]) { s++; e--; }
      if (e > s) spans.push({ start: s, end: e, rule: rule.name });
    }
  }
  return spans;
}

/** Applies spans (first rule wins on overlaps) and counts per rule. */
function applySpans(line: string, spans: Span[], counts: RedactionCounts): string {
  if (spans.length === 0) return line;
  spans.sort((a, b) => a.start - b.start || b.end - a.end);
  let out = '';
  let pos = 0;
  for (const sp of spans) {
    if (sp.end <= pos) continue;
    const s = Math.max(sp.start, pos);
    out += line.slice(pos, s) + mask(sp.rule, sp.end - s);
    pos = sp.end;
    addCount(counts, sp.rule);
  }
  return out + line.slice(pos);
}

/** Redacts a single line (no newline) without multi-line state. */
export function redactLine(line: string, counts: RedactionCounts): string {
  return applySpans(line, findSpans(line, line.toLowerCase()), counts);
}

/**
 * Redacts complete text in one go (what the stream does, for small items and tests).
 * Output has exactly the same length as the input.
 */
export function redactText(text: string, counts: RedactionCounts = {}): string {
  const r = new StreamRedactor(counts);
  return r.pushString(text) + r.endString();
}

/**
 * Streaming redactor over latin1 text. `push` may return less than it was given (a partial
 * line is held back); `end` returns the rest. Total output length === total input length.
 */
export class StreamRedactor {
  private carry = '';
  private inPem = false;
  /** Set when lines() ran the rules on any line (its output may differ from its input). */
  private touched = false;
  readonly counts: RedactionCounts;

  constructor(counts: RedactionCounts = {}, private readonly maxLine = 256 * 1024, private readonly overlap = 16 * 1024) {
    this.counts = counts;
  }

  push(chunk: Buffer): Buffer {
    // Fast path (not inside a PEM block, the data has a newline): redact the whole lines and, when
    // no line even held a hint, hand back a copy of the input bytes without building output
    // strings (most chunks of a log). Everything else goes through pushString.
    if (!this.inPem) {
      const data = this.carry ? Buffer.concat([Buffer.from(this.carry, 'latin1'), chunk]) : chunk;
      const lastNl = data.lastIndexOf(10);
      if (lastNl >= 0) {
        this.carry = '';
        const head = data.subarray(0, lastNl + 1);
        this.touched = false;
        const out = this.lines(head.toString('latin1'));
        const headOut = this.touched ? Buffer.from(out, 'latin1') : Buffer.from(head);
        if (lastNl + 1 === data.length) return headOut;
        const more = this.pushString(data.subarray(lastNl + 1).toString('latin1'));
        return more ? Buffer.concat([headOut, Buffer.from(more, 'latin1')]) : headOut;
      }
    }
    return Buffer.from(this.pushString(chunk.toString('latin1')), 'latin1');
  }

  end(): Buffer {
    return Buffer.from(this.endString(), 'latin1');
  }

  pushString(text: string): string {
    let buf = this.carry + text;
    this.carry = '';
    let out = '';
    const lastNl = buf.lastIndexOf('\n');
    if (lastNl >= 0) {
      out += this.lines(buf.slice(0, lastNl + 1));
      buf = buf.slice(lastNl + 1);
    }
    if (buf.length > this.maxLine) {
      // A very long line: redact it, emit up to a cut no match straddles, keep the rest raw.
      let cut = buf.length - this.overlap;
      const spans = this.inPem ? [] : findSpans(buf, buf.toLowerCase());
      for (const sp of spans) if (sp.start < cut && sp.end > cut) cut = Math.min(cut, sp.start);
      const head = buf.slice(0, cut);
      out += this.inPem ? this.maskPemBody(head) : applySpans(head, spans.filter((s) => s.end <= cut), this.counts);
      buf = buf.slice(cut);
    }
    this.carry = buf;
    return out;
  }

  endString(): string {
    const rest = this.carry;
    this.carry = '';
    return rest ? this.lines(rest) : '';
  }

  private maskPemBody(s: string): string {
    return s.replace(/[^\r\n]/g, '*');
  }

  /** Redacts text made of whole lines (the last may lack its newline). */
  private lines(text: string): string {
    let out = '';
    let pos = 0;
    // latin1: lowercasing keeps every index (no char in U+0000..U+00FF changes length)
    const lower = text.toLowerCase();
    while (pos < text.length) {
      if (!this.inPem) {
        // skip straight to the line holding the next hint
        HINT_RE.lastIndex = pos;
        const m = HINT_RE.exec(lower);
        if (!m) return out + text.slice(pos);
        const ls = text.lastIndexOf('\n', m.index - 1) + 1;
        if (ls > pos) { out += text.slice(pos, ls); pos = ls; }
      }
      const nl = text.indexOf('\n', pos);
      const end = nl < 0 ? text.length : nl + 1;
      const line = text.slice(pos, end);
      out += this.line(line);
      pos = end;
    }
    return out;
  }

  private line(line: string): string {
    this.touched = true;
    if (this.inPem) {
      const endM = PEM_END.exec(line);
      if (!endM) return this.maskPemBody(line);
      this.inPem = false;
      return this.maskPemBody(line.slice(0, endM.index)) + line.slice(endM.index);
    }
    const lower = line.toLowerCase();
    const spans = findSpans(line, lower);
    if (lower.includes('private key-----')) {
      // A BEGIN marker without its END on this line starts a multi-line PEM block.
      const begin = PEM_BEGIN.exec(line);
      if (begin) {
        const after = begin.index + begin[0].length;
        if (!PEM_END.test(line.slice(after))) {
          this.inPem = true;
          addCount(this.counts, 'pem-private-key');
          const head = applySpans(line.slice(0, after), spans.filter((s) => s.end <= after), this.counts);
          return head + this.maskPemBody(line.slice(after));
        }
      }
    }
    return applySpans(line, spans, this.counts);
  }
}

/** Adds b's counts into a. */
export function mergeCounts(a: RedactionCounts, b: RedactionCounts): RedactionCounts {
  for (const [k, v] of Object.entries(b) as [RedactionRuleName, number][]) addCount(a, k, v);
  return a;
}
