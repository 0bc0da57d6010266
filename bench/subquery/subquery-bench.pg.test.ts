import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { type Report, find } from './report.js'

/**
 * The subquery benchmark end to end on tiny sizes (30 shapes of each kind, 3
 * latency trials, a short burst): every run makes its shapes, routes the
 * burst, sees every move-in arrive, and the report holds what it claims.
 * Figures are not checked: the machine is shared.
 */
const runScript = fileURLToPath(new URL('./run.ts', import.meta.url))
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const out = mkdtempSync(join(tmpdir(), 'sluice-subquery-bench-test-'))

afterAll(() => rmSync(out, { recursive: true, force: true }))

function runBench(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', tsx, runScript], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      env: { ...process.env, QUICK: '1', BENCH_SUBQUERY_SIZES: '30', BENCH_SUBQUERY_TRIALS: '3', BENCH_SUBQUERY_BURST: '10', BENCH_SETTLE_S: '1', BENCH_RESULTS_DIR: out },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.on('close', (code) => resolve({ code, output }))
  })
}

describe('bench:subquery (QUICK, small counts)', () => {
  it('runs subquery and equality shapes side by side and writes a consistent report', { timeout: 170_000 }, async () => {
    const { code, output } = await runBench()
    expect(code, output.slice(-3000)).toBe(0)
    const report = JSON.parse(readFileSync(join(out, 'subquery.quick.json'), 'utf8')) as Report
    expect(report.runs.map((r) => [r.mode, r.shapes])).toEqual([
      ['subquery', 30],
      ['equality', 30],
      ['subquery-wide', 30],
    ])
    // Each user in 3 lists, and 30 in the wide run: the server counted every view entry.
    expect(find(report, 'subquery', 30)!.viewEntries).toBe(90)
    expect(find(report, 'equality', 30)!.viewEntries).toBe(0)
    expect(find(report, 'subquery-wide', 30)!.viewEntries).toBe(900)
    for (const run of report.runs) {
      expect(run.burst.changes).toBe(500)
      expect(run.latency.missed).toBe(0)
      expect(run.latency.kind).toBe(run.mode === 'equality' ? 'insert' : 'move-in')
    }
    expect(report.viewMemory?.length).toBe(2)
    expect(readFileSync(join(out, 'subquery.quick.md'), 'utf8')).toContain('Per view entry, measured apart')
  })
})
