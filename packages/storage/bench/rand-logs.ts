/**
 * Random appends over many logs: LOGS logs, TOTAL one-entry transactions each
 * to a random log, PER per flush, as the pipeline writes at 100k shapes
 * (each 10 ms flush touches a few hundred logs out of all of them). Measures
 * appends/s of append + advance + flush; does not measure reads, routing or
 * encoding. PROF=<file> writes a CPU profile of the timed part.
 *
 *   LOGS=100000 node --import tsx --conditions=sluice-source bench/rand-logs.ts
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { Session } from 'node:inspector/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openFileLogStore } from '../src/index.js'
const LOGS = Number(process.env.LOGS ?? 100_000)
const TOTAL = Number(process.env.TOTAL ?? 200_000)
const PER = Number(process.env.PER ?? 200)
const ROW = Buffer.from(JSON.stringify({ key: '"public"."items"/"1"', value: { id: '1', title: 'x'.repeat(250) }, headers: { operation: 'insert' } }))
const dir = mkdtempSync(join(process.env.BENCH_DIR ?? tmpdir(), 'sluice-rand-'))
const store = await openFileLogStore({ dir, flushIntervalMs: 60_000 })
let t0 = performance.now()
const writers = []
for (let i = 0; i < LOGS; i++) writers.push(store.createShape(`s${i}`).finish(ROW))
await store.flush()
await Promise.all(writers)
console.log('created', LOGS, 'in', ((performance.now() - t0) / 1000).toFixed(1), 's')
const logs = store.ids().map((id) => store.get(id)!)
let tx = 1n
const session = new Session()
session.connect()
if (process.env.PROF) {
  await session.post('Profiler.enable')
  await session.post('Profiler.start')
}
let x = 12345
t0 = performance.now()
for (let done = 0; done < TOTAL; ) {
  for (let i = 0; i < PER; i++, done++) {
    x = (x * 1103515245 + 12345) & 0x7fffffff
    logs[x % LOGS]!.appendTransaction([{ offset: { tx, op: 0n }, json: ROW }])
    tx++
  }
  store.advance(tx)
  await store.flush()
}
const s = (performance.now() - t0) / 1000
if (process.env.PROF) {
  const { profile } = await session.post('Profiler.stop')
  writeFileSync(process.env.PROF, JSON.stringify(profile))
}
console.log(`${LOGS} logs, ${TOTAL} appends, ${PER}/flush: ${Math.round(TOTAL / s)} appends/s`)
t0 = performance.now()
await store.close()
console.log('close', ((performance.now() - t0) / 1000).toFixed(1), 's')
rmSync(dir, { recursive: true, force: true })
