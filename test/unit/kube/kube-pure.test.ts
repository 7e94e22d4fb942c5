import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parsePod, podsQueuedBehind, podsWaitingOn, waitingContainers, podSchema } from '../../../agent/kube/pods.js';
import { parseNode, parseRuntimeVersion } from '../../../agent/kube/node-info.js';
import { eventForTransition, shortDigest, truncateUtf8, NOTE_LIMIT_BYTES } from '../../../agent/kube/event-message.js';
import { TokenBucket } from '../../../agent/kube/token-bucket.js';
import { eventName } from '../../../agent/kube/events-sink.js';
import { stalledPull, transition } from './pull-fixture.js';
import type { PodImageWait } from '../../../agent/model/observations.js';

const FIX = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'fixtures', 'kube');
const fixture = (name: string): Record<string, unknown> => JSON.parse(readFileSync(join(FIX, name), 'utf8')) as Record<string, unknown>;

describe('pods → waiting containers', () => {
  it('reads the recorded ImagePullBackOff pod: image from the spec, reason and message from the status', () => {
    const r = parsePod(fixture('pod-imagepullbackoff.json'));
    expect(r).toEqual({
      ok: true,
      key: 'shop/web-7d9c6b5f8d-x2kqp',
      namespace: 'shop',
      name: 'web-7d9c6b5f8d-x2kqp',
      resourceVersion: '48213',
      waits: [{
        namespace: 'shop', name: 'web-7d9c6b5f8d-x2kqp', uid: 'b3c2a7e4-6d0f-4a3b-8f8e-2d7b1c9e5a40', container: 'web',
        image: 'registry.example.com/team/web:1.4.2', reason: 'ImagePullBackOff',
        message: 'Back-off pulling image "registry.example.com/team/web:1.4.2"',
      }],
    });
  });

  it('init containers count, running / non-image waits / finished pods do not', () => {
    const pod = podSchema.parse({
      metadata: { name: 'p', namespace: 'n' },
      spec: {
        initContainers: [{ name: 'init', image: 'busybox:1.36' }],
        containers: [{ name: 'a', image: 'nginx:1.27' }, { name: 'b', image: 'redis:7' }, { name: 'c', image: 'x:1' }],
      },
      status: {
        phase: 'Pending',
        initContainerStatuses: [{ name: 'init', state: { waiting: { reason: 'ErrImagePull' } } }],
        containerStatuses: [
          { name: 'a', state: { waiting: { reason: 'PodInitializing' } } },
          { name: 'b', state: { running: { startedAt: '2024-01-01T00:00:00Z' } } },
          { name: 'c', state: { waiting: { reason: 'CrashLoopBackOff' } } },
        ],
      },
    });
    expect(waitingContainers(pod).map((w) => [w.container, w.image, w.reason])).toEqual([['init', 'busybox:1.36', 'ErrImagePull']]);
    expect(waitingContainers({ ...pod, status: { ...pod.status, phase: 'Failed' } })).toEqual([]);
  });

  it('malformed pods are an error value, never an exception', () => {
    for (const bad of [null, 42, 'pod', {}, { metadata: { name: 'x' } }, { metadata: { name: 'x', namespace: 'y' }, spec: { containers: 'no' } }]) {
      const r = parsePod(bad);
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.error).toMatch(/^invalid Pod object/);
    }
  });

  it('lists pods queued behind a stalled pull only when pulls are serialized', () => {
    const w = (name: string, image: string, reason = 'ContainerCreating'): PodImageWait => ({ namespace: 'n', name, container: 'c', image, reason });
    const waits = [
      w('stuck-1', 'registry.example.com/team/web:1.4.2'),
      w('stuck-2', 'registry.example.com/team/web:1.4.2', 'ImagePullBackOff'),
      w('queued-1', 'nginx'),
      w('queued-2', 'docker.io/library/redis:7'),
      w('backoff', 'quay.io/x/y:1', 'ImagePullBackOff'),
    ];
    expect(podsQueuedBehind('registry.example.com/team/web:1.4.2', waits, true).map((x) => x.name)).toEqual(['queued-1', 'queued-2']);
    expect(podsQueuedBehind('registry.example.com/team/web:1.4.2', waits, false)).toEqual([]);
    // "nginx" and "docker.io/library/nginx:latest" are the same image.
    expect(podsWaitingOn('docker.io/library/nginx:latest', waits).map((x) => x.name)).toEqual(['queued-1']);
  });
});

describe('node info', () => {
  it('reads kubelet and runtime versions from the recorded Node', () => {
    const r = parseNode(fixture('node.json'));
    expect(r).toEqual({
      ok: true,
      node: {
        name: 'node-a', kubeletVersion: 'v1.31.4', containerRuntimeVersion: 'containerd://1.7.24',
        osImage: 'Debian GNU/Linux 12 (bookworm)', kernelVersion: '6.1.0-28-cloud-amd64',
        runtime: { name: 'containerd', version: '1.7.24' },
      },
    });
  });

  it('parses runtime version strings of each runtime; containerd 1.6 has no pull deadline', () => {
    expect(parseRuntimeVersion('containerd://1.6.20')).toEqual({ name: 'containerd', version: '1.6.20', pullDeadlineMs: null });
    expect(parseRuntimeVersion('containerd://2.0.2')).toEqual({ name: 'containerd', version: '2.0.2' });
    expect(parseRuntimeVersion('cri-o://1.30.3')).toEqual({ name: 'cri-o', version: '1.30.3' });
    expect(parseRuntimeVersion('docker://24.0.7')).toEqual({ name: 'docker', version: '24.0.7' });
    expect(parseRuntimeVersion('rkt://1.0')).toBeUndefined();
    expect(parseRuntimeVersion('garbage')).toBeUndefined();
    expect(parseNode({ kind: 'Node' }).ok).toBe(false);
  });
});

describe('event notes', () => {
  const pods = [{ namespace: 'shop', name: 'web-1' }];

  it('stalled: the example a person reads in kubectl describe pod', () => {
    expect(eventForTransition(transition('stalled', stalledPull(pods)))).toEqual({
      reason: 'PullStalled',
      type: 'Warning',
      action: 'ObserveImagePull',
      note: 'image registry.example.com/team/web:1.4.2: layer sha256:ab12cd34ef56… stalled at 4.2 MB of 40.0 MB for 1m15s (registry.example.com, containerd 1.7.24, runtime deadline 5m0s)',
    });
  });

  it('slow names the rate and elapsed time; runtime deadline none / disabled / unknown are said so', () => {
    const slowPull = stalledPull(pods, { runtimeDeadlineMs: null, runtime: { name: 'containerd', version: '1.6.20' } });
    const layer = slowPull.layers[1];
    if (layer) { layer.state = 'slow'; layer.rateBytesPerSecond = 12_345; }
    expect(eventForTransition(transition('slow', slowPull, '2024-11-07T14:05:11.000Z'))?.note)
      .toBe('image registry.example.com/team/web:1.4.2: layer sha256:ab12cd34ef56… crawling at 12.3 kB/s, 4.2 MB of 40.0 MB after 3m0s (registry.example.com, containerd 1.6.20, no runtime deadline)');
    expect(eventForTransition(transition('stalled', stalledPull(pods, { runtimeDeadlineMs: 0 })))?.note).toContain('runtime deadline disabled)');
    expect(eventForTransition(transition('stalled', stalledPull(pods, { runtimeDeadlineMs: undefined })))?.note).toMatch(/\(registry\.example\.com, containerd 1\.7\.24\)$/);
    expect(eventForTransition(transition('stalled', stalledPull(pods, { layers: [] })))?.note)
      .toBe('image registry.example.com/team/web:1.4.2: pull stalled at 4.2 MB of 40.0 MB for 1m15s (registry.example.com, containerd 1.7.24, runtime deadline 5m0s)');
  });

  it('only stalled/slow/resumed/cancelled become events', () => {
    for (const k of ['started', 'unpacking', 'completed', 'failed'] as const) {
      expect(eventForTransition(transition(k, stalledPull(pods)))).toBeUndefined();
    }
    expect(eventForTransition(transition('resumed', stalledPull(pods)))?.type).toBe('Normal');
    expect(eventForTransition(transition('cancelled', stalledPull(pods)))?.reason).toBe('PullCancelledByRuntime');
  });

  it('notes stay within the API limit (1024 bytes) without splitting characters', () => {
    const long = eventForTransition(transition('stalled', stalledPull(pods, { image: `registry.example.com/${'ü'.repeat(2000)}:1` })));
    expect(Buffer.byteLength(long?.note ?? '', 'utf8')).toBeLessThanOrEqual(NOTE_LIMIT_BYTES);
    expect(long?.note.endsWith('…')).toBe(true);
    expect(truncateUtf8('abc', 10)).toBe('abc');
    expect(shortDigest('sha256:ab12cd34ef5678901234')).toBe('sha256:ab12cd34ef56…');
    expect(shortDigest('not-a-digest')).toBe('not-a-digest');
  });

  it('event names are DNS subdomains, stable per series, ≤253 characters', () => {
    const a = eventName('web-1', 'shop/web-1/PullStalled/x', 1);
    expect(a).toMatch(/^web-1\.[0-9a-f]{16}$/);
    expect(eventName('web-1', 'shop/web-1/PullStalled/x', 1)).toBe(a);
    expect(eventName('web-1', 'shop/web-1/PullStalled/x', 2)).not.toBe(a);
    expect(eventName('p'.repeat(253), 'k', 1).length).toBeLessThanOrEqual(253);
  });
});

describe('token bucket', () => {
  it('allows a burst, then qps per second', () => {
    let now = 0;
    const b = new TokenBucket(5, 3, () => now);
    expect([b.tryTake(), b.tryTake(), b.tryTake()]).toEqual([0, 0, 0]);
    expect(b.tryTake()).toBe(200);
    now += 200;
    expect(b.tryTake()).toBe(0);
    now += 10_000;
    expect([b.tryTake(), b.tryTake(), b.tryTake(), b.tryTake() > 0]).toEqual([0, 0, 0, true]);
    expect(() => new TokenBucket(0, 1)).toThrow(/qps/);
  });
});
