import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import type { Report } from './report.js'

/**
 * The CDN benchmark end to end on tiny sizes (QUICK, 20 clients, 3 writes):
 * Sluice, nginx, Varnish and a client process start, every client syncs and
 * gets every write through each cache, the origin's own counts add up, and
 * the report holds what it claims. Figures are not checked: the machine is
 * shared.
 */
const runScript = fileURLToPath(new URL('./run.ts', import.meta.url))
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const out = mkdtempSync(join(tmpdir(), 'sluice-cdn-bench-test-'))

afterAll(() => rmSync(out, { recursive: true, force: true }))

function runBench(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', tsx, runScript], {
      env: { ...process.env, QUICK: '1', BENCH_CDN_CLIENTS: '20', BENCH_CDN_WRITES: '3', BENCH_RESULTS_DIR: out },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.on('close', (code) => resolve({ code, output }))
  })
}

describe('bench:cdn (QUICK, 20 clients)', () => {
  it('runs every cache and writes a consistent report', async () => {
    const { code, output } = await runBench()
    expect(code, output.slice(-3000)).toBe(0)
    const report = JSON.parse(readFileSync(join(out, 'cdn.quick.json'), 'utf8')) as Report
    expect(report.quick).toBe(true)
    expect(report.runs.map((r) => `${r.cache} ${r.origin}`)).toEqual(['none sluice', 'nginx sluice', 'nginx ceiling', 'varnish sluice', 'varnish ceiling'])
    for (const run of report.runs) {
      expect(run.clients).toBe(20)
      expect(run.sync.errors).toBe(0)
      expect(Object.keys(run.sync.statuses)).toEqual(['200'])
      // The shape's chunks were all fetched: offset=-1 and the ranges after it.
      expect(run.sync.originUrls).toBeGreaterThan(1)
      expect(run.live.writes).toHaveLength(3)
      for (const write of run.live.writes) {
        expect(write.received).toBe(20)
        expect(write.p50ClientMs).toBeLessThanOrEqual(write.lastMs)
      }
      expect(run.live.incomplete).toBe(0)
      expect(run.live.lastClient.p50).toBeLessThanOrEqual(run.live.lastClient.max)
      expect(run.live.originLiveRequests).toBeGreaterThan(0)
      expect(run.clientErrors).toEqual({})
    }
    const [direct, ...cached] = report.runs
    // Straight at the origin every client's requests reach it; through a cache (ceiling runs too), each chunk's body once.
    expect(direct!.sync.originServed.max200PerUrl).toBe(20)
    for (const run of cached) {
      expect(run.sync.originServed.max200PerUrl).toBe(1)
      expect(run.live.originLiveRequests).toBeLessThan(direct!.live.originLiveRequests)
    }
    const md = readFileSync(join(out, 'cdn.quick.md'), 'utf8')
    expect(md).toContain('# CDN benchmark (QUICK)')
    expect(md).toMatch(/- nginx, 20 clients: last client has the write, p99 at most 1 s: (met|missed)/)
    expect(md).toMatch(/- Varnish, 20 clients: origin requests per live window about 1 \(at most 1\.5\): (met|missed)/)
    expect(md).toContain('| Varnish, in-memory origin (ceiling) | 20 |')
  }, 180_000)
})
