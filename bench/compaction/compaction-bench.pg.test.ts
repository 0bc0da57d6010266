import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { compactionSection } from '../report/sections/compaction.js'
import { type Report, medianBytes } from './report.js'

/**
 * The compaction benchmark end to end in a tiny QUICK run (100 rows updated
 * 5,000 times, 2 syncs per log): the server compacts after its restart, a new
 * client downloads less than before, the report and its section hold what
 * they claim. Figures are not checked beyond their order: the machine is shared.
 */
const runScript = fileURLToPath(new URL('./run.ts', import.meta.url))
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const out = mkdtempSync(join(tmpdir(), 'sluice-compaction-bench-test-'))

afterAll(() => rmSync(out, { recursive: true, force: true }))

function runBench(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', tsx, runScript], {
      env: { ...process.env, QUICK: '1', COMPACT_ROWS: '100', COMPACT_UPDATES: '5000', COMPACT_SYNCS: '2', BENCH_RESULTS_DIR: out },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.on('close', (code) => resolve({ code, output }))
  })
}

describe('bench:compaction (QUICK, tiny)', () => {
  it('compacts after the restart and writes a consistent report', async () => {
    const { code, output } = await runBench()
    expect(code, output.slice(-3000)).toBe(0)
    const report = JSON.parse(readFileSync(join(out, 'compaction.quick.json'), 'utf8')) as Report
    expect(report.quick).toBe(true)
    expect(report.rows).toBe(100)
    expect(report.updates).toBe(5000)
    for (const side of [report.before, report.after, report.currentRows]) expect(side.syncs).toHaveLength(2)
    expect(medianBytes(report.after)).toBeLessThan(medianBytes(report.before))
    expect(medianBytes(report.after)).toBeGreaterThanOrEqual(medianBytes(report.currentRows) / 2)
    expect(report.after.diskBytes).toBeLessThan(report.before.diskBytes)
    expect(report.compaction.reclaimedBytes).toBeGreaterThan(0)
    const section = compactionSection.render({ data: report } as never)
    expect(section.tables[0]!.rows).toHaveLength(3)
    expect(section.headline[0]).toMatch(/Compaction: a new client of 100 rows updated 5,000 times/)
  }, 180_000)
})
