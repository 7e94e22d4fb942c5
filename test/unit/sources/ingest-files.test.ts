import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  distributionSources, parseIngestRef, parseTimestamp, parseTotal,
} from '../../../agent/sources/containerd/ingest-files.js';

const FIXTURE = join(import.meta.dirname, '../../fixtures/sources/containerd-1.6.20/ingest');
const fixtureDir = join(FIXTURE, readdirSync(FIXTURE)[0] as string);
const read = (f: string) => readFileSync(join(fixtureDir, f), 'utf8');
const D = 'sha256:d8f505d8f9b89b4026731ad287131adadbb433d2dab6be6c218b4f91210f6acc';

describe('parseIngestRef', () => {
  it('parses the recorded containerd 1.6 ref', () => {
    const r = parseIngestRef(read('ref'));
    expect(r).toEqual({ ok: true, value: { ref: `k8s.io/1/layer-${D}`, namespace: 'k8s.io', seq: 1, clientRef: `layer-${D}`, blobKind: 'layer', digest: D } });
  });

  it.each([
    ['layer', 'layer'], ['manifest', 'manifest'], ['index', 'index'], ['config', 'config'],
    ['attestation', 'attestation'], ['unknown', 'unknown'],
  ] as const)('knows the %s- prefix', (prefix, kind) => {
    const r = parseIngestRef(`moby/57/${prefix}-${D}`);
    expect(r.ok && r.value.blobKind).toBe(kind);
    expect(r.ok && r.value.digest).toBe(D);
    expect(r.ok && r.value.namespace).toBe('moby');
  });

  it('takes the digest after a ref name annotation and tolerates unknown client refs', () => {
    const r = parseIngestRef(`default/3/manifest-docker.io/library/busybox:latest@${D}`);
    expect(r.ok && r.value).toMatchObject({ blobKind: 'manifest', digest: D, namespace: 'default' });
    const other = parseIngestRef('buildkit/9/some-other-writer');
    expect(other.ok && other.value).toMatchObject({ blobKind: 'unknown', namespace: 'buildkit' });
    expect(other.ok && other.value.digest).toBeUndefined();
  });

  it.each([
    ['empty', ''],
    ['no slashes', 'garbage'],
    ['one slash', 'k8s.io/layer-x'],
    ['non-numeric seq', `k8s.io/x/layer-${D}`],
    ['bad namespace', `k8s..io/1/layer-${D}`],
    ['empty client ref', 'k8s.io/1/'],
    ['binary junk', '\u0000\u0001\u0002/1/\u00ff'],
    ['replacement chars (bad UTF-8)', `k8s.io/1/layer-\ufffd`],
    ['huge', `k8s.io/1/${'x'.repeat(5000)}`],
  ])('rejects %s', (_name, text) => {
    expect(parseIngestRef(text).ok).toBe(false);
  });
});

describe('parseTotal', () => {
  it('parses the recorded total', () => {
    expect(parseTotal(read('total'))).toEqual({ ok: true, value: 2000000 });
  });
  it.each(['', 'abc', '-5', '0', '1e9', '12.5', '99999999999999999999', 'NaN', 'Infinity', '0x10'])('rejects %j', (t) => {
    expect(parseTotal(t).ok).toBe(false);
  });
});

describe('parseTimestamp', () => {
  it('parses the recorded RFC 3339 nano timestamps with sub-millisecond precision', () => {
    const r = parseTimestamp(read('startedat'));
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.value).toBeCloseTo(Date.parse('2026-11-21T09:55:59.039Z') + 0.105131, 3);
  });
  it('handles offsets and no fraction', () => {
    expect(parseTimestamp('2024-01-02T03:04:05+02:00')).toEqual({ ok: true, value: Date.parse('2024-01-02T01:04:05Z') });
    expect(parseTimestamp('2024-01-02T03:04:05.5Z')).toEqual({ ok: true, value: Date.parse('2024-01-02T03:04:05.500Z') });
  });
  it.each(['', 'yesterday', '0001-01-01T00:00:00Z', '2024-13-01T00:00:00Z', '2024-01-02 03:04:05Z', '2024-01-02T03:04:05', '\u0000\u0000'])('rejects %j', (t) => {
    expect(parseTimestamp(t).ok).toBe(false);
  });
});

describe('distributionSources', () => {
  it('reads containerd.io/distribution.source.<host> labels', () => {
    expect(distributionSources({
      'containerd.io/distribution.source.docker.io': 'library/alpine,library/busybox',
      'containerd.io/distribution.source.127.0.0.1:5000': 'team/app',
      'containerd.io/gc.ref.content.l.0': D,
    })).toEqual([
      { registry: 'docker.io', repositories: ['library/alpine', 'library/busybox'] },
      { registry: '127.0.0.1:5000', repositories: ['team/app'] },
    ]);
    expect(distributionSources(undefined)).toEqual([]);
    expect(distributionSources({ 'containerd.io/distribution.source.': 'x', 'containerd.io/distribution.source.h': '' })).toEqual([]);
  });
});
