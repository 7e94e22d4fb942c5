import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

/** The package version, read once from package.json (works from source and from dist/). */
export function pullwatchVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'pullwatch' && pkg.version) return pkg.version;
    } catch { /* keep looking upward */ }
    dir = dirname(dir);
  }
  return '0.0.0-unknown';
}
