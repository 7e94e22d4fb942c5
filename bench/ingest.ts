/**
 * Cost of ContainerdIngestSource polls: 200 concurrent ingest dirs laid out on disk exactly as
 * containerd writes them, every `data` file growing between polls, manifests in blobs/sha256 so
 * that attribution runs too. Measures the CPU time of the polls themselves (process.cpuUsage
 * around each poll; the growth writes are outside the measurement) and the process RSS.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../common/log.js';
import { ContainerdIngestSource } from '../agent/sources/containerd/ingest-source.js';
import { SourceHealth } from '../agent/sources/health.js';
import type { SourceContext } from '../agent/sources/source.js';

const hex = (s: string): string => createHash('sha256').update(s).digest('hex');

function goTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000000Z');
}

export interface BenchIngestOptions { ingests?: number; polls?: number; images?: number; otherBlobs?: number }

export async function benchIngestPoll(opts: BenchIngestOptions = {}): Promise<Record<string, number | string>> {
  const ingests = opts.ingests ?? 200;
  const polls = opts.polls ?? 200;
  const images = opts.images ?? 20;
  const otherBlobs = opts.otherBlobs ?? 1000;
  (globalThis as { gc?: () => void }).gc?.();
  const rssBefore = process.memoryUsage().rss;
  const root = mkdtempSync(join(tmpdir(), 'pw-bench-ingest-'));
  const content = join(root, 'io.containerd.content.v1.content');
  const ingestDir = join(content, 'ingest');
  const blobs = join(content, 'blobs', 'sha256');
  mkdirSync(ingestDir, { recursive: true });
  mkdirSync(blobs, { recursive: true });
  try {
    // Committed blobs: unrelated small files plus one manifest per image listing its layers.
    for (let i = 0; i < otherBlobs; i++) {
      const b = Buffer.concat([Buffer.from([0x1f, 0x8b]), Buffer.from(`blob ${i}`)]);
      writeFileSync(join(blobs, createHash('sha256').update(b).digest('hex')), b);
    }
    const dataFiles: string[] = [];
    const started = Date.now() - 5000;
    const perImage = Math.ceil(ingests / images);
    for (let img = 0; img < images; img++) {
      const layers: string[] = [];
      for (let j = 0; j < perImage && img * perImage + j < ingests; j++) {
        const n = img * perImage + j;
        const digest = `sha256:${hex(`layer ${n}`)}`;
        layers.push(digest);
        const ref = `k8s.io/${n + 1}/layer-${digest}`;
        const dir = join(ingestDir, hex(ref));
        mkdirSync(dir);
        writeFileSync(join(dir, 'ref'), ref);
        writeFileSync(join(dir, 'startedat'), goTime(started));
        writeFileSync(join(dir, 'updatedat'), goTime(started));
        writeFileSync(join(dir, 'total'), String(200 * 1024 * 1024));
        writeFileSync(join(dir, 'data'), '');
        dataFiles.push(join(dir, 'data'));
      }
      const manifest = JSON.stringify({
        schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: `sha256:${hex(`config ${img}`)}`, size: 1 },
        layers: layers.map((d) => ({ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: d, size: 1 })),
      });
      writeFileSync(join(blobs, hex(manifest)), manifest);
    }

    let emitted = 0;
    let lastPresent = 0;
    let attributed = 0;
    const health = new SourceHealth(silentLogger());
    let now = Date.now();
    const ctx: SourceContext = {
      emit: (o) => {
        emitted++;
        if (o.kind === 'ingests') {
          lastPresent = o.present.length;
          attributed = o.present.filter((s) => s.manifestDigest).length;
        }
      },
      health, logger: silentLogger(), now: () => now,
    };
    const source = new ContainerdIngestSource({ root, pollMs: 3_600_000 });
    let size = 0;
    const grow = (): void => {
      size += 64 * 1024;
      for (const f of dataFiles) truncateSync(f, size); // sparse growth: size and mtime change, no disk use
    };

    // Warm-up: first sight of every dir (reads its small files), creation grace, attribution scan.
    const cpuStart = process.cpuUsage();
    await source.start(ctx);
    const firstPollCpuUs = cpuUs(process.cpuUsage(cpuStart));
    await source.settle();
    const attributionCpuUs = cpuUs(process.cpuUsage(cpuStart)) - firstPollCpuUs;
    now += 60_000;
    for (let i = 0; i < 5; i++) { grow(); source.pollOnce(); await source.settle(); }

    let totalUs = 0;
    let wallNs = 0n;
    for (let i = 0; i < polls; i++) {
      grow();
      now += 1000;
      const c0 = process.cpuUsage();
      const w0 = process.hrtime.bigint();
      source.pollOnce();
      wallNs += process.hrtime.bigint() - w0;
      totalUs += cpuUs(process.cpuUsage(c0));
      if (i % 20 === 0) await new Promise((r) => setImmediate(r));
    }
    await source.stop();
    const perPollUs = totalUs / polls;
    const errors = health.snapshot().reduce((a, e) => a + e.count, 0);
    if (lastPresent !== ingests) throw new Error(`expected ${ingests} ingests in the last poll, saw ${lastPresent}`);
    return {
      ingests,
      polls,
      cpu_us_per_poll: Math.round(perPollUs),
      cpu_us_per_ingest_per_poll: Number((perPollUs / ingests).toFixed(2)),
      wall_us_per_poll: Math.round(Number(wallNs / BigInt(polls)) / 1000),
      core_percent_at_1s_poll: Number((perPollUs / 1e6 * 100).toFixed(3)),
      first_poll_cpu_ms: Number((firstPollCpuUs / 1000).toFixed(1)),
      attribution_scan_cpu_ms: Number((attributionCpuUs / 1000).toFixed(1)),
      attributed_ingests: attributed,
      blobs_in_store: otherBlobs + images,
      small_file_reads_total: source.stats.smallFileReads,
      observations_emitted: emitted,
      source_errors: errors,
      rss_mib: Number((process.memoryUsage().rss / 1048576).toFixed(1)),
      rss_growth_mib: Number(((process.memoryUsage().rss - rssBefore) / 1048576).toFixed(1)),
      heap_used_mib: Number((process.memoryUsage().heapUsed / 1048576).toFixed(1)),
    };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

function cpuUs(u: NodeJS.CpuUsage): number {
  return u.user + u.system;
}
