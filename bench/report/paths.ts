import { join } from 'node:path'

/**
 * Where a report goes: a full report to `bench/REPORT.md` with its charts in
 * `bench/charts/` (committed); a QUICK one to `bench/quick-report/` (git
 * ignored, like the quick results it shows).
 */
export function reportPaths(benchDir: string, quick: boolean): { resultsDir: string; outDir: string; chartsDir: string } {
  return { resultsDir: join(benchDir, 'results'), outDir: quick ? join(benchDir, 'quick-report') : benchDir, chartsDir: 'charts' }
}
