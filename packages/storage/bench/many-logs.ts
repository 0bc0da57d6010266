/**
 * Group commit with many dirty logs: LOGS shape logs, each taking one small
 * transaction per flush (as the pipeline does at 10k-100k shapes, where nearly
 * every change lands in a different log), journal on vs off, in one run.
 * Measures appends/s and flushes/s of append + advance + flush; does not
 * measure reads, routing, encoding, or a device other than the one under
 * BENCH_DIR (default: the OS temp dir).
 *
 *   node --import tsx --conditions=sluice-source bench/many-logs.ts
 *   LOGS=100000 ROUNDS=20 ... (defaults: 10000 logs, 30 rounds)
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openFileLogStore } from '../src/index.js'

const LOGS = Number(process.env.LOGS ?? 10_000)
const ROUNDS = Number(process.env.ROUNDS ?? 30)
const ROW = Buffer.from(JSON.stringify({ key: '"public"."items"/"1"', value: { id: '1', title: 'x'.repeat(120) }, headers: { operation: 'insert' } }))

async function run(journal: boolean): Promise<{ appendsPerSec: number; flushesPerSec: number; msPerFlush: number }> {
  const dir = mkdtempSync(join(process.env.BENCH_DIR ?? tmpdir(), 'sluice-many-'))
  try {
    const store = await openFileLogStore({ dir, journal, flushIntervalMs: 60_000 })
    const writers = []
    for (let i = 0; i < LOGS; i++) {
      const w = store.createShape(`s${i}`)
      writers.push(w.finish(ROW))
    }
    await store.flush()
    await Promise.all(writers)
    const logs = store.ids().map((id) => store.get(id)!)
    let tx = 1n
    const started = performance.now()
    for (let r = 0; r < ROUNDS; r++) {
      for (const log of logs) {
        log.appendTransaction([{ offset: { tx, op: 0n }, json: ROW }])
        tx++
      }
      store.advance(tx)
      await store.flush()
    }
    const seconds = (performance.now() - started) / 1000
    await store.close()
    return { appendsPerSec: Math.round((ROUNDS * LOGS) / seconds), flushesPerSec: +(ROUNDS / seconds).toFixed(1), msPerFlush: +((seconds * 1000) / ROUNDS).toFixed(1) }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

const results: Record<string, unknown> = {}
for (const journal of [false, true]) results[journal ? 'journal' : 'per-log sync'] = await run(journal)
console.log(`${LOGS} logs, ${ROUNDS} flushes of one append per log`)
console.table(results)
