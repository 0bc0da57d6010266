/**
 * `pnpm --filter @sluice/bench run bench:report` (from the root: `npm run bench:report`):
 * rebuilds `REPORT.md` and its charts from the results already in `results/`,
 * running no benchmark. QUICK=1 builds the smoke-run report instead.
 */
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { BENCHMARKS } from './registry.js'
import { reportPaths } from './paths.js'
import { writeReport } from './build.js'

const benchDir = join(dirname(fileURLToPath(import.meta.url)), '..')
const quick = process.env.QUICK === '1'
const paths = reportPaths(benchDir, quick)
const report = await writeReport({ sections: BENCHMARKS.map((b) => b.section), quick, ...paths })
for (const { section, file, newer } of report.sections) console.log(`${section.id}: ${file.file} (${file.kind})${newer === undefined ? "" : `, and the newer ${newer.file.file}`}`)
for (const section of report.missing) console.log(`${section.id}: no results file`)
console.log(`wrote ${join(paths.outDir, 'REPORT.md')} and ${report.charts.length} charts in ${join(paths.outDir, paths.chartsDir)}`)
