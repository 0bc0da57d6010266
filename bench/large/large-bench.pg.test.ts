import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { LARGE_CLIENTS, type Report } from './report.js'

/**
 * The large-shape benchmark end to end in a QUICK run on tiny shapes (1k and
 * 3k rows, one warm and one cold run per client): every process starts, both
 * clients hold every row and the same rows, the raw download reads the same
 * bytes as the priming one for a warm shape, and the report holds what it
 * claims. Figures are not checked: the machine is shared.
 */
const runScript = fileURLToPath(new URL('./run.ts', import.meta.url))
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const out = mkdtempSync(join(tmpdir(), 'sluice-large-bench-test-'))

afterAll(() => rmSync(out, { recursive: true, force: true }))

function runBench(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', tsx, runScript], {
      env: { ...process.env, QUICK: '1', BENCH_LARGE_ROWS: '1000,3000', BENCH_RESULTS_DIR: out },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.on('close', (code) => resolve({ code, output }))
  })
}

describe('bench:large (QUICK)', () => {
  it('downloads each shape warm and cold with all three clients and writes a consistent report', async () => {
    const { code, output } = await runBench()
    expect(code, output.slice(-3000)).toBe(0)
    const report = JSON.parse(readFileSync(join(out, 'large.quick.json'), 'utf8')) as Report
    expect(report.quick).toBe(true)
    expect(report.results.map((r) => [r.rows, r.temperature])).toEqual([
      [1_000, 'warm'],
      [3_000, 'warm'],
      [1_000, 'cold'],
      [3_000, 'cold'],
    ])
    for (const row of report.results) {
      expect(row.rowsEqual).toBe(true)
      expect(row.bodyBytes).toBeGreaterThan(row.rows * 100)
      for (const client of LARGE_CLIENTS) {
        expect(row.runs[client]).toHaveLength(1)
        const run = row.runs[client]![0]!
        expect(run.ms).toBeGreaterThan(0)
        expect(run.peakRss ?? run.peakRssSampled).toBeGreaterThanOrEqual(run.before.rss * 0.5)
        if (client === 'raw' || client === 'parse') {
          expect(run.bodyBytes).toBeGreaterThan(0)
          // A warm shape's log is what the priming download read, byte for byte in length.
          if (row.temperature === 'warm') expect([run.bodyBytes, run.requests]).toEqual([row.bodyBytes, row.requests])
          // The floor keeps every row (by key), untyped: no digest to compare with the clients'.
          expect(run.rows).toBe(client === 'raw' ? null : row.rows)
          expect(run.rowsSha256).toBeNull()
        } else {
          expect(run.rows).toBe(row.rows)
          expect(run.rowsSha256).toMatch(/^[0-9a-f]{64}$/)
        }
        if (row.temperature === 'cold') expect(run.where).toMatch(/^id > -\d+$/)
      }
      expect(row.runs.ours[0]!.rowsSha256).toBe(row.runs.official[0]!.rowsSha256)
    }
    // Cold shapes are new shapes of the same rows.
    expect(new Set(report.results.filter((r) => r.rows === 3_000).map((r) => r.runs.ours[0]!.rowsSha256)).size).toBe(1)
    expect(new Set(report.results.flatMap((r) => LARGE_CLIENTS.map((c) => r.runs[c]![0]!.where)).filter((w) => w !== undefined)).size).toBe(2 * LARGE_CLIENTS.length)

    const md = readFileSync(join(out, 'large.quick.md'), 'utf8')
    expect(md).toContain('## Medians')
    expect(md).toMatch(/Our client, 3,000 rows from a warm shape: [\d,]+ ms \(target under 10,000 ms\): not judged/)
    expect(md).toMatch(/The floor of any JavaScript client that keeps the rows .*: [\d,]+ ms; our client [\d.]+x of it/)
  }, 300_000)
})
