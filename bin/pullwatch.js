#!/usr/bin/env node
// Thin launcher: the CLI is compiled TypeScript in dist/ (npm run build).
import('../dist/cli/main.js').then((m) => m.main(process.argv)).catch((err) => {
  process.stderr.write(`pullwatch: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
