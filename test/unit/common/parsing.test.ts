import { describe, expect, it } from 'vitest';
import { formatDuration, parseDuration } from '../../../common/duration.js';
import { formatBytes, parseBytes } from '../../../common/bytes.js';
import { parseImageRef } from '../../../common/image-ref.js';

describe('parseDuration', () => {
  it.each([
    ['60s', 60_000], ['1m30s', 90_000], ['5m0s', 300_000], ['250ms', 250], ['1.5h', 5_400_000], ['0', 0], ['14d', 14 * 86_400_000],
  ])('%s', (text, ms) => expect(parseDuration(text)).toBe(ms));
  it.each(['', 'abc', '10', '5 m', '1x'])('rejects %j', (text) => expect(() => parseDuration(text)).toThrow(/duration/));
  it('formats like Go', () => {
    expect(formatDuration(300_000)).toBe('5m0s');
    expect(formatDuration(75_000)).toBe('1m15s');
    expect(formatDuration(1500)).toBe('1.5s');
    expect(formatDuration(3_600_000)).toBe('1h0m0s');
  });
});

describe('parseBytes', () => {
  it.each([['65536', 65536], ['64KiB', 65536], ['64k', 65536], ['1MB', 1_000_000], ['2GiB', 2 * 1024 ** 3], ['64KiB/s', 65536]])(
    '%s', (text, n) => expect(parseBytes(text)).toBe(n));
  it('rejects junk', () => expect(() => parseBytes('fast')).toThrow(/invalid size/));
  it('formats', () => { expect(formatBytes(4_200_000)).toBe('4.2 MB'); expect(formatBytes(512)).toBe('512 B'); });
});

describe('parseImageRef', () => {
  it('normalises Docker Hub short names', () => {
    expect(parseImageRef('nginx').normalized).toBe('docker.io/library/nginx:latest');
    expect(parseImageRef('bitnami/redis:7').normalized).toBe('docker.io/bitnami/redis:7');
  });
  it('keeps hosts with ports and digests', () => {
    const r = parseImageRef('localhost:5000/team/app@sha256:abc');
    expect(r).toMatchObject({ registry: 'localhost:5000', repository: 'team/app', digest: 'sha256:abc', tag: undefined });
    expect(parseImageRef('123.dkr.ecr.us-east-1.amazonaws.com/app:v1').registry).toBe('123.dkr.ecr.us-east-1.amazonaws.com');
  });
});
