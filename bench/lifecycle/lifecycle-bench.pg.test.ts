import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { type Report, bytesPerIdleShape } from './report.js'

/**
 * The lifecycle benchmark end to end on tiny sizes (40 shapes, a 15 s TTL,
 * 2 s windows): the server starts, every shape is made, counted and then
 * expired, the store's shape files go, and the report holds what it claims.
 * Figures are not checked: the machine is shared.
 */
const runScript = fileURLToPath(new URL('./run.ts', import.meta.url))
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const out = mkdtempSync(join(tmpdir(), 'sluice-lifecycle-bench-test-'))

afterAll(() => rmSync(out, { recursive: true, force: true }))

function runBench(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', tsx, runScript], {
      env: { ...process.env, QUICK: '1', BENCH_SHAPES: '40', BENCH_TTL_S: '15', BENCH_SETTLE_S: '2', BENCH_AFTER_S: '2', BENCH_RESULTS_DIR: out },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.on('close', (code) => resolve({ code, output }))
  })
}

describe('bench:lifecycle (QUICK, small counts)', () => {
  it('makes the shapes, sees them expire, and writes a consistent report', { timeout: 120_000 }, async () => {
    const { code, output } = await runBench()
    expect(code, output.slice(-3000)).toBe(0)
    const report = JSON.parse(readFileSync(join(out, 'lifecycle.quick.json'), 'utf8')) as Report
    expect(report.shapes).toBe(40)
    expect(report.phases.map((p) => [p.label, p.shapes])).toEqual([
      ['baseline', 0],
      ['shapes', 40],
      ['expired', 0],
    ])
    const [base, full, expired] = report.phases
    // Four files a shape while they exist; none of theirs once they expired.
    expect(full!.files - base!.files).toBeGreaterThanOrEqual(4 * 40)
    expect(expired!.files).toBeLessThan(full!.files - 4 * 40 + 1)
    expect(Number.isFinite(bytesPerIdleShape(report))).toBe(true)
    expect(readFileSync(join(out, 'lifecycle.quick.md'), 'utf8')).toContain('resident memory per idle shape')
  })
})
