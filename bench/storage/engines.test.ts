/**
 * The benchmark harness itself, on small logs: every engine must store the same
 * bytes and answer every planned read with the planned byte range, sync and
 * async, or the timings compare different work.
 */
import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import type { BenchLog, EngineName } from './engines.js'
import { ENGINES, openBenchLog } from './engines.js'
import { planReadLog, planTransactions } from './layout.js'
import { ReadBuffer } from './materialise.js'
import { TxSource, rowPool } from './rows.js'

const root = mkdtempSync(join(tmpdir(), 'sluice-bench-test-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const pool = rowPool(3)

describe('rows', () => {
  it('are ~200-byte change lines and transactions get increasing LSNs', () => {
    expect(pool.meanBytes).toBeGreaterThan(190)
    expect(pool.meanBytes).toBeLessThan(210)
    const line = JSON.parse(new TextDecoder().decode(pool.rows[0]!)) as { key: string; headers: { operation: string } }
    expect(line.key).toMatch(/^"public"\."items"\/"\d+"$/)
    expect(['insert', 'update', 'delete']).toContain(line.headers.operation)
    const source = new TxSource(pool)
    const a = source.transaction(3)
    const b = source.transaction(1)
    expect(a.map((e) => e.offset.op)).toEqual([0n, 1n, 2n])
    expect(b[0]!.offset.tx > a[0]!.offset.tx).toBe(true)
  })
})

describe('engines', () => {
  const plan = planReadLog(pool, { chunkBytes: 8 * 1024, chunks: 16, rowsPerTx: 7, startCount: 6, reads: [2, 5], seed: 5 })
  const logs = new Map<EngineName, BenchLog>()

  afterAll(async () => {
    for (const log of logs.values()) await log.close()
  })

  it('build the planned read log and return the same planned bytes for every read, whichever way they are materialised', async () => {
    const fresh = new Map<EngineName, BenchLog>()
    for (const engine of ENGINES) {
      const log = await openBenchLog(engine, { dir: join(root, `read-${engine}`), chunkBytes: plan.chunkBytes, durable: false, forReads: true })
      logs.set(engine, log)
      for (const tx of planTransactions(pool, plan)) log.append(tx)
      await log.publish(plan.lastLsn)
      const other = await openBenchLog(engine, { dir: join(root, `fresh-${engine}`), chunkBytes: plan.chunkBytes, durable: false, forReads: true, freshBuffers: true })
      fresh.set(engine, other)
      for (const tx of planTransactions(pool, plan)) other.append(tx)
      await other.publish(plan.lastLsn)
    }
    const into = new ReadBuffer()
    for (const start of plan.starts) {
      for (const [n, bytes] of start.bytesFor) {
        const digests = new Set<string>()
        for (const [name, set] of [['pooled', logs], ['fresh', fresh]] as const) {
          for (const [engine, log] of set) {
            const hash = createHash('sha256')
            expect(log.readChunks(start.after, n, into, (b) => hash.update(b)), `${name} ${engine}`).toBe(bytes)
            expect(await log.readChunksAsync(start.after, n, into), `${name} ${engine}`).toBe(bytes)
            digests.add(hash.digest('hex'))
          }
        }
        expect(digests.size).toBe(1)
      }
    }
    for (const log of fresh.values()) await log.close()
  })

  it('append durably', async () => {
    for (const engine of ENGINES) {
      const log = await openBenchLog(engine, { dir: join(root, `durable-${engine}`), chunkBytes: plan.chunkBytes, durable: true, forReads: false })
      const source = new TxSource(pool)
      for (let i = 0; i < 3; i++) await log.appendDurable(source.transaction(20))
      await log.close()
    }
  })
})
