import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const FIXTURES = fileURLToPath(new URL('../../fixtures/logs/', import.meta.url));

/** The non-comment, non-blank lines of a fixture, in order. */
export function fixtureLines(name: string): string[] {
  return readFileSync(FIXTURES + name, 'utf8').split('\n').filter((l) => l.length > 0 && !l.startsWith('#'));
}
