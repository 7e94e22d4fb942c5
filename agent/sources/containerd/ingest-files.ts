/**
 * Pure parsers for the small text files of a containerd ingest directory
 * (`<root>/io.containerd.content.v1.content/ingest/<hex>/`), as written by
 * content/local/store.go (containerd 1.6 / 1.7 / 2.x):
 *
 * - `ref`: `<namespace>/<seq>/<client ref>` (metadata/content.go createKey), the client ref from
 *   remotes.MakeRefKey: `layer-`, `manifest-`, `index-`, `config-`, `attestation-` or `unknown-`
 *   followed by the digest (or `<ref name>@<digest>` when the descriptor carries
 *   org.opencontainers.image.ref.name).
 * - `startedat`, `updatedat`: Go time.MarshalText (RFC 3339 with up to 9 fraction digits).
 * - `total`: decimal int64, only written when > 0.
 *
 * Nothing here throws: every parser returns a result or a reason.
 */
import type { BlobKind } from '../../model/observations.js';

export type Parsed<T> = { ok: true; value: T } | { ok: false; reason: string };

export interface IngestRef {
  ref: string;
  namespace: string;
  seq: number;
  clientRef: string;
  blobKind: BlobKind;
  /** "sha256:<hex>" when the client ref ends with a digest. */
  digest?: string;
}

/** containerd identifiers/validate.go: alphanumerics separated by single `.`, `_` or `-`, ≤ 76 chars. */
const NAMESPACE_RE = /^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$/;
const DIGEST_RE = /(sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128})$/;
const KINDS: ReadonlyArray<Exclude<BlobKind, 'unknown'>> = ['layer', 'manifest', 'index', 'config', 'attestation'];
/** A ref is a few hundred bytes at most; anything longer is not a containerd ref. */
const MAX_REF_LENGTH = 4096;

export function parseIngestRef(text: string): Parsed<IngestRef> {
  if (text.length === 0) return { ok: false, reason: 'empty ref' };
  if (text.length > MAX_REF_LENGTH) return { ok: false, reason: `ref longer than ${MAX_REF_LENGTH} bytes` };
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f\ufffd]/.test(text)) return { ok: false, reason: 'ref contains control or non-UTF-8 bytes' };
  const first = text.indexOf('/');
  const second = first < 0 ? -1 : text.indexOf('/', first + 1);
  if (first < 0 || second < 0) return { ok: false, reason: 'ref is not <namespace>/<seq>/<ref>' };
  const namespace = text.slice(0, first);
  const seqText = text.slice(first + 1, second);
  const clientRef = text.slice(second + 1);
  if (namespace.length > 76 || !NAMESPACE_RE.test(namespace)) return { ok: false, reason: 'ref has an invalid namespace' };
  if (!/^\d{1,19}$/.test(seqText)) return { ok: false, reason: 'ref has an invalid sequence number' };
  if (clientRef.length === 0) return { ok: false, reason: 'ref has an empty client ref' };
  let blobKind: BlobKind = 'unknown';
  for (const k of KINDS) {
    if (clientRef.startsWith(`${k}-`)) { blobKind = k; break; }
  }
  const m = DIGEST_RE.exec(clientRef);
  const value: IngestRef = { ref: text, namespace, seq: Number(seqText), clientRef, blobKind };
  if (m?.[1]) value.digest = m[1];
  return { ok: true, value };
}

/** `total`: decimal, > 0, a safe integer (so offsets and totals stay exact numbers). */
export function parseTotal(text: string): Parsed<number> {
  const t = text.trim();
  if (!/^\d{1,16}$/.test(t)) return { ok: false, reason: 'total is not a decimal integer' };
  const n = Number(t);
  if (!Number.isSafeInteger(n) || n <= 0) return { ok: false, reason: 'total out of range' };
  return { ok: true, value: n };
}

const RFC3339_RE = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

/**
 * RFC 3339 (Go's RFC3339Nano text) → epoch milliseconds, keeping sub-millisecond precision as a
 * fraction. Date.parse is not used: it is lenient about garbage and drops digits past milliseconds.
 */
export function parseTimestamp(text: string): Parsed<number> {
  const m = RFC3339_RE.exec(text.trim());
  if (!m) return { ok: false, reason: 'timestamp is not RFC 3339' };
  const [, y, mo, d, h, mi, s, frac, , sign, oh, om] = m;
  const year = Number(y); const month = Number(mo); const day = Number(d);
  const hour = Number(h); const minute = Number(mi); const second = Number(s);
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return { ok: false, reason: 'timestamp field out of range' };
  }
  let ms = Date.UTC(year, month - 1, day, hour, minute, second);
  if (frac) ms += Number(`0.${frac}`) * 1000;
  if (sign) {
    const offset = (Number(oh) * 60 + Number(om)) * 60_000;
    ms += sign === '+' ? -offset : offset;
  }
  // Go's zero time (0001-01-01T00:00:00Z) means "unset"; nothing real predates 1970.
  if (year < 1970 || !Number.isFinite(ms)) return { ok: false, reason: 'timestamp out of range' };
  return { ok: true, value: ms };
}

/** `containerd.io/distribution.source.<registry host>` = comma-separated repositories (remotes/docker/handler.go). */
export const DISTRIBUTION_SOURCE_LABEL = 'containerd.io/distribution.source';

export interface DistributionSource { registry: string; repositories: string[] }

export function distributionSources(labels: Record<string, string> | undefined): DistributionSource[] {
  const out: DistributionSource[] = [];
  if (!labels) return out;
  const prefix = `${DISTRIBUTION_SOURCE_LABEL}.`;
  for (const [key, value] of Object.entries(labels)) {
    if (!key.startsWith(prefix) || typeof value !== 'string') continue;
    const registry = key.slice(prefix.length);
    const repositories = value.split(',').map((r) => r.trim()).filter((r) => r.length > 0);
    if (registry.length > 0 && repositories.length > 0) out.push({ registry, repositories });
  }
  return out;
}
