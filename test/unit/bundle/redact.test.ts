import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { StreamRedactor, mask, redactText, type RedactionCounts } from '../../../agent/bundle/redact.js';
import { PLANTED } from '../../fixtures/bundle/planted-secrets.js';

describe('redactText', () => {
  for (const p of PLANTED) {
    it(`masks ${p.rule}: ${p.secret.slice(0, 12)}…`, () => {
      const counts: RedactionCounts = {};
      const out = redactText(p.text, counts);
      expect(out.length).toBe(p.text.length);
      expect(out).not.toContain(p.secret);
      expect(Object.values(counts).reduce((a, b) => a + (b ?? 0), 0)).toBeGreaterThan(0);
    });
  }

  it('counts per rule', () => {
    const counts: RedactionCounts = {};
    redactText('aws_access_key_id = AKIAPLANTEDKEY7EXAMP\nAKIAPLANTEDKEY7EXAMQ\n', counts);
    expect(counts['aws-access-key-id']).toBe(2);
  });

  it('leaves ordinary log lines, paths and booleans alone', () => {
    const lines = [
      'I1121 09:51:57.123456    1234 kubelet.go:100] "Pulling image" image="nginx:1.25"',
      '--token-file=/var/run/secrets/token --password-file=/etc/pw',
      'serializeImagePulls: true',
      'KUBELET_ARGS=--node-ip=10.0.0.1 --authorization-mode=Webhook',
      'password: ""',
      'time="2026-11-21T09:51:57Z" level=info msg="PullImage \\"docker.io/library/nginx:latest\\""',
    ].join('\n') + '\n';
    const counts: RedactionCounts = {};
    expect(redactText(lines, counts)).toBe(lines);
    expect(counts).toEqual({});
  });

  it('mask keeps the length and names the rule when it fits', () => {
    expect(mask('jwt', 30)).toBe('<redacted:jwt>' + '*'.repeat(16));
    expect(mask('jwt', 3)).toBe('***');
  });

  it('keeps a multi-line PEM key masked, markers visible', () => {
    const p = PLANTED.find((x) => x.rule === 'pem-private-key')!;
    const out = redactText(p.text);
    expect(out).toContain('-----BEGIN RSA PRIVATE KEY-----');
    expect(out).toContain('-----END RSA PRIVATE KEY-----');
    expect(out).not.toMatch(/PlantedPEM/);
  });
});

describe('StreamRedactor across chunk boundaries', () => {
  const corpus = PLANTED.map((p) => p.text).join('filler line with nothing secret\n');

  it('gives the same bytes whatever the chunking (property)', () => {
    const whole = redactText(corpus);
    fc.assert(fc.property(fc.array(fc.integer({ min: 1, max: 200 }), { minLength: 1, maxLength: 60 }), (sizes) => {
      const r = new StreamRedactor();
      const src = Buffer.from(corpus, 'latin1');
      const parts: Buffer[] = [];
      let pos = 0; let i = 0;
      while (pos < src.length) {
        const n = sizes[i++ % sizes.length]!;
        parts.push(r.push(src.subarray(pos, pos + n)));
        pos += n;
      }
      parts.push(r.end());
      const out = Buffer.concat(parts).toString('latin1');
      expect(out).toBe(whole);
    }), { numRuns: 200 });
  });

  it('redacts a secret straddling the cut of a very long line', () => {
    const secret = 'AKIAPLANTEDKEY7EXAMP';
    const long = 'x'.repeat(1000) + ' ' + secret + ' ' + 'y'.repeat(1000) + '\n';
    const r = new StreamRedactor({}, 1010, 30);
    const out = Buffer.concat([r.push(Buffer.from(long.slice(0, 1015), 'latin1')), r.push(Buffer.from(long.slice(1015), 'latin1')), r.end()]).toString('latin1');
    expect(out.length).toBe(long.length);
    expect(out).not.toContain(secret);
  });

  it('preserves non-ASCII bytes (UTF-8 passes through as latin1)', () => {
    const text = 'héllo wörld password=Plänted\n';
    const buf = Buffer.from(text, 'utf8');
    const r = new StreamRedactor();
    const out = Buffer.concat([r.push(buf), r.end()]);
    expect(out.length).toBe(buf.length);
    expect(out.toString('utf8')).toContain('héllo wörld');
    expect(out.toString('utf8')).not.toContain('Plänted');
  });
});
