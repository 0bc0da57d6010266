import { availableParallelism } from 'node:os'
import { join } from 'node:path'
import type { ViteUserConfig } from 'vitest/config'

/**
 * One test configuration for every package: sources are resolved through the
 * `sluice-source` export condition (no build step before tests), and each package
 * writes a JSON report that `scripts/run.mjs test` sums into the final
 * `N passed, N failed` line.
 */
export function sharedTestConfig(packageDir: string): ViteUserConfig {
  return {
    resolve: { conditions: ['sluice-source'] },
    ssr: { resolve: { conditions: ['sluice-source'] } },
    test: {
      include: ['test/**/*.test.ts', 'src/**/*.test.ts'],
      // `npm run test:unit`: tests that need Postgres, a browser or nginx are named *.pg.test.ts(x).
      // (A package whose every test needs them, the example app, has nothing to run there.)
      passWithNoTests: process.env['SLUICE_TEST_SCOPE'] === 'unit',
      exclude: process.env['SLUICE_TEST_SCOPE'] === 'unit' ? ['**/node_modules/**', '**/*.pg.test.ts', '**/*.pg.test.tsx'] : ['**/node_modules/**'],
      // Two test files at a time on a two-core machine, where vitest's default (one fewer than the
      // cores) runs one: most of a file's time is spent waiting for Postgres, child processes and the
      // disk, so two overlap well. A test file therefore never has the machine to itself.
      maxWorkers: Math.max(2, availableParallelism() - 1),
      testTimeout: 60_000,
      hookTimeout: 120_000,
      reporters: ['default', 'json'],
      outputFile: { json: join(packageDir, 'test-results', 'vitest.json') },
    },
  }
}
