import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import type { Report } from './report.js'

/**
 * The fan-out benchmark end to end on tiny counts (QUICK, 20 long-polls and
 * 10 SSE streams, 2 writes of 1 and 100 rows): every process starts, every
 * client gets every write from Sluice and from the ceiling, and the report
 * holds what it claims. Figures are not checked: the machine is shared.
 */
const runScript = fileURLToPath(new URL('./run.ts', import.meta.url))
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const out = mkdtempSync(join(tmpdir(), 'sluice-fanout-bench-test-'))

afterAll(() => rmSync(out, { recursive: true, force: true }))

function runBench(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', tsx, runScript], {
      env: { ...process.env, QUICK: '1', BENCH_FANOUT_CLIENTS: '20', BENCH_FANOUT_SSE: '10', BENCH_FANOUT_WRITES: '2', BENCH_RESULTS_DIR: out },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.on('close', (code) => resolve({ code, output }))
  })
}

describe('bench:fanout (QUICK, tiny counts)', () => {
  it('delivers every write to every client of both servers and writes a consistent report', async () => {
    const { code, output } = await runBench()
    expect(code, output.slice(-3000)).toBe(0)
    // Counts given: a partial run, even under QUICK (which names the file).
    const report = JSON.parse(readFileSync(join(out, 'fanout.quick.json'), 'utf8')) as Report
    expect(report.cells.map((c) => [c.kind, c.clients])).toEqual([
      ['long-poll', 20],
      ['sse', 10],
    ])
    for (const cell of report.cells) {
      for (const side of [cell.sluice, cell.ceiling!]) {
        expect(side.parked).toBeGreaterThanOrEqual(cell.clients - 2)
        expect(side.bySize.map((s) => s.rows)).toEqual([1, 100])
        for (const size of side.bySize) {
          expect(size.writes).toHaveLength(2)
          expect(size.lost).toBe(0)
          for (const w of size.writes) {
            expect(w.received).toBe(cell.clients)
            expect(w.firstMs).toBeLessThanOrEqual(w.medianClientMs)
            expect(w.medianClientMs).toBeLessThanOrEqual(w.lastMs)
          }
          expect(size.lastP50Ms).toBeLessThanOrEqual(size.lastMaxMs)
        }
        expect(side.rssParkedBytes).toBeGreaterThan(0)
        // Read right after a full collection in the server (gc-on-signal.cjs): both figures present.
        expect(side.collectedParked!.rssBytes).toBeGreaterThan(0)
        expect(side.collectedParked!.heapUsedBytes).toBeGreaterThan(0)
        expect(Number.isFinite(side.collectedHeapPerParkedBytes)).toBe(true)
      }
    }
    const md = readFileSync(join(out, 'fanout.quick.md'), 'utf8')
    expect(md).toContain('| 20 | long-poll | 100 | sluice |')
    expect(md).toContain('memory after a full collection: 20 parked long-poll requests')
  }, 240_000)
})
