import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { type FsPort, nodeFs } from '@sluice/storage'
import { type FaultRules, createFaultyFs, useTempDir } from '@sluice/test-utils'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { type QueueCodec, SpillDir, SpillError, SpillQueue, type SpillQueueOptions } from '../../../src/replication/spill/index.js'
import type { TransactionPart } from '../../../src/shapes/route-contracts.js'
import { TRANSACTION_PART_VERSION, transactionPartCodec } from '../../../src/shapes/transaction-part-codec.js'
import { SOAK, spillFiles } from './helpers.js'

const tmp = useTempDir('spill-queue')
const RUNS = SOAK ? 5000 : 200

/** A part whose xid is its sequence number, so order is checkable; json bytes vary in size. */
function part(seq: number, entries = 1 + (seq % 3), jsonBytes = 5 + ((seq * 37) % 90)): TransactionPart {
  return {
    lsn: BigInt(1000 + seq),
    xid: seq,
    more: seq % 2 === 0,
    ops: Array.from({ length: entries }, (_, op) => op * 2),
    jsons: Array.from({ length: entries }, (_, op) => new TextEncoder().encode(`{"n":${seq},"op":${op},"pad":"${'p'.repeat(jsonBytes)}"}`)),
    count: entries,
  }
}

type Command =
  | { readonly cmd: 'push'; readonly count: number }
  | { readonly cmd: 'spill'; readonly awaited: boolean }
  | { readonly cmd: 'shift'; readonly max: number; readonly pushesDuring: number; readonly spillDuring: boolean }
  | { readonly cmd: 'tick' }

const commandArb: fc.Arbitrary<Command> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ cmd: fc.constant('push' as const), count: fc.integer({ min: 1, max: 12 }) }) },
  { weight: 1, arbitrary: fc.record({ cmd: fc.constant('spill' as const), awaited: fc.boolean() }) },
  {
    weight: 4,
    arbitrary: fc.record({
      cmd: fc.constant('shift' as const),
      max: fc.oneof(fc.integer({ min: 0, max: 15 }), fc.constant(Number.POSITIVE_INFINITY)),
      pushesDuring: fc.nat(6),
      spillDuring: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ cmd: fc.constant('tick' as const) }) },
)

const tuningArb = fc.record({
  flushBytes: fc.constantFrom(0, 1, 150, 1000, 256 * 1024),
  readBytes: fc.constantFrom(1, 16, 200, 256 * 1024),
})

describe('SpillQueue against a plain array', () => {
  it(`keeps exact FIFO order across the memory/file switch, with pushes during every await (${RUNS} runs)`, { timeout: SOAK ? 3_600_000 : 120_000 }, async () => {
    const root = await tmp.make()
    let run = 0
    await fc.assert(
      fc.asyncProperty(fc.array(commandArb, { maxLength: 50, size: 'max' }), tuningArb, async (commands, tuning) => {
        const dir = await SpillDir.open(join(root, `run-${run++}`))
        const queue = new SpillQueue(dir, 'shape-1', transactionPartCodec, tuning)
        const model: TransactionPart[] = []
        let consumed = 0
        const push = (): void => {
          const item = part(model.length)
          model.push(item)
          queue.push(item)
        }
        const fired: Promise<void>[] = []
        try {
          for (const c of commands) {
            switch (c.cmd) {
              case 'push':
                for (let i = 0; i < c.count; i++) push()
                break
              case 'spill': {
                const p = queue.spill()
                if (c.awaited) await p
                else fired.push(p)
                expect(queue.spilled).toBe(true)
                break
              }
              case 'shift': {
                const availableAtCall = model.length - consumed
                const pending = queue.shift(c.max)
                for (let i = 0; i < c.pushesDuring; i++) push()
                if (c.spillDuring) fired.push(queue.spill())
                const got = await pending
                const availableAtEnd = model.length - consumed
                expect(got.length).toBeGreaterThanOrEqual(Math.min(c.max, availableAtCall))
                expect(got.length).toBeLessThanOrEqual(Math.min(c.max, availableAtEnd))
                expect(got).toStrictEqual(model.slice(consumed, consumed + got.length))
                consumed += got.length
                break
              }
              case 'tick':
                await new Promise((resolve) => setImmediate(resolve))
                break
            }
            expect(queue.length).toBe(model.length - consumed)
          }
          await Promise.all(fired)
          const rest = await queue.shift(Number.POSITIVE_INFINITY)
          expect(rest).toStrictEqual(model.slice(consumed))
          expect(queue.length).toBe(0)
          expect(queue.memoryBytes).toBe(0)
        } finally {
          await Promise.allSettled(fired)
          await queue.dispose()
        }
        expect(spillFiles(dir.path).size).toBe(0)
      }),
      { numRuns: RUNS },
    )
  })
})

describe('SpillQueue', () => {
  it('stays in memory until spilled, accounting codec sizes', async () => {
    const dir = await tmp.make()
    const queue = new SpillQueue(dir, 'q', transactionPartCodec)
    const items = [part(0), part(1), part(2)]
    for (const item of items) queue.push(item)
    expect(queue.spilled).toBe(false)
    expect(queue.length).toBe(3)
    expect(queue.memoryBytes).toBe(items.reduce((sum, item) => sum + transactionPartCodec.size(item), 0))
    expect(queue.bytesOnDisk).toBe(0)
    expect(spillFiles(dir).size).toBe(0)
    const first = await queue.shift(1)
    expect(first[0]).toBe(items[0]) // the very object: never encoded
    expect(queue.memoryBytes).toBe(transactionPartCodec.size(items[1]!) + transactionPartCodec.size(items[2]!))
    await queue.dispose()
  })

  it('moves everything to one file on spill, keeps later pushes in order, deletes the file on dispose', async () => {
    const dir = await tmp.make()
    const queue = new SpillQueue(dir, 'shape/handle:1', transactionPartCodec, { flushBytes: 0 })
    for (let i = 0; i < 5; i++) queue.push(part(i))
    await queue.spill()
    expect(queue.spilled).toBe(true)
    expect(queue.memoryBytes).toBe(0)
    for (let i = 5; i < 10; i++) queue.push(part(i))
    await new Promise((resolve) => setTimeout(resolve, 20)) // let the queue's own flush run
    const files = spillFiles(dir)
    expect(files.size).toBe(1)
    const [name] = [...files.keys()]
    expect(name).toMatch(/^queue-shape_handle_1\.\d+\.spill$/)
    const bytes = readFileSync(join(dir, name!))
    expect(bytes.subarray(0, 5).toString('latin1')).toBe('SLSQ\u0001')
    expect(queue.bytesOnDisk).toBe(bytes.length)
    expect(queue.memoryBytes).toBe(0)
    expect(await queue.shift(3)).toStrictEqual([part(0), part(1), part(2)])
    expect(await queue.shift(100)).toStrictEqual([3, 4, 5, 6, 7, 8, 9].map((i) => part(i)))
    expect(queue.length).toBe(0)
    await queue.dispose()
    expect(spillFiles(dir).size).toBe(0)
    expect(() => queue.push(part(1))).toThrow(SpillError)
    await expect(queue.shift(1)).rejects.toMatchObject({ code: 'spill_closed' })
  })

  it('reads back an item bigger than its read buffer', async () => {
    const queue = new SpillQueue(await tmp.make(), 'big', transactionPartCodec, { readBytes: 32, flushBytes: 0 })
    const items = [part(0), part(1, 3, 5000), part(2)]
    for (const item of items) queue.push(item)
    await queue.spill()
    expect(await queue.shift(10)).toStrictEqual(items)
    await queue.dispose()
  })

  it('gives the space back once a big file is drained', async () => {
    const dir = await tmp.make()
    const queue = new SpillQueue(dir, 'drain', transactionPartCodec, { flushBytes: 0 })
    await queue.spill()
    for (let i = 0; i < 3000; i++) queue.push(part(i, 2, 400))
    await queue.spill()
    expect(queue.bytesOnDisk).toBeGreaterThan(1024 * 1024)
    expect(await queue.shift(Number.POSITIVE_INFINITY)).toHaveLength(3000)
    expect(queue.bytesOnDisk).toBe(16)
    expect([...spillFiles(dir).values()]).toEqual([16])
    queue.push(part(7))
    expect(await queue.shift(5)).toStrictEqual([part(7)])
    await queue.dispose()
  })

  it('a directory given as a path is created on first spill', async () => {
    const dir = join(await tmp.make(), 'not', 'yet')
    const queue = new SpillQueue(dir, 'q', transactionPartCodec)
    queue.push(part(0))
    await queue.spill()
    expect(spillFiles(dir).size).toBe(1)
    await queue.dispose()
  })

  it('reopening the spill directory wipes stale files (and nothing else)', async () => {
    const root = await tmp.make()
    const dir = await SpillDir.open(join(root, 'spill'))
    const crashed = new SpillQueue(dir, 'crashed', transactionPartCodec)
    crashed.push(part(0))
    await crashed.spill()
    writeFileSync(join(dir.path, 'notes.txt'), 'not a spill file')
    mkdirSync(join(dir.path, 'sub'))
    expect(spillFiles(dir.path).size).toBe(1)
    // A restart: the old queue is never disposed.
    const reopened = await SpillDir.open(dir.path)
    expect(readdirSync(reopened.path).sort()).toEqual(['notes.txt', 'sub'])
    const fresh = new SpillQueue(reopened, 'crashed', transactionPartCodec)
    fresh.push(part(1))
    await fresh.spill()
    expect(await fresh.shift(5)).toStrictEqual([part(1)])
    await fresh.dispose()
  })

  it('rejects a bad max and an item its codec cannot encode, losing nothing', async () => {
    const queue = new SpillQueue(await tmp.make(), 'q', transactionPartCodec)
    queue.push(part(0))
    await expect(queue.shift(-1)).rejects.toBeInstanceOf(RangeError)
    await expect(queue.shift(1.5)).rejects.toBeInstanceOf(RangeError)
    const bad: TransactionPart = { ...part(1), lsn: -1n }
    queue.push(bad) // in memory: not encoded yet
    await expect(queue.spill()).rejects.toMatchObject({ code: 'spill_invalid_item' })
    expect(queue.spilled).toBe(false)
    expect(queue.length).toBe(2)
    expect(await queue.shift(1)).toStrictEqual([part(0)])
    expect(await queue.shift(1)).toStrictEqual([bad])
    await queue.spill()
    expect(() => queue.push(bad)).toThrow(expect.objectContaining({ code: 'spill_invalid_item' }))
    expect(queue.length).toBe(0)
    await queue.dispose()
  })
})

describe('SpillQueue under disk faults', () => {
  function faultyQueue(dir: string, options: SpillQueueOptions = {}) {
    const { fs, rules } = createFaultyFs(nodeFs)
    return { rules, queue: new SpillQueue(dir, 'q', transactionPartCodec, { ...options, fs }) }
  }
  const items = (from: number, to: number): TransactionPart[] => Array.from({ length: to - from }, (_, i) => part(from + i))

  it.each([
    { fault: 'ENOSPC', inject: (r: FaultRules<FsPort>) => r.failNext('write', { code: 'ENOSPC' }) },
    { fault: 'a torn write', inject: (r: FaultRules<FsPort>) => r.tornWrite({ code: 'EIO' }) },
    { fault: 'a failed open', inject: (r: FaultRules<FsPort>) => r.failNext('openSync', { code: 'EACCES' }) },
  ])('$fault during spill(): typed error, nothing lost, a later spill retries', async ({ inject }) => {
    const dir = await tmp.make()
    const { rules, queue } = faultyQueue(dir)
    for (const item of items(0, 10)) queue.push(item)
    inject(rules)
    const error = await queue.spill().catch((e: unknown) => e)
    expect(error).toBeInstanceOf(SpillError)
    expect((error as SpillError).code).toMatch(/^spill_(write|open)_failed$/)
    expect(queue.length).toBe(10)
    expect(queue.memoryBytes).toBeGreaterThan(0) // still held, in memory
    for (const item of items(10, 15)) queue.push(item)
    await queue.spill()
    expect(queue.memoryBytes).toBe(0)
    expect(await queue.shift(Number.POSITIVE_INFINITY)).toStrictEqual(items(0, 15))
    await queue.dispose()
    expect(spillFiles(dir).size).toBe(0)
  })

  it('a failed background flush surfaces from the next shift; the items stay and come out in order', async () => {
    const dir = await tmp.make()
    const { rules, queue } = faultyQueue(dir, { flushBytes: 1 })
    queue.push(part(0))
    await queue.spill()
    rules.failNext('write', { code: 'ENOSPC' })
    for (const item of items(1, 6)) queue.push(item) // the first schedules a flush, which fails
    await new Promise((resolve) => setTimeout(resolve, 20))
    expect(queue.length).toBe(6)
    const error = await queue.shift(100).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: 'spill_write_failed', errno: 'ENOSPC', diskFull: true })
    expect(queue.length).toBe(6)
    for (const item of items(6, 9)) queue.push(item) // flushes again now
    await new Promise((resolve) => setTimeout(resolve, 20))
    expect(await queue.shift(4)).toStrictEqual(items(0, 4))
    expect(await queue.shift(100)).toStrictEqual(items(4, 9))
    await queue.dispose()
  })

  it('a failed background flush surfaces from the next spill() too', async () => {
    const { rules, queue } = faultyQueue(await tmp.make(), { flushBytes: 1 })
    await queue.spill()
    rules.failNext('openSync', { code: 'EMFILE' })
    queue.push(part(0))
    await new Promise((resolve) => setTimeout(resolve, 20))
    await expect(queue.spill()).rejects.toMatchObject({ code: 'spill_open_failed', errno: 'EMFILE' })
    await queue.spill()
    expect(await queue.shift(10)).toStrictEqual([part(0)])
    await queue.dispose()
  })

  it('a failed read leaves every item queued', async () => {
    const { rules, queue } = faultyQueue(await tmp.make(), { readBytes: 64 })
    for (const item of items(0, 20)) queue.push(item)
    await queue.spill()
    queue.push(part(20)) // buffered, not written
    rules.failNext('read', { code: 'EIO', match: () => true })
    await expect(queue.shift(100)).rejects.toMatchObject({ code: 'spill_read_failed', errno: 'EIO' })
    expect(queue.length).toBe(21)
    // Fail a later read of a multi-read shift: still nothing consumed.
    let reads = 0
    rules.failNext('read', { code: 'EIO', match: () => ++reads === 3 })
    await expect(queue.shift(100)).rejects.toMatchObject({ code: 'spill_read_failed' })
    expect(queue.length).toBe(21)
    expect(await queue.shift(100)).toStrictEqual(items(0, 21))
    await queue.dispose()
  })

  it('dispose reports a file it cannot delete', async () => {
    const dir = await tmp.make()
    const { rules, queue } = faultyQueue(dir)
    queue.push(part(0))
    await queue.spill()
    rules.failNext('unlinkSync', { code: 'EIO' })
    await expect(queue.dispose()).rejects.toMatchObject({ code: 'spill_open_failed' })
    expect(queue.length).toBe(0)
  })
})

describe('transactionPartCodec', () => {
  it('round-trips, at the extremes of every field too', () => {
    const plain = part(3, 3, 10)
    const bytes = transactionPartCodec.encode(plain)
    expect(bytes[0]).toBe(TRANSACTION_PART_VERSION)
    expect(bytes.byteLength).toBe(18 + plain.jsons.reduce((sum, json) => sum + 12 + json.byteLength, 0))
    expect(transactionPartCodec.decode(bytes)).toStrictEqual(plain)
    const extremes: TransactionPart = {
      lsn: 2n ** 64n - 1n,
      xid: 0xffffffff,
      more: false,
      ops: [0, 2 ** 32 - 1, 2 ** 32, Number.MAX_SAFE_INTEGER],
      jsons: [new Uint8Array([]), new Uint8Array([0, 255, 44]), new Uint8Array([1]), new Uint8Array([2])],
      count: 4,
    }
    expect(transactionPartCodec.decode(transactionPartCodec.encode(extremes))).toStrictEqual(extremes)
    const empty: TransactionPart = { lsn: 0n, xid: 0, more: true, ops: [], jsons: [], count: 0 }
    expect(transactionPartCodec.decode(transactionPartCodec.encode(empty))).toStrictEqual(empty)
    // Only the first `count` entries of longer arrays are the part's.
    const longer: TransactionPart = { ...plain, ops: [...plain.ops, 99], jsons: [...plain.jsons, new Uint8Array([9])] }
    expect(transactionPartCodec.decode(transactionPartCodec.encode(longer))).toStrictEqual(plain)
  })

  it('copies: a decoded part does not share the bytes it was decoded from', () => {
    const bytes = transactionPartCodec.encode(part(1))
    const decoded = transactionPartCodec.decode(bytes)
    bytes.fill(0)
    expect(decoded).toStrictEqual(part(1))
  })

  it('refuses values it cannot represent and bytes it does not know', () => {
    expect(() => transactionPartCodec.encode({ ...part(1), lsn: 2n ** 64n })).toThrow(RangeError)
    expect(() => transactionPartCodec.encode({ ...part(1), xid: -1 })).toThrow(RangeError)
    for (const op of [-1, 0.5, 2 ** 53]) {
      expect(() => transactionPartCodec.encode({ ...part(1), ops: [op], jsons: [new Uint8Array()], count: 1 })).toThrow(RangeError)
    }
    const bytes = transactionPartCodec.encode(part(1))
    const wrongVersion = Uint8Array.from(bytes)
    wrongVersion[0] = 1
    expect(() => transactionPartCodec.decode(wrongVersion)).toThrow(/version/)
    expect(() => transactionPartCodec.decode(bytes.subarray(0, bytes.length - 1))).toThrow(RangeError)
    expect(() => transactionPartCodec.decode(Uint8Array.from([...bytes, 0]))).toThrow(/stray/)
    const hugeOp = Buffer.from(bytes)
    hugeOp.writeUInt32LE(2 ** 21, 18 + 4)
    expect(() => transactionPartCodec.decode(hugeOp)).toThrow(/2\^53/)
  })

  it('a queue of a custom codec works too', async () => {
    const codec: QueueCodec<string> = {
      encode: (s) => new TextEncoder().encode(s),
      decode: (b) => new TextDecoder().decode(b),
      size: (s) => s.length * 2,
    }
    const queue = new SpillQueue(await tmp.make(), 'strings', codec, { flushBytes: 0, readBytes: 3 })
    const values = ['', 'a', 'é€😀', 'x'.repeat(100)]
    for (const v of values) queue.push(v)
    await queue.spill()
    expect(await queue.shift(10)).toEqual(values)
    await queue.dispose()
  })
})
