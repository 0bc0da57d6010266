import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import type { Report } from './report.js'

/**
 * The overlap benchmark end to end on tiny counts (QUICK, 1 and 12 shapes, 12
 * shapes created at once): every process starts, every write reaches every
 * client in both modes, every creation request ends up-to-date, and the
 * report holds what it claims. Figures are not checked: the machine is shared.
 */
const runScript = fileURLToPath(new URL('./run.ts', import.meta.url))
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const out = mkdtempSync(join(tmpdir(), 'sluice-overlap-bench-test-'))

afterAll(() => rmSync(out, { recursive: true, force: true }))

function runBench(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', tsx, runScript], {
      env: { ...process.env, QUICK: '1', BENCH_OVERLAP_SHAPES: '1,12', BENCH_OVERLAP_CREATE: '12', BENCH_OVERLAP_WRITES: '5', BENCH_RESULTS_DIR: out },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.on('close', (code) => resolve({ code, output }))
  })
}

describe('bench:overlap (QUICK, tiny counts)', () => {
  it('runs both parts and writes a consistent report', async () => {
    const { code, output } = await runBench()
    expect(code, output.slice(-3000)).toBe(0)
    const report = JSON.parse(readFileSync(join(out, 'overlap.quick.json'), 'utf8')) as Report
    expect(report.quick).toBe(true)

    expect(report.fanout.map((r) => [r.shapes, r.mode])).toEqual([
      [1, 'independent'],
      [1, 'one'],
      [12, 'independent'],
      [12, 'one'],
    ])
    for (const run of report.fanout) {
      expect(run.processes).toBe(run.mode === 'one' ? 1 : Math.min(2, run.shapes))
      expect(run.writes).toHaveLength(5)
      expect(run.lost).toBe(0)
      for (const w of run.writes) {
        expect(w.received).toBe(run.shapes)
        expect(w.firstMs).toBeGreaterThan(0)
        expect(w.firstMs).toBeLessThanOrEqual(w.p50Ms)
        expect(w.p50Ms).toBeLessThanOrEqual(w.lastMs)
      }
      expect(run.firstP50Ms).toBeLessThanOrEqual(run.lastP50Ms)
      expect(run.lastP50Ms).toBeLessThanOrEqual(run.lastP99Ms)
      expect(run.parkedRssMiB).toBeGreaterThan(0)
      for (const c of run.clients) {
        expect(c.errors).toBe(0)
        expect(c.otherStatus).toBe(0)
      }
    }

    expect(report.create).toHaveLength(1)
    const created = report.create[0]!
    expect(created.count).toBe(12)
    expect(created.completed).toBe(12)
    expect(created.failed + created.networkErrors + created.otherStatus).toBe(0)
    expect(created.p50Ms).toBeLessThanOrEqual(created.maxMs)
    expect(created.pgClientConnections).toBeGreaterThan(0)
    expect(created.ceiling.totalMs).toBeGreaterThan(0)

    const md = readFileSync(join(out, 'overlap.quick.md'), 'utf8')
    expect(md).toContain('## One write into N overlapping shapes: commit to the first and the last client')
    expect(md).toContain('## N new shapes requested at once: until each client has its snapshot')
    expect(md).toMatch(/One write into 12 overlapping shapes, one client per shape: commit to the last client p50 .* \(first .*; \d+\.\d+x the .* of 1 shape; 0 lost\)/)
    expect(md).toMatch(/12 new shapes requested at once: all have their snapshot after [\d.]+ s .*, [\d.]+x the [\d.]+ s of the same SELECTs straight to Postgres/)
  }, 240_000)
})
