import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { chunksSection } from '../report/sections/chunks.js'
import { type Report, SERVERS, targetChecks } from './report.js'

/**
 * The large-chunks benchmark end to end in a small QUICK run (chunks of 320
 * and 512 KiB, 1 and 4 clients, one 1 s run each): both Sluice servers and
 * nginx start, all three answer the chunk's exact bytes, every request
 * succeeds, each Sluice server sends by the path it was told to, and the
 * report and its section hold what they claim. Figures are not checked: the
 * machine is shared.
 */
const runScript = fileURLToPath(new URL('./run.ts', import.meta.url))
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const out = mkdtempSync(join(tmpdir(), 'sluice-chunks-bench-test-'))
// Above the server's sendfile threshold (256 KiB of stored bytes), so the sendfile server sends them by sendfile.
const SIZES = [320 * 1024, 512 * 1024]

afterAll(() => rmSync(out, { recursive: true, force: true }))

function runBench(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', tsx, runScript], {
      env: { ...process.env, QUICK: '1', BENCH_CHUNKS_SIZES: SIZES.join(','), BENCH_CHUNKS_CLIENTS: '1,4', BENCH_CHUNKS_SECONDS: '1', BENCH_RESULTS_DIR: out },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')))
    child.on('close', (code) => resolve({ code, output }))
  })
}

describe('bench:chunks (QUICK, small chunks)', () => {
  it('serves the same chunk from all three servers and writes a consistent report', async () => {
    const { code, output } = await runBench()
    expect(code, output.slice(-3000)).toBe(0)
    const report = JSON.parse(readFileSync(join(out, 'chunks.quick.json'), 'utf8')) as Report
    expect(report.quick).toBe(true)
    expect(report.results.map((r) => r.chunkBytes)).toEqual(SIZES)
    for (const result of report.results) {
      // A sealed chunk closes after the entry that reaches the size: a little over it, and a middle one.
      expect(result.bodyBytes).toBeGreaterThan(result.chunkBytes)
      expect(result.bodyBytes).toBeLessThan(result.chunkBytes + 4096)
      expect(result.chunks).toBeGreaterThanOrEqual(3)
      expect(result.query).toMatch(/offset=0_0/)
      expect(result.rows.map((r) => r.clients)).toEqual([1, 4])
      for (const row of result.rows) {
        for (const name of SERVERS) {
          const side = row.sides[name]
          expect(side.runs).toHaveLength(1)
          const run = side.runs[0]!
          expect(run.requests, name).toBeGreaterThan(0)
          expect(run.errors, name).toBe(0)
          // Whole responses: the body plus a few hundred bytes of status line and headers.
          expect(run.bytesPerResponse, name).toBeGreaterThan(result.bodyBytes)
          expect(run.bytesPerResponse, name).toBeLessThan(result.bodyBytes + 2048)
          expect(run.cpuSecondsPerGB, name).toBeGreaterThan(0)
          expect(run.p50Ms).toBeLessThanOrEqual(run.p99Ms)
        }
      }
      // Each Sluice server sent its bodies by the path it was started with. (A request that arrives as wrk
      // closes its connections at the end of a run finds its socket gone, which sendfile cannot write to,
      // and is answered by pread: a body or two per run, no more.)
      const viaSendfile = result.bodyBytesByPath.sendfile
      expect(viaSendfile.sendfile).toBeGreaterThan(0)
      expect(viaSendfile.pread!).toBeLessThanOrEqual(viaSendfile.sendfile! / 20)
      expect(result.bodyBytesByPath.pread.pread).toBeGreaterThan(0)
      expect(result.bodyBytesByPath.pread.sendfile).toBe(0)
    }
    expect(targetChecks(report)).toHaveLength(SIZES.length * 2 * 3)

    const md = readFileSync(join(out, 'chunks.quick.md'), 'utf8')
    expect(md).toContain('## 320 KiB chunks')
    expect(md).toContain('## Targets (issue 31, item 6)')
    expect(md).toMatch(/\| 512 KiB \| 4 \| sendfile\/nginx req\/s \| \d+\.\d\dx \| ≥ 0\.70x \| (met|missed) \|/)

    const section = chunksSection.render({ stem: 'chunks', kind: 'quick', file: 'chunks.quick.json', date: report.machine.date, data: report, others: [] })
    expect(section.charts.map((c) => c.id)).toEqual(['chunks-throughput-320kib', 'chunks-throughput-512kib'])
    for (const chart of section.charts) expect(chart.points).toHaveLength(2 * SERVERS.length)
    expect(section.tables.map((t) => t.title)).toContain('Targets (issue 31, item 6)')
  }, 180_000)
})
