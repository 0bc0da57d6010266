import { join } from 'node:path'
import { useTempDir } from '@sluice/test-utils'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import type { Change, StreamAbortReason, StreamedChange } from '../../../src/replication/index.js'
import { MemoryStreamBuffer } from '../../../src/replication/index.js'
import { SpillStreamBuffer, type SpillStreamBufferOptions } from '../../../src/replication/spill/index.js'
import { SOAK, changeArb, collect, sameRelations, spillFiles, totalSize } from './helpers.js'

/**
 * SpillStreamBuffer against MemoryStreamBuffer (the reference of the
 * StreamBuffer rules): random interleavings of appends for several
 * xids and their subtransactions, subtransaction aborts, whole aborts and
 * commits must yield the same committed change sequences, with the very same
 * Relation objects, for every memory threshold.
 */

const RUNS = SOAK ? 5000 : 200
const XIDS = [700, 701, 702] as const
/** sub 0 is the top-level xid itself; 1..3 are subtransactions (distinct across xids). */
const subxidOf = (xid: number, sub: number): number => (sub === 0 ? xid : xid * 10 + sub)

type Op =
  | { readonly op: 'append'; readonly xid: number; readonly items: readonly { sub: number; change: Change }[] }
  | { readonly op: 'abortSub'; readonly xid: number; readonly sub: number }
  | { readonly op: 'abortAll'; readonly xid: number; readonly reason: StreamAbortReason }
  | { readonly op: 'commit'; readonly xid: number }

const xidArb = fc.constantFrom(...XIDS)
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 8, arbitrary: fc.record({ op: fc.constant('append' as const), xid: xidArb, items: fc.array(fc.record({ sub: fc.nat(3), change: changeArb }), { maxLength: 6 }) }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('abortSub' as const), xid: xidArb, sub: fc.integer({ min: 1, max: 3 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('abortAll' as const), xid: xidArb, reason: fc.constantFrom<StreamAbortReason>('aborted', 'already-durable', 'disconnected') }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('commit' as const), xid: xidArb }) },
)

const tuningArb = fc.record({
  batchChanges: fc.option(fc.integer({ min: 1, max: 8 }), { nil: undefined }),
  batchBytes: fc.option(fc.integer({ min: 1, max: 300 }), { nil: undefined }),
  readBytes: fc.option(fc.integer({ min: 4, max: 80 }), { nil: undefined }),
})

const tmp = useTempDir('spill-oracle')

function options(memoryBytes: number | undefined, tuning: { batchChanges: number | undefined; batchBytes: number | undefined; readBytes: number | undefined }): SpillStreamBufferOptions {
  return {
    ...(memoryBytes === undefined ? {} : { memoryBytes }),
    ...(tuning.batchChanges === undefined ? {} : { batchChanges: tuning.batchChanges }),
    ...(tuning.batchBytes === undefined ? {} : { batchBytes: tuning.batchBytes }),
    ...(tuning.readBytes === undefined ? {} : { readBytes: tuning.readBytes }),
  }
}

function toStreamed(xid: number, items: readonly { sub: number; change: Change }[]): StreamedChange[] {
  return items.map(({ sub, change }) => ({ subxid: subxidOf(xid, sub), change }))
}

describe.each([
  { name: '0 (always spill)', memoryBytes: 0 },
  { name: '1 byte', memoryBytes: 1 },
  { name: '200 bytes', memoryBytes: 200 },
  { name: '4 KiB', memoryBytes: 4096 },
  { name: 'the default (1 MiB, never spills here)', memoryBytes: undefined },
])('SpillStreamBuffer equals MemoryStreamBuffer, memory threshold $name', ({ memoryBytes }) => {
  it(`awaited calls (${RUNS} runs)`, { timeout: SOAK ? 3_600_000 : 120_000 }, async () => {
    const root = await tmp.make()
    let run = 0
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { maxLength: 60, size: 'max' }), tuningArb, async (ops, tuning) => {
        const dir = join(root, `run-${run++}`)
        const opts = options(memoryBytes, tuning)
        const buffer = await SpillStreamBuffer.open(dir, opts)
        const oracle = new MemoryStreamBuffer()
        try {
          for (const op of ops) {
            switch (op.op) {
              case 'append': {
                const changes = toStreamed(op.xid, op.items)
                oracle.append(op.xid, changes)
                await buffer.append(op.xid, changes)
                break
              }
              case 'abortSub': {
                const abort = { xid: op.xid, subxid: subxidOf(op.xid, op.sub), reason: 'aborted' as const }
                oracle.abort(abort)
                await buffer.abort(abort)
                break
              }
              case 'abortAll': {
                const abort = { xid: op.xid, subxid: op.xid, reason: op.reason }
                oracle.abort(abort)
                await buffer.abort(abort)
                break
              }
              case 'commit': {
                const want = (await collect(oracle.commit(op.xid))).items
                const { items, batches } = await collect(buffer.commit(op.xid))
                expect(items).toStrictEqual(want)
                expect(sameRelations(items, want)).toBe(true)
                expect(batches.every((n) => n >= 1 && n <= (opts.batchChanges ?? 1000))).toBe(true)
                break
              }
            }
            expect(buffer.openXids.sort()).toEqual(oracle.openXids.sort())
            expect(buffer.openTransactions).toBe(oracle.openXids.length)
            expect(buffer.bytesInMemory).toBeLessThanOrEqual((opts.memoryBytes ?? 1024 * 1024) * buffer.openTransactions)
            expect(buffer.bytesOnDisk).toBe(totalSize(spillFiles(dir)))
          }
          for (const xid of buffer.openXids) await buffer.abort({ xid, subxid: xid, reason: 'disconnected' })
          expect(buffer.bytesOnDisk).toBe(0)
          expect(buffer.bytesInMemory).toBe(0)
          expect(spillFiles(dir).size).toBe(0)
        } finally {
          await buffer.close()
        }
      }),
      { numRuns: RUNS },
    )
  })

  it(`calls not awaited: per-xid order holds while other xids' I/O runs (${RUNS} runs)`, { timeout: SOAK ? 3_600_000 : 120_000 }, async () => {
    const root = await tmp.make()
    let run = 0
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { maxLength: 60, size: 'max' }), tuningArb, async (ops, tuning) => {
        const dir = join(root, `run-${run++}`)
        const buffer = await SpillStreamBuffer.open(dir, options(memoryBytes, tuning))
        const oracle = new MemoryStreamBuffer()
        const fired: Promise<void>[] = []
        try {
          for (const op of ops) {
            if (op.op === 'append') {
              const changes = toStreamed(op.xid, op.items)
              oracle.append(op.xid, changes)
              fired.push(buffer.append(op.xid, changes))
            } else if (op.op === 'abortSub' || op.op === 'abortAll') {
              const abort = { xid: op.xid, subxid: op.op === 'abortSub' ? subxidOf(op.xid, op.sub) : op.xid, reason: op.op === 'abortSub' ? ('aborted' as const) : op.reason }
              oracle.abort(abort)
              fired.push(buffer.abort(abort))
            } else {
              const want = (await collect(oracle.commit(op.xid))).items
              const { items } = await collect(buffer.commit(op.xid))
              expect(items).toStrictEqual(want)
              expect(sameRelations(items, want)).toBe(true)
            }
          }
          await Promise.all(fired)
          for (const xid of buffer.openXids) await buffer.abort({ xid, subxid: xid, reason: 'disconnected' })
          expect(spillFiles(dir).size).toBe(0)
        } finally {
          await Promise.allSettled(fired)
          await buffer.close()
        }
      }),
      { numRuns: RUNS },
    )
  })
})
