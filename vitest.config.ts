import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Integration tests start real daemons (containerd, registry, dockerd, PostgreSQL); give them room.
    testTimeout: 120_000,
    hookTimeout: 180_000,
    pool: 'forks',
    // Two cores: run two files at once; heavy integration files serialize themselves via locks where needed.
    maxWorkers: 2,
    reporters: ['default'],
  },
});
