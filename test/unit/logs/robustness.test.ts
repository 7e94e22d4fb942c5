import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LogCorrelator } from '../../../agent/sources/logs/correlate.js';
import { createLogSources, FileLogSource, JournalLogSource, LogSourceSpecError, parseLogSourceSpec } from '../../../agent/sources/logs/index.js';
import { LineSplitter } from '../../../agent/sources/logs/line-reader.js';
import { readGoQuoted } from '../../../agent/sources/logs/parse/gostring.js';
import { parseJournalEntry, parseJournalLine, parseLogLine, type ParsedLogLine } from '../../../agent/sources/logs/parse/index.js';
import { fixtureLines } from './fixtures.js';

const NOW = Date.UTC(2026, 10, 21, 10, 0, 0);
const ALL_FIXTURES = ['containerd-1.6.txt', 'containerd-1.7.txt', 'containerd-1.6-captured.txt', 'containerd-1.7-captured.txt', 'kubelet-1.24.txt', 'kubelet-1.30.txt', 'crio-1.30.txt', 'cri-dockerd.txt'];
const REAL_LINES = ALL_FIXTURES.flatMap((f) => fixtureLines(f));

describe('parsers never throw and ignore junk', () => {
  it('junk, empty, binary and non-pull lines give null', () => {
    const junk = [
      '', ' ', '\0\0\0', '\uFFFD\uFFFD\uFFFDPK\x03\x04', 'random text with Pulling image "x" inside but no header',
      'time=', 'time="', 'level=info msg="', 'msg="PullImage \\"', '{', '{"msg":1}', '[]', 'null',
      'I1121 09:44:10.123456', 'I1399 99:99:99.999999    1 x.go:1] "Event occurred" message="Pulling image \\"a\\""',
      'INFO[', 'INFO[0000] ', 'Zzz 99 99:99:99 host kubelet[1]: x', '2026-13-45T99:99:99Z host containerd: x',
      'time="2026-11-21T09:00:00Z" level=info msg="PullImage \\"\\""',
      'time="2026-11-21T09:00:00Z" level=info msg="PullImage \\"unterminated',
      'E0130 11:28:54.293617     222 log.go:32] "PullImage from image service failed" err="x"',
    ];
    for (const l of junk) expect(parseLogLine(l, { fallbackAt: NOW })).toBeNull();
  });

  it('only "Pulling image" in arbitrary text is not a kubelet start unless the file is known to be kubelet', () => {
    expect(parseLogLine('hello Pulling image "x:1"', { fallbackAt: NOW })).toBeNull();
  });

  it('every prefix of every recorded line (a truncated line) parses without throwing', () => {
    for (const line of REAL_LINES) {
      for (let n = 0; n <= line.length; n += 7) {
        const r = parseLogLine(line.slice(0, n), { fallbackAt: NOW });
        if (r) expect(typeof r.event.image).toBe('string');
      }
    }
  });

  it('property: arbitrary strings and mutations of real lines never throw and give valid events', () => {
    const realLine = fc.constantFrom(...REAL_LINES);
    const mutated = fc.tuple(realLine, fc.nat(), fc.string({ maxLength: 8 }), fc.nat({ max: 8 }))
      .map(([l, at, ins, del]) => { const i = at % (l.length + 1); return l.slice(0, i) + ins + l.slice(i + del); });
    const anyText = fc.oneof(fc.string({ maxLength: 300 }), fc.string({ unit: 'binary', maxLength: 300 }), mutated);
    fc.assert(fc.property(anyText, fc.constantFrom(undefined, 'kubelet', 'containerd', 'cri-o', 'docker') as fc.Arbitrary<undefined | 'kubelet' | 'containerd' | 'cri-o' | 'docker'>, (text, component) => {
      const r = parseLogLine(text, { fallbackAt: NOW, component });
      if (r !== null) {
        expect(Number.isFinite(r.at)).toBe(true);
        expect(typeof r.event.type).toBe('string');
      }
    }), { numRuns: 3000 });
  });

  it('property: arbitrary JSON values as journal entries never throw', () => {
    fc.assert(fc.property(fc.jsonValue(), (v) => {
      const r = parseJournalEntry(v, NOW);
      if (r !== null) expect(Number.isFinite(r.at)).toBe(true);
    }), { numRuns: 2000 });
    fc.assert(fc.property(fc.record({
      MESSAGE: fc.oneof(fc.constantFrom(...REAL_LINES), fc.array(fc.integer({ min: -5, max: 300 }), { maxLength: 50 }), fc.constant(null)),
      _SYSTEMD_UNIT: fc.oneof(fc.constantFrom('kubelet.service', 'containerd.service', 'crio.service', 'x'), fc.array(fc.string())),
      __REALTIME_TIMESTAMP: fc.oneof(fc.string(), fc.nat().map(String), fc.integer()),
    }, { requiredKeys: [] }), (v) => { parseJournalEntry(v, NOW); }), { numRuns: 2000 });
  });

  it('huge input lines are refused cheaply', () => {
    const big = 'time="2026-11-21T09:00:00Z" level=info msg="PullImage \\"' + 'a'.repeat(5 * 1024 * 1024) + '\\""';
    const t0 = performance.now();
    expect(parseLogLine(big, { fallbackAt: NOW })).toBeNull();
    expect(performance.now() - t0).toBeLessThan(50);
  });

  it('Go quoted strings: escapes, \\x bytes, truncation', () => {
    expect(readGoQuoted('"a\\"b\\\\c\\n\\t\\u00e9\\x41\\xff\\101"', 0)?.value).toBe('a"b\\c\n\té' + 'A\uFFFDA');
    expect(readGoQuoted('"abc', 0)).toBeNull();
    expect(readGoQuoted('"abc\\', 0)).toBeNull();
    expect(readGoQuoted('x"abc"', 0)).toBeNull();
  });
});

describe('journal entries (journalctl -o json)', () => {
  const entries = fixtureLines('journal-json.jsonl').map((l) => JSON.parse(l) as unknown);

  it('component from unit/identifier, time from __REALTIME_TIMESTAMP, byte-array and multi-valued MESSAGE', () => {
    expect(entries.map((e) => parseJournalEntry(e, NOW))).toEqual([
      { at: 1795255450123, component: 'kubelet', event: { type: 'pull-started', component: 'kubelet', image: 'nginx:1.27', pod: 'default/web-0' } },
      { at: 1795255450223, component: 'containerd', event: { type: 'pull-started', component: 'containerd', image: 'nginx:1.27' } },
      { at: 1795255750000, component: 'containerd', event: { type: 'pull-cancelled', component: 'containerd', image: 'nginx:1.27', deadlineMs: 300_000 } },
      { at: 1795255750100, component: 'cri-o', requestId: 'r1', event: { type: 'pull-started', component: 'cri-o', image: 'quay.io/pw/a:1' } },
      null, // PID 1 about the unit
      null, // MESSAGE null
      null, // bad timestamp: schema refuses the entry
    ]);
  });

  it('journal lines: noise skips JSON parsing but keeps the cursor; pull lines and byte arrays are parsed; junk is an error', () => {
    const noise = JSON.stringify({ __CURSOR: 's=1;i="9"', MESSAGE: 'Started foo.service', __REALTIME_TIMESTAMP: '1' });
    expect(parseJournalLine(noise, NOW)).toEqual({ ok: true, parsed: null, cursor: 's=1;i="9"' });
    const lines = fixtureLines('journal-json.jsonl');
    expect(parseJournalLine(lines[0] as string, NOW)).toMatchObject({ ok: true, cursor: 's=1;i=1', parsed: { component: 'kubelet' } });
    expect(parseJournalLine(lines[2] as string, NOW)).toMatchObject({ ok: true, cursor: 's=1;i=3', parsed: { event: { type: 'pull-cancelled' } } });
    expect(parseJournalLine('{"MESSAGE":"PullImage', NOW)).toMatchObject({ ok: false });
    expect(parseJournalLine('-- No entries --', NOW)).toMatchObject({ ok: false });
  });

  it('non-objects and wrong field types are refused, not thrown', () => {
    for (const v of [null, 1, 'x', [], { MESSAGE: 5 }, { MESSAGE: [1, 2, 'x'] }, { MESSAGE: [999] }, { __REALTIME_TIMESTAMP: {} }]) {
      expect(parseJournalEntry(v, NOW)).toBeNull();
    }
  });
});

describe('LineSplitter', () => {
  const collect = (s: LineSplitter, chunks: Buffer[]) => { const out: string[] = []; for (const c of chunks) s.push(c, (l) => out.push(l)); return out; };

  it('splits across chunk boundaries, strips \\r, keeps a partial last line until flush', () => {
    const s = new LineSplitter(100);
    const out = collect(s, [Buffer.from('ab'), Buffer.from('c\r\nde'), Buffer.from('f\n\ng')]);
    expect(out).toEqual(['abc', 'def', '']);
    expect(s.pendingBytes).toBe(1);
    s.flush((l) => out.push(l));
    expect(out).toEqual(['abc', 'def', '', 'g']);
  });

  it('drops a line longer than the cap, reports it once, never buffers past the cap', () => {
    const reports: number[] = [];
    const s = new LineSplitter(1024, (n) => reports.push(n));
    const out: string[] = [];
    s.push(Buffer.from('ok1\n'), (l) => out.push(l));
    let maxPending = 0;
    const chunk = Buffer.alloc(4096, 0x61);
    for (let i = 0; i < 1280; i++) { s.push(chunk, (l) => out.push(l)); maxPending = Math.max(maxPending, s.pendingBytes); } // 5 MiB
    s.push(Buffer.from('tail\nok2\n'), (l) => out.push(l));
    expect(out).toEqual(['ok1', 'ok2']);
    expect(reports).toHaveLength(1);
    expect(maxPending).toBeLessThanOrEqual(1024);
  });

  it('binary junk decodes to text without throwing', () => {
    const s = new LineSplitter(64);
    const out = collect(s, [Buffer.from([0xff, 0xfe, 0x00, 0x0a, 0xc3, 0x28, 0x0a])]);
    expect(out).toEqual(['\uFFFD\uFFFD\u0000', '\uFFFD(']);
  });
});

describe('LogCorrelator (CRI-O request ids)', () => {
  const line = (type: 'pull-started' | 'pull-succeeded' | 'pull-cancelled', image: string, requestId?: string): ParsedLogLine =>
    ({ at: NOW, component: 'cri-o', requestId, event: { type, component: 'cri-o', image } as ParsedLogLine['event'] });

  it('attributes the timeout line and the resolved Pulled line to the requested image', () => {
    const c = new LogCorrelator();
    c.apply(line('pull-started', 'quay.io/a:1', 'r1'));
    c.apply(line('pull-started', 'quay.io/b:1', 'r2'));
    expect(c.apply(line('pull-cancelled', '', 'r2'))?.event.image).toBe('quay.io/b:1');
    expect(c.apply(line('pull-succeeded', 'quay.io/a@sha256:' + 'a'.repeat(64), 'r1'))?.event)
      .toEqual({ type: 'pull-succeeded', component: 'cri-o', image: 'quay.io/a:1', repoDigest: 'quay.io/a@sha256:' + 'a'.repeat(64) });
    expect(c.apply(line('pull-cancelled', '', 'unknown'))).toBeNull();
  });

  it('one pull in flight: a timeout without a known id is that pull', () => {
    const c = new LogCorrelator();
    c.apply(line('pull-started', 'quay.io/a:1', 'r1'));
    expect(c.apply(line('pull-cancelled', ''))?.event.image).toBe('quay.io/a:1');
  });
});

describe('--log-source specs', () => {
  it('parses journal, journal:DIR, file:PATH and rejects the rest with a clear error', () => {
    expect(parseLogSourceSpec('journal')).toEqual({ kind: 'journal' });
    expect(parseLogSourceSpec('journal:/var/log/journal')).toEqual({ kind: 'journal', directory: '/var/log/journal' });
    expect(parseLogSourceSpec('file:/var/log/kubelet.log')).toEqual({ kind: 'file', path: '/var/log/kubelet.log' });
    for (const bad of ['', 'journald', 'file:', 'journal:', 'syslog:/x']) expect(() => parseLogSourceSpec(bad)).toThrow(LogSourceSpecError);
  });

  it('creates one source per distinct spec; plain journal reads the host root', () => {
    const s = createLogSources(['journal', 'file:/a.log', 'journal:/j', 'file:/a.log'], { hostRoot: '/host' });
    expect(s.map((x) => x.name)).toEqual(['journal', 'file:/a.log', 'journal:/j']);
    expect(s[0]).toBeInstanceOf(JournalLogSource);
    expect(s[1]).toBeInstanceOf(FileLogSource);
    expect((s[0] as JournalLogSource).args().slice(0, 2)).toEqual(['--root', '/host']);
    expect((s[2] as JournalLogSource).args().slice(0, 2)).toEqual(['--directory', '/j']);
    expect((createLogSources(['journal'], { hostRoot: '/' })[0] as JournalLogSource).args()[0]).toBe('-o');
  });
});
