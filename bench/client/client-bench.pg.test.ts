import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import type { Report } from './report.js'

/**
 * The client benchmark end to end in a QUICK run (2k and 10k rows, a 5k-row
 * live Shape, one repetition): every process starts, both clients end with
 * the same row count and equal rows, every live transaction shows in both
 * Shapes, the final Shapes equal Postgres, and the report holds what it
 * claims. Figures are not checked: the machine is shared.
 */
const runScript = fileURLToPath(new URL('./run.ts', import.meta.url))
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const out = mkdtempSync(join(tmpdir(), 'sluice-client-bench-test-'))

afterAll(() => rmSync(out, { recursive: true, force: true }))

function runBench(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', tsx, runScript], {
      env: { ...process.env, QUICK: '1', BENCH_RESULTS_DIR: out },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.on('close', (code) => resolve({ code, output }))
  })
}

describe('bench:client (QUICK)', () => {
  it('syncs the same rows with both clients, follows every live update and writes a consistent report', async () => {
    const { code, output } = await runBench()
    expect(code, output.slice(-3000)).toBe(0)
    const report = JSON.parse(readFileSync(join(out, 'client.quick.json'), 'utf8')) as Report
    expect(report.quick).toBe(true)

    expect(report.sync.map((r) => r.rows)).toEqual([2_000, 10_000])
    for (const row of report.sync) {
      expect(row.rowsEqual).toBe(true)
      for (const client of ['ours', 'official'] as const) {
        expect(row.runs[client]).toHaveLength(1)
        const run = row.runs[client][0]!
        expect(run.rows).toBe(row.rows)
        expect(run.ms).toBeGreaterThan(0)
        expect(run.peakHeapUsed).toBeGreaterThan(0)
        expect(run.peakRss ?? run.peakRssSampled).toBeGreaterThanOrEqual(run.before.rss * 0.5)
      }
      // One digest for both clients: the same rows, value for value.
      expect(row.runs.ours[0]!.rowsSha256).toBe(row.runs.official[0]!.rowsSha256)
    }

    expect(report.live).toHaveLength(1)
    const live = report.live[0]!
    expect(live.rows).toBe(5_000)
    for (const client of ['ours', 'official'] as const) {
      const run = live.runs[client][0]!
      expect(run.writer.transactions).toBeGreaterThan(0)
      expect(run.transactions).toBe(run.writer.transactions)
      expect(run.missing).toBe(0)
      expect(run.seen + run.overtaken).toBe(run.transactions)
      expect(run.lagP50Ms).toBeGreaterThan(0)
      expect(run.lagP50Ms).toBeLessThanOrEqual(run.lagMaxMs)
      expect(run.equalsPostgres).toBe(true)
    }

    const md = readFileSync(join(out, 'client.quick.md'), 'utf8')
    expect(md).toContain('## Sync and materialise')
    expect(md).toContain('## Live updates')
    expect(md).toMatch(/Sync 10,000 rows: ours [\d,]+ ms vs official [\d,]+ ms \(time \d+\.\d\dx\)/)
  }, 300_000)
})
