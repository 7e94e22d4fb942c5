/**
 * A collector in its own process, for kill -9 tests: `node --import tsx collector-process.ts <json options>`.
 * Prints "LISTENING <url>" on stdout once it serves.
 */
import { startCollector, type CollectorOptions } from '../../../collector/run.js';
import { silentLogger } from '../../../common/log.js';

const opts = JSON.parse(process.argv[2] ?? '{}') as CollectorOptions;
const c = await startCollector(opts, silentLogger());
process.stdout.write(`LISTENING ${c.url}\n`);
process.on('SIGTERM', () => { void c.stop().then(() => process.exit(0)); });
