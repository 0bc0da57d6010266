import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import type { Report } from './report.js'

/**
 * The live benchmark end to end in a small QUICK run (1, 20 and 40 shapes,
 * clients on at most 20 of them, one repetition): every process starts, every
 * write reaches its client on both servers, the shapes nobody follows are
 * created, the fdatasync probe and Sluice's counters are read, and the report
 * holds what it claims. Figures are not checked: the machine is shared.
 */
const runScript = fileURLToPath(new URL('./run.ts', import.meta.url))
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const out = mkdtempSync(join(tmpdir(), 'sluice-live-bench-test-'))

afterAll(() => rmSync(out, { recursive: true, force: true }))

function runBench(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', tsx, runScript], {
      env: { ...process.env, QUICK: '1', BENCH_LIVE_SHAPES: '1,20,40', BENCH_LIVE_FOLLOW_CAP: '20', BENCH_RESULTS_DIR: out },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.on('close', (code) => resolve({ code, output }))
  })
}

describe('bench:live (QUICK, small counts)', () => {
  it('runs every part and writes a consistent report', async () => {
    const { code, output } = await runBench()
    expect(code, output.slice(-3000)).toBe(0)
    const report = JSON.parse(readFileSync(join(out, 'live.quick.json'), 'utf8')) as Report
    expect(report.quick).toBe(true)
    expect(report.rows.map((r) => [r.shapes, r.followed])).toEqual([
      [1, 1],
      [20, 20],
      [40, 20],
    ])
    expect(report.rows[2]!.createSeconds).toBeGreaterThan(0)
    for (const row of report.rows) {
      expect(row.fsync).toHaveLength(1)
      expect(row.fsyncMs).toBeGreaterThan(0)
      expect(row.floorMs).toBeCloseTo(row.ceiling.median.p50Ms + row.fsyncMs, 6)
      for (const side of [row.sluice, row.ceiling]) {
        const run = side.runs[0]!
        expect(run.writes).toBeGreaterThan(0)
        expect(run.lost).toBe(0)
        expect(run.received).toBe(run.writes)
        expect(run.p50Ms).toBeGreaterThan(0)
        expect(run.p50Ms).toBeLessThanOrEqual(run.p99Ms)
        expect(run.p99Ms).toBeLessThanOrEqual(run.maxMs)
        expect(run.clients.errors).toBe(0)
        expect(run.clients.otherStatus).toBe(0)
      }
      // Sluice's counters cover the timed writes: every one was routed, and each flush is one of them or more.
      const commits = row.sluice.runs[0]!.commits!
      expect(commits.transactions).toBeGreaterThanOrEqual(row.sluice.runs[0]!.writes)
      expect(commits.flushes).toBeGreaterThan(0)
      expect(row.ceiling.runs[0]!.commits).toBeUndefined()
    }
    const burst = report.burst!
    expect(burst.writes).toBeGreaterThan(0)
    expect(burst.commits.transactions).toBeGreaterThanOrEqual(burst.writes)
    expect(burst.commits.flushes).toBeGreaterThan(0)

    const md = readFileSync(join(out, 'live.quick.md'), 'utf8')
    expect(md).toMatch(/- 1 shape: p50 .* vs floor .* \(ceiling .* \+ fdatasync .*\): \d+\.\d+x the floor, \*\*(met|missed)\*\*; p99 .* vs 50 ms: .*, \*\*(met|missed)\*\*\./)
    expect(md).toMatch(/- 40 shapes \(20 followed\): p50/)
    expect(md).toMatch(/Group commit under load: [\d,]+ back-to-back commits/)
  }, 240_000)
})
