/**
 * `npm run bench` (root) / `pnpm --filter @sluice/bench run bench`: every
 * registered benchmark in turn, one at a time (they share the machine's cores
 * and would distort each other), then the combined report. QUICK=1 runs each
 * benchmark's quick variant and writes the report to `quick-report/`.
 * BENCH_SUITE=http,client runs a subset (the report still shows every results
 * file present). A benchmark that fails does not stop the others; the run
 * exits non-zero naming it.
 */
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { delimiter, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { writeReport } from './build.js'
import { reportPaths } from './paths.js'
import { BENCHMARKS } from './registry.js'

const benchDir = join(dirname(fileURLToPath(import.meta.url)), '..')
const quick = process.env.QUICK === '1'
const suite = process.env.BENCH_SUITE?.split(',').map((s) => s.trim())
const unknown = suite?.filter((name) => !BENCHMARKS.some((b) => b.name === name)) ?? []
if (unknown.length > 0) throw new Error(`BENCH_SUITE: no benchmark named ${unknown.join(', ')} (known: ${BENCHMARKS.map((b) => b.name).join(', ')})`)
const scripts = (JSON.parse(readFileSync(join(benchDir, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts

const failed: string[] = []
const started = performance.now()
for (const bench of BENCHMARKS) {
  if (suite !== undefined && !suite.includes(bench.name)) continue
  const command = scripts[bench.script]
  if (command === undefined) throw new Error(`package.json has no script ${bench.script}`)
  const env = {
    ...process.env,
    ...(quick ? bench.quickEnv : {}),
    PATH: `${join(benchDir, 'node_modules', '.bin')}${delimiter}${process.env.PATH ?? ''}`,
  }
  const extra = quick ? Object.entries(bench.quickEnv).map(([k, v]) => `${k}=${v} `).join('') : ''
  console.log(`\n== ${bench.name}: ${extra}${command} (${new Date().toISOString()})`)
  const t0 = performance.now()
  // The package script's own command line, as `pnpm run` would run it, so the two cannot drift apart.
  const result = spawnSync('sh', ['-c', command], { cwd: benchDir, env, stdio: 'inherit' })
  const seconds = ((performance.now() - t0) / 1000).toFixed(0)
  if (result.status !== 0) {
    failed.push(bench.name)
    console.log(`== ${bench.name} failed (exit ${result.status ?? result.signal}) after ${seconds} s`)
  } else {
    console.log(`== ${bench.name} done in ${seconds} s`)
  }
}

const paths = reportPaths(benchDir, quick)
const report = await writeReport({ sections: BENCHMARKS.map((b) => b.section), quick, ...paths })
console.log(`\nwrote ${join(paths.outDir, 'REPORT.md')} (${report.sections.map((s) => `${s.section.id}: ${s.file.file}`).join(', ')}) and ${report.charts.length} charts; all in ${((performance.now() - started) / 60_000).toFixed(1)} min`)
if (failed.length > 0) {
  console.error(`failed: ${failed.join(', ')}`)
  process.exit(1)
}
