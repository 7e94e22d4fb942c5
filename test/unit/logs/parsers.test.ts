import { describe, expect, it } from 'vitest';
import { parseLogLine, type ParsedLogLine } from '../../../agent/sources/logs/parse/index.js';
import { fixtureLines } from './fixtures.js';

/** A fixed "now" for lines without a time: 2026-11-21T10:00:00Z. */
const NOW = Date.UTC(2026, 10, 21, 10, 0, 0);
const iso = (s: string) => Date.parse(s);
/** klog/syslog stamps have no year or zone: local time of the year given. */
const local = (y: number, mo: number, d: number, h: number, mi: number, s: number, ms = 0) =>
  new Date(y, mo - 1, d, h, mi, s, ms).getTime();

function parseAll(name: string, ctx: { year?: number } = {}): Array<ParsedLogLine | null> {
  return fixtureLines(name).map((l) => parseLogLine(l, { fallbackAt: NOW, ...ctx }));
}

const APISERVER_ID = 'sha256:b58f4bc39345002ec3201b4a944a723612a8b58b5c4c15c9e37543e256335c25';
const KUEUE = 'us-central1-docker.pkg.dev/k8s-staging-images/kueue/secretreader-plugin:0.0.1';
const KUEUE_ERR = `rpc error: code = NotFound desc = failed to pull and unpack image "${KUEUE}": failed to resolve reference "${KUEUE}": ${KUEUE}: not found`;

describe('containerd parser on recorded lines', () => {
  it('containerd 1.7 (journal short format, field lines)', () => {
    expect(parseAll('containerd-1.7.txt')).toEqual([
      {
        at: iso('2023-09-01T23:34:52.778Z'), component: 'containerd',
        event: {
          type: 'pull-succeeded', component: 'containerd', image: 'registry.k8s.io/kube-apiserver:v1.27.5', imageId: APISERVER_ID,
          repoDigest: 'registry.k8s.io/kube-apiserver@sha256:d1929adf470fcc623ff6abf114ea8edd72bccacced84795bcd1a0084b40babe3',
          sizeBytes: 33386504, durationMs: 1336.958292,
        },
      },
      {
        at: iso('2023-09-01T23:34:52.778Z'), component: 'containerd',
        event: { type: 'pull-succeeded', component: 'containerd', image: 'registry.k8s.io/kube-apiserver:v1.27.5', imageId: APISERVER_ID },
      },
      {
        at: iso('2023-09-01T23:34:52.811Z'), component: 'containerd',
        event: { type: 'pull-started', component: 'containerd', image: 'registry.k8s.io/kube-controller-manager:v1.27.5' },
      },
      {
        at: iso('2023-09-01T23:34:53.964Z'), component: 'containerd',
        event: { type: 'pull-stopped', component: 'containerd', image: 'registry.k8s.io/kube-controller-manager:v1.27.5', activeRequests: 0, bytesRead: 29283143 },
      },
      {
        at: iso('2023-09-01T23:34:54.824Z'), component: 'containerd',
        event: {
          type: 'pull-succeeded', component: 'containerd', image: 'registry.k8s.io/kube-scheduler:v1.27.5',
          imageId: 'sha256:96c06904875e1192cbf4eb7f45d3c79f99e65d3cb1d19ac5a35204dd75f1bc2d',
          repoDigest: 'registry.k8s.io/kube-scheduler@sha256:be4cc611269fce9c54491bc1529c89ea08b183ae9f4e90095e51a7a23e0f1655',
          sizeBytes: 18232318, durationMs: 822.874373,
        },
      },
      {
        at: NOW, component: 'containerd',
        event: { type: 'pull-cancelled', component: 'containerd', image: 'private_registery.mydomain/csg/idrac_to_kafka:20250429T0012', deadlineMs: 60_000 },
      },
      {
        at: NOW, component: 'containerd',
        event: {
          type: 'pull-failed', component: 'containerd', image: 'private_registery.mydomain/csg/idrac_to_kafka:20250429T0012',
          error: 'rpc error: code = Canceled desc = failed to pull and unpack image "private_registery.mydomain/csg/idrac_to_kafka:20250429T0012": context canceled',
        },
      },
      {
        at: iso('2026-11-21T09:40:01.000Z'), component: 'containerd',
        event: {
          type: 'pull-failed', component: 'containerd', image: '127.0.0.1:5000/pw/missing:1',
          error: 'rpc error: code = NotFound desc = failed to pull and unpack image "127.0.0.1:5000/pw/missing:1": failed to resolve reference "127.0.0.1:5000/pw/missing:1": 127.0.0.1:5000/pw/missing:1: not found',
        },
      },
      {
        at: iso('2026-11-21T08:45:00.500Z'), component: 'containerd',
        event: { type: 'pull-cancelled', component: 'containerd', image: '127.0.0.1:5000/pw/big:1', deadlineMs: 300_000 },
      },
      null,
    ]);
  });

  it('containerd 1.6 (debug Pulled line without size, syslog prefixes)', () => {
    expect(parseAll('containerd-1.6.txt')).toEqual([
      {
        at: iso('2023-05-31T15:38:26.259Z'), component: 'containerd',
        event: {
          type: 'pull-succeeded', component: 'containerd', image: 'nginx:stable',
          imageId: 'sha256:1e96add5ea29fed5b25c2971895403f050ca1eaa5f614da0ee02106e97805f5f',
          repoDigest: 'docker.io/library/nginx@sha256:f3a9f1641ace4691afed070aadd1115f0e0c4ab4b2c1c447bf938619176c3eec',
        },
      },
      {
        at: iso('2023-05-31T15:38:26.260Z'), component: 'containerd',
        event: { type: 'pull-succeeded', component: 'containerd', image: 'nginx:stable', imageId: 'sha256:1e96add5ea29fed5b25c2971895403f050ca1eaa5f614da0ee02106e97805f5f' },
      },
      {
        at: iso('2021-10-27T08:03:41.783Z'), component: 'containerd',
        event: { type: 'pull-started', component: 'containerd', image: 'harbor.hyperconnect.com/node-exporter:v0.0.0' },
      },
      {
        at: iso('2026-11-21T09:41:00Z'), component: 'containerd',
        event: {
          type: 'pull-failed', component: 'containerd', image: 'docker.io/library/nginx:1.25',
          error: 'failed to pull and unpack image "docker.io/library/nginx:1.25": failed to copy: httpReadSeeker: failed open: unexpected status code https://registry-1.docker.io/v2/library/nginx/blobs/sha256:a2abf6c4d29d43a4bf9fbb769f524d0fb36a2edab49819c1bf3e76f409f953ea: 503 Service Unavailable',
        },
      },
      {
        at: iso('2025-07-16T13:27:27.881+07:00'), component: 'containerd',
        event: { type: 'pull-succeeded', component: 'containerd', image: 'praqma/network-multitool:latest', imageId: 'sha256:1631e536ed7dd2e8b80119f4f54c7958da9ffc159323ae5ecfb15c76ebdab10a' },
      },
    ]);
  });
});

describe('containerd lines captured from the real 1.6.20 and 1.7.24 binaries', () => {
  const ev = (type: string, image: string, extra: object = {}) => ({ type, component: 'containerd', image, ...extra });
  it('1.6.20: start, returns (success), start, failed', () => {
    const img = '127.0.0.1:45897/pullwatch/test-a9393516:v1';
    const missing = '127.0.0.1:45897/pullwatch/missing:nope';
    expect(parseAll('containerd-1.6-captured.txt')).toEqual([
      { at: iso('2026-11-21T10:10:09.447Z'), component: 'containerd', event: ev('pull-started', img) },
      { at: iso('2026-11-21T10:10:09.716Z'), component: 'containerd', event: ev('pull-succeeded', img, { imageId: 'sha256:044373f8125c3bc39dfb7ef7e5a62e9387dfcba7af4bb1135c0fe6c64c9d4404' }) },
      { at: iso('2026-11-21T10:10:09.776Z'), component: 'containerd', event: ev('pull-started', missing) },
      {
        at: iso('2026-11-21T10:10:09.789Z'), component: 'containerd',
        event: ev('pull-failed', missing, { error: `rpc error: code = NotFound desc = failed to pull and unpack image "${missing}": failed to resolve reference "${missing}": ${missing}: not found` }),
      },
    ]);
  });

  it('1.7.24: stop/Pulled/returns on success, failed + stop, and the progress-timeout cancel', () => {
    const img = '127.0.0.1:36333/pullwatch/test-3198bffb:v1';
    const missing = '127.0.0.1:36333/pullwatch/missing:nope';
    const held = '127.0.0.1:44561/pullwatch/test-32c39d55:v1';
    const id = 'sha256:2031fda1bd244da099f07b1faa43eea706ab1b190858fc613b04318777187fb5';
    expect(parseAll('containerd-1.7-captured.txt').map((p) => p && { ...p, at: new Date(p.at).toISOString() })).toEqual([
      { at: '2026-11-21T10:10:11.071Z', component: 'containerd', event: ev('pull-started', img) },
      { at: '2026-11-21T10:10:11.373Z', component: 'containerd', event: ev('pull-stopped', img, { activeRequests: 0, bytesRead: 1115902 }) },
      {
        at: '2026-11-21T10:10:11.377Z', component: 'containerd',
        event: ev('pull-succeeded', img, {
          imageId: id, repoDigest: '127.0.0.1:36333/pullwatch/test-3198bffb@sha256:88281743f4c0f3d295b1aac88d22fb00b155d524cfd12f68937c4834122f17e0',
          sizeBytes: 1115902, durationMs: 305.547204,
        }),
      },
      { at: '2026-11-21T10:10:11.377Z', component: 'containerd', event: ev('pull-succeeded', img, { imageId: id }) },
      { at: '2026-11-21T10:10:11.456Z', component: 'containerd', event: ev('pull-started', missing) },
      {
        at: '2026-11-21T10:10:11.469Z', component: 'containerd',
        event: ev('pull-failed', missing, { error: `rpc error: code = NotFound desc = failed to pull and unpack image "${missing}": failed to resolve reference "${missing}": ${missing}: not found` }),
      },
      { at: '2026-11-21T10:10:11.469Z', component: 'containerd', event: ev('pull-stopped', missing, { activeRequests: 0, bytesRead: 0 }) },
      { at: '2026-11-21T10:10:12.521Z', component: 'containerd', event: ev('pull-started', held) },
      { at: '2026-11-21T10:10:18.524Z', component: 'containerd', event: ev('pull-cancelled', held, { deadlineMs: 4000 }) },
      {
        at: '2026-11-21T10:10:18.528Z', component: 'containerd',
        event: ev('pull-failed', held, { error: `rpc error: code = Canceled desc = failed to pull and unpack image "${held}": context canceled` }),
      },
    ]);
  });
});

describe('kubelet parser on recorded lines', () => {
  it('structured "Event occurred", cri-client and kuberuntime lines (1.22-1.32)', () => {
    expect(parseAll('kubelet-1.30.txt', { year: 2026 })).toEqual([
      { at: local(2026, 12, 28, 2, 17, 44, 371), component: 'kubelet', event: { type: 'pull-started', component: 'kubelet', image: 'centos:7', pod: 'default/pod2' } },
      {
        at: local(2026, 10, 22, 17, 17, 42, 21), component: 'kubelet',
        event: { type: 'pull-started', component: 'kubelet', image: 'alpine:3.10', pod: 'pytorch-e2e-fcjhp/pytorch-simple-worker-1' },
      },
      { at: local(2026, 1, 30, 11, 28, 54, 293), component: 'kubelet', event: { type: 'pull-failed', component: 'kubelet', image: KUEUE, error: KUEUE_ERR } },
      { at: local(2026, 1, 30, 11, 28, 54, 293), component: 'kubelet', event: { type: 'pull-failed', component: 'kubelet', image: KUEUE, error: KUEUE_ERR } },
      {
        at: local(2026, 1, 30, 11, 28, 54, 293), component: 'kubelet',
        event: { type: 'pull-failed', component: 'kubelet', image: KUEUE, error: KUEUE_ERR, pod: 'kueue-system/kueue-controller-manager-8494d6795b-8vqfm' },
      },
      {
        at: local(2026, 11, 21, 9, 44, 10, 123), component: 'kubelet',
        event: { type: 'pull-succeeded', component: 'kubelet', image: 'nginx:latest', durationMs: 8715, waitingMs: 0, sizeBytes: 68741916, pod: 'default/nginx-pod' },
      },
      {
        at: local(2026, 11, 21, 9, 44, 11, 0), component: 'kubelet',
        event: { type: 'pull-succeeded', component: 'kubelet', image: 'registry.example.com/team/web:2.1', durationMs: 1200, waitingMs: 2300, pod: 'default/web-0' },
      },
      {
        at: local(2026, 11, 21, 9, 44, 12, 500), component: 'kubelet',
        event: { type: 'pull-backoff', component: 'kubelet', image: 'registry.example.com/team/web:2.2', pod: 'default/web-1' },
      },
      null, // already present on machine: not a pull
      null, // truncated line
      {
        at: local(2026, 5, 7, 11, 59, 34, 856), component: 'kubelet',
        event: { type: 'pull-backoff', component: 'kubelet', image: 'us.gcr.io/hosted-grafana/hosted-grafana-security:0.1.181', pod: 'integration/grafana-render-service-cbff479fc-cj9tp' },
      },
      {
        at: local(2026, 7, 23, 22, 57, 43, 256), component: 'kubelet',
        event: {
          type: 'pull-backoff', component: 'kubelet', image: 'redis:alpine', pod: 'default/redis',
          error: 'ErrImagePull: failed to pull and unpack image "docker.io/library/redis:alpine": failed to resolve image: failed to do request: Head "https://registry-1.docker.io/v2/library/redis/manifests/alpine": dial tcp 162.220.12.226:443: connect: connection refused',
        },
      },
      {
        at: local(2026, 6, 11, 3, 9, 40, 941), component: 'kubelet',
        event: {
          type: 'pull-backoff', component: 'kubelet', image: 'traefik/traefik:v3.6.2', pod: 'ingress/traefik-dvrzh',
          error: 'ErrImagePull: rpc error: code = NotFound desc = get image config descriptor: unexpected media type text/html for sha256:e26ea61296157f0af82987ff30cb788f3981709079fae00de5198ef17f3d20bd: not found',
        },
      },
    ]);
  });

  it('printf-style lines, dockershim cancel and V4 event lines (≤1.24)', () => {
    expect(parseAll('kubelet-1.24.txt', { year: 2021 })).toEqual([
      {
        at: local(2021, 6, 1, 18, 48, 29, 26), component: 'kubelet',
        event: { type: 'pull-cancelled', component: 'kubelet', image: 'nginx:latest', deadlineMs: 0, lastProgress: '89732b811e7f: Pulling fs layer ' },
      },
      {
        at: local(2021, 3, 5, 14, 2, 11, 0), component: 'kubelet',
        event: {
          type: 'pull-cancelled', component: 'kubelet', image: 'our_registry/demo/test:1', deadlineMs: 60_000,
          lastProgress: 'c914ad57d670: Extracting [==================>] 513.5MB/513.5MB',
        },
      },
      { at: local(2021, 3, 5, 14, 0, 0), component: 'kubelet', event: { type: 'pull-started', component: 'kubelet', image: 'nginx:1.21', pod: 'default/web-5d9f' } },
      {
        at: local(2021, 3, 5, 14, 0, 9, 250), component: 'kubelet',
        event: { type: 'pull-succeeded', component: 'kubelet', image: 'nginx:1.21', durationMs: 9250, pod: 'default/web-5d9f' },
      },
      {
        at: local(2021, 3, 5, 14, 1, 0), component: 'kubelet',
        event: {
          type: 'pull-failed', component: 'kubelet', image: 'registry.local:5000/a/b:c', pod: 'kube-system/agent-x',
          error: 'rpc error: code = Unknown desc = Error response from daemon: manifest unknown',
        },
      },
      {
        at: local(2021, 3, 5, 14, 1, 30), component: 'kubelet',
        event: { type: 'pull-backoff', component: 'kubelet', image: 'registry.local:5000/a/b:c', pod: 'kube-system/agent-x' },
      },
      null, // dockershim progress line
    ]);
  });

  it('Back-off with the appended previous error (1.32+ status message form)', () => {
    const r = parseLogLine('default/p/nginx:9 Back-off pulling image "nginx:9": ErrImagePull: not found', { fallbackAt: NOW, component: 'kubelet' });
    expect(r?.event).toEqual({ type: 'pull-backoff', component: 'kubelet', image: 'nginx:9', pod: 'default/p', error: 'ErrImagePull: not found' });
  });

  it('klog year: a December line read in January belongs to the year before', () => {
    const jan2 = Date.UTC(2027, 0, 2, 0, 0, 0);
    const r = parseLogLine('I1231 23:59:59.000000    1 event.go:389] "Event occurred" object="a/b" kind="Pod" reason="Pulling" message="Pulling image \\"x\\""', { fallbackAt: jan2 });
    expect(new Date(r?.at ?? 0).getFullYear()).toBe(2026);
  });
});

describe('CRI-O and cri-dockerd parsers on recorded lines', () => {
  it('CRI-O: syslog-prefixed, logfmt and TTY lines carry the request id', () => {
    const digest = 'registry.redhat.io/rhel7/support-tools@sha256:6cca005ebb5a083f9af7ec3622d7a3a8b8cd1e2b0f1f5c4c2e6e7f1a2b3c4d5e';
    const busybox = 'docker.io/library/busybox@sha256:768e5c6f5cb6db0794eec98dc7a967f40631746c32232b78a3105fb946f3ab83';
    expect(parseAll('crio-1.30.txt')).toEqual([
      {
        at: iso('2021-08-05T10:33:21.594Z'), component: 'cri-o', requestId: 'abcd713b-d0e1-4844-ac1c-474c5b60c07c',
        event: { type: 'pull-started', component: 'cri-o', image: 'quay.io/openshift-release-dev/ocp-release:4.10.0-ppc64le' },
      },
      {
        at: iso('2020-10-12T04:10:32.226Z'), component: 'cri-o', requestId: '9fd4db69-a648-421f-9a1c-6b1c2d3e4f50',
        event: { type: 'pull-started', component: 'cri-o', image: 'registry.redhat.io/rhel7/support-tools:latest' },
      },
      {
        at: iso('2020-10-12T04:10:42.877Z'), component: 'cri-o', requestId: '9fd4db69-a648-421f-9a1c-6b1c2d3e4f50',
        event: { type: 'pull-succeeded', component: 'cri-o', image: digest, repoDigest: digest },
      },
      {
        at: iso('2026-11-21T09:50:10Z'), component: 'cri-o', requestId: '5f0c2b1e-7d6a-4c1e-9d3b-0a1b2c3d4e5f',
        event: { type: 'pull-cancelled', component: 'cri-o', image: '', deadlineMs: 10_000 },
      },
      {
        at: iso('2026-11-21T09:49:55.100Z'), component: 'cri-o', requestId: '5f0c2b1e-7d6a-4c1e-9d3b-0a1b2c3d4e5f',
        event: { type: 'pull-started', component: 'cri-o', image: 'quay.io/pw/slow:3' },
      },
      {
        at: iso('2024-10-17T09:48:21Z'), component: 'cri-o', requestId: '9d7267a5-5882-4857-8589-8b1a76aa62ef',
        event: { type: 'pull-succeeded', component: 'cri-o', image: busybox, repoDigest: busybox },
      },
    ]);
  });

  it('cri-dockerd: both cancel forms, stop, progress ignored', () => {
    const progress = '0dd0445527a5: Downloading [==========================================>        ]  434.7MB/516.6MB';
    expect(parseAll('cri-dockerd.txt')).toEqual([
      {
        at: iso('2024-06-04T23:06:27+08:00'), component: 'docker',
        event: { type: 'pull-cancelled', component: 'docker', image: 'mcr.microsoft.com/windows/servercore:ltsc2019', deadlineMs: 60_000, lastProgress: progress },
      },
      { at: iso('2024-06-04T23:06:27+08:00'), component: 'docker', event: { type: 'pull-stopped', component: 'docker', image: 'mcr.microsoft.com/windows/servercore:ltsc2019' } },
      null,
      {
        at: iso('2022-03-01T10:00:00Z'), component: 'docker',
        event: { type: 'pull-cancelled', component: 'docker', image: 'nginx:1.21', deadlineMs: 60_000, lastProgress: 'a2abf6c4d29d: Downloading [>   ]  1.2MB/31.4MB' },
      },
    ]);
  });

  it('a known component skips detection: a containerd line read as kubelet is not a pull', () => {
    const line = fixtureLines('containerd-1.7.txt')[2] as string;
    expect(parseLogLine(line, { fallbackAt: NOW })?.component).toBe('containerd');
    expect(parseLogLine(line, { fallbackAt: NOW, component: 'kubelet' })).toBeNull();
  });

  it('containerd JSON log format is understood too', () => {
    const r = parseLogLine('{"level":"info","msg":"PullImage \\"busybox:1.36\\"","time":"2026-11-21T09:00:00.123456789Z"}', { fallbackAt: NOW });
    expect(r).toEqual({ at: iso('2026-11-21T09:00:00.123Z'), component: 'containerd', event: { type: 'pull-started', component: 'containerd', image: 'busybox:1.36' } });
  });
});
