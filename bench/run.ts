/**
 * `npm run bench [name…]`: runs the benchmarks side by side in one process run and prints one
 * markdown table (copied into README). Not part of `npm test`.
 */
type Bench = () => Promise<Record<string, number | string>>;

const BENCHES: Record<string, () => Promise<Bench>> = {
  'detection-latency': async () => (await import('./detection-latency.js')).benchDetectionLatency,
  bundle: async () => (await import('./bundle.js')).benchBundle,
  collector: async () => (await import('./collector.js')).benchCollector,
  ingest: async () => (await import('./ingest.js')).benchIngestPoll,
  tune: async () => (await import('./tune.js')).benchTune,
  logs: async () => (await import('./logs.js')).benchLogs,
  'kube-rss': async () => (await import('./kube-rss.js')).benchKubeRss,
  'agent-overhead': async () => (await import('./agent-overhead.js')).benchAgentOverhead,
};

async function main(): Promise<void> {
  const wanted = process.argv.slice(2);
  const names = wanted.length ? wanted : Object.keys(BENCHES);
  const rows: Array<[string, string, string]> = [];
  let failed = 0;
  for (const name of names) {
    const load = BENCHES[name];
    if (!load) { process.stderr.write(`unknown bench ${name}; known: ${Object.keys(BENCHES).join(', ')}\n`); failed++; continue; }
    process.stderr.write(`bench ${name} …\n`);
    const t0 = Date.now();
    try {
      const result = await (await load())();
      for (const [k, v] of Object.entries(result)) rows.push([name, k, String(v)]);
      rows.push([name, 'bench_wall_seconds', ((Date.now() - t0) / 1000).toFixed(1)]);
    } catch (err) {
      failed++;
      rows.push([name, 'error', (err as Error).message.replace(/\|/g, '/')]);
    }
  }
  const out = ['| bench | measure | value |', '|---|---|---|', ...rows.map((r) => `| ${r.join(' | ')} |`)];
  process.stdout.write(`${out.join('\n')}\n`);
  if (failed) process.exitCode = 1;
}

void main();
