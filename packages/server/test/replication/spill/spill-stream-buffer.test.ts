import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { runInNewContext } from 'node:vm'
import { setFlagsFromString } from 'node:v8'
import { type FsPort, nodeFs } from '@sluice/storage'
import { type FaultRules, createFaultyFs, useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import type { Change, StreamedChange, TupleValue } from '../../../src/replication/index.js'
import { UNCHANGED_TOAST } from '../../../src/replication/index.js'
import { SPILL_HEADER_BYTES, SpillDir, SpillError, SpillStreamBuffer } from '../../../src/replication/spill/index.js'
import { EMPTY, ITEMS_V1, ITEMS_V2, TAGS, collect, insert, sameRelations, spillFiles, streamed, totalSize } from './helpers.js'

const tmp = useTempDir('spill-stream')

/** Changes covering every field and value form of the record format. */
function edgeChanges(): Change[] {
  const long = 'x'.repeat(70_000)
  const values: TupleValue[] = [
    '',
    null,
    UNCHANGED_TOAST,
    'plain',
    '\u0000nul and\nnewline',
    'é€😀 mixed 𝄞',
    'a'.repeat(83),
    'a'.repeat(84),
    'a'.repeat(250),
    'a'.repeat(251),
    '€'.repeat(83), // 249 bytes: short
    '€'.repeat(84), // 252 bytes: long, though 84 units
    long,
    '😀'.repeat(20_000),
  ]
  return [
    insert(ITEMS_V1, ...values),
    insert(EMPTY),
    { kind: 'update', relation: ITEMS_V2, newTuple: ['1', UNCHANGED_TOAST, null, ''], oldTuple: undefined, oldTupleKind: undefined, unchangedToast: [1] },
    { kind: 'update', relation: ITEMS_V1, newTuple: ['2', 'b', 'c'], oldTuple: ['1', null, null], oldTupleKind: 'key', unchangedToast: [] },
    { kind: 'update', relation: ITEMS_V1, newTuple: ['2', 'b', 'c'], oldTuple: ['2', '', null], oldTupleKind: 'full', unchangedToast: [0, 1663] },
    // Kind without tuple and tuple without kind: kept exactly as given.
    { kind: 'update', relation: ITEMS_V1, newTuple: [], oldTuple: undefined, oldTupleKind: 'full', unchangedToast: [] },
    { kind: 'update', relation: ITEMS_V1, newTuple: [], oldTuple: [null], oldTupleKind: undefined, unchangedToast: [] },
    { kind: 'delete', relation: TAGS, oldTuple: ['9', null], oldTupleKind: 'key' },
    { kind: 'delete', relation: ITEMS_V2, oldTuple: ['9', 'n', '', UNCHANGED_TOAST], oldTupleKind: 'full' },
    { kind: 'truncate', relations: [], cascade: false, restartIdentity: false },
    { kind: 'truncate', relations: [ITEMS_V1, TAGS, ITEMS_V2, ITEMS_V1], cascade: true, restartIdentity: false },
    { kind: 'truncate', relations: [TAGS], cascade: false, restartIdentity: true },
  ]
}

async function roundTrip(memoryBytes: number, changes: readonly Change[], options: { readBytes?: number; batchChanges?: number; batchBytes?: number } = {}): Promise<Change[]> {
  const buffer = await SpillStreamBuffer.open(await tmp.make(), { memoryBytes, ...options })
  try {
    await buffer.append(1, streamed(1, changes))
    return (await collect(buffer.commit(1))).items
  } finally {
    await buffer.close()
  }
}

describe('SpillStreamBuffer round trip', () => {
  it.each([
    { where: 'in memory', memoryBytes: 1 << 30 },
    { where: 'on disk', memoryBytes: 0 },
  ])('is exact $where: NULL vs empty, UNCHANGED_TOAST, Unicode, length boundaries, old tuples, truncate flags', async ({ memoryBytes }) => {
    const changes = edgeChanges()
    const got = await roundTrip(memoryBytes, changes)
    expect(got).toStrictEqual(changes)
    expect(sameRelations(got, changes)).toBe(true)
    const first = got[0] as Extract<Change, { kind: 'insert' }>
    expect(first.newTuple[0]).toBe('')
    expect(first.newTuple[1]).toBeNull()
    expect(first.newTuple[2]).toBe(UNCHANGED_TOAST)
  })

  it('keeps two descriptions of one table id apart (DDL inside the transaction)', async () => {
    const changes = [insert(ITEMS_V1, '1', 'a', 'b'), insert(ITEMS_V2, '2', 'a', 'b', 'c'), insert(ITEMS_V1, '3', 'a', 'b')]
    expect(ITEMS_V1.id).toBe(ITEMS_V2.id)
    const got = await roundTrip(0, changes)
    expect(got.map((c) => (c.kind === 'insert' ? c.relation : undefined))).toEqual([ITEMS_V1, ITEMS_V2, ITEMS_V1])
    expect((got[1] as Extract<Change, { kind: 'insert' }>).relation).toBe(ITEMS_V2)
    expect((got[2] as Extract<Change, { kind: 'insert' }>).relation).toBe(ITEMS_V1)
  })

  it('hands back a change bigger than the read buffer and the batch byte limit as a batch of its own', async () => {
    const big = insert(TAGS, '1', 'y'.repeat(3 * 1024 * 1024))
    const changes = [insert(TAGS, '0', 'a'), big, insert(TAGS, '2', 'b')]
    const buffer = await SpillStreamBuffer.open(await tmp.make(), { memoryBytes: 0, readBytes: 64, batchBytes: 1024 })
    await buffer.append(5, streamed(5, changes))
    const { items, batches } = await collect(buffer.commit(5))
    expect(items).toStrictEqual(changes)
    expect(batches).toEqual([2, 1])
    await buffer.close()
  })

  it('batches at most batchChanges changes, file part then memory part, in order', async () => {
    const dir = await tmp.make()
    const buffer = await SpillStreamBuffer.open(dir, { memoryBytes: 300, batchChanges: 7 })
    const changes = Array.from({ length: 90 }, (_, i) => insert(TAGS, String(i), `tag-${i}`))
    for (let i = 0; i < changes.length; i += 10) {
      await buffer.append(9, streamed(9, changes.slice(i, i + 10)))
      expect(buffer.bytesInMemory).toBeLessThanOrEqual(300)
    }
    expect(buffer.bytesOnDisk).toBeGreaterThan(0)
    expect(buffer.bytesInMemory).toBeGreaterThan(0) // a tail not yet written
    const { items, batches } = await collect(buffer.commit(9))
    expect(items).toStrictEqual(changes)
    expect(batches.every((n) => n <= 7)).toBe(true)
    expect(spillFiles(dir).size).toBe(0)
    await buffer.close()
  })
})

describe('SpillStreamBuffer files and lifecycle', () => {
  it('creates the directory, wipes stale spill files on open, and leaves other files alone', async () => {
    const root = await tmp.make()
    const dir = join(root, 'a', 'b')
    mkdirSync(dir, { recursive: true })
    writeFileSync(join(dir, 'stream-1.1.spill'), 'stale')
    writeFileSync(join(dir, 'queue-x.2.spill'), 'stale')
    writeFileSync(join(dir, 'keep.txt'), 'mine')
    const buffer = await SpillStreamBuffer.open(dir)
    expect(readdirSync(dir)).toEqual(['keep.txt'])
    await buffer.close()
    const fresh = join(root, 'missing', 'dir')
    const other = await SpillStreamBuffer.open(fresh)
    expect(existsSync(fresh)).toBe(true)
    await other.close()
  })

  it('writes one file per spilled xid, with the versioned header, and deletes it at commit', async () => {
    const dir = await tmp.make()
    const buffer = await SpillStreamBuffer.open(dir, { memoryBytes: 0 })
    await buffer.append(41, streamed(41, [insert(TAGS, '1', 'a')]))
    await buffer.append(42, streamed(42, [insert(TAGS, '2', 'b')]))
    const files = spillFiles(dir)
    expect([...files.keys()].sort().map((n) => n.replace(/\.\d+\.spill$/, ''))).toEqual(['stream-41', 'stream-42'])
    expect(buffer.bytesOnDisk).toBe(totalSize(files))
    const name = [...files.keys()].find((n) => n.startsWith('stream-41'))!
    const bytes = readFileSync(join(dir, name))
    expect(bytes.subarray(0, 4).toString('latin1')).toBe('SLSS')
    expect(bytes[4]).toBe(1)
    expect([...bytes.subarray(5, SPILL_HEADER_BYTES)]).toEqual(new Array(11).fill(0))
    await collect(buffer.commit(41))
    expect([...spillFiles(dir).keys()].map((n) => n.replace(/\.\d+\.spill$/, ''))).toEqual(['stream-42'])
    expect(buffer.openTransactions).toBe(1)
    await buffer.close()
    expect(spillFiles(dir).size).toBe(0)
  })

  it('keeps a transaction under the threshold in memory only', async () => {
    const dir = await tmp.make()
    const buffer = await SpillStreamBuffer.open(dir)
    await buffer.append(3, streamed(3, [insert(TAGS, '1', 'a')]))
    expect(buffer.bytesOnDisk).toBe(0)
    expect(buffer.bytesInMemory).toBeGreaterThan(0)
    expect(spillFiles(dir).size).toBe(0)
    await buffer.close()
  })

  it('truncates the file on a subtransaction abort', async () => {
    const dir = await tmp.make()
    const buffer = await SpillStreamBuffer.open(dir, { memoryBytes: 0 })
    const top = [insert(TAGS, '1', 'a'), insert(TAGS, '2', 'b')]
    await buffer.append(8, streamed(8, top))
    const before = buffer.bytesOnDisk
    await buffer.append(8, [...streamed(81, [insert(TAGS, '3', 'c')]), ...streamed(82, [insert(TAGS, '4', 'd')])])
    expect(buffer.bytesOnDisk).toBeGreaterThan(before)
    await buffer.abort({ xid: 8, subxid: 81, reason: 'aborted' }) // 82 was nested in 81: gone too
    expect(buffer.bytesOnDisk).toBe(before)
    expect(totalSize(spillFiles(dir))).toBe(before)
    const { items } = await collect(buffer.commit(8))
    expect(items).toStrictEqual(top)
    await buffer.close()
  })

  it('drops the whole transaction on any abort reason other than a subtransaction rollback', async () => {
    const dir = await tmp.make()
    const buffer = await SpillStreamBuffer.open(dir, { memoryBytes: 0 })
    for (const reason of ['already-durable', 'disconnected'] as const) {
      await buffer.append(8, [...streamed(8, [insert(TAGS, '1', 'a')]), ...streamed(81, [insert(TAGS, '2', 'b')])])
      await buffer.abort({ xid: 8, subxid: 81, reason })
      expect(buffer.openTransactions).toBe(0)
      expect(spillFiles(dir).size).toBe(0)
    }
    await buffer.abort({ xid: 999, subxid: 999, reason: 'aborted' }) // unknown xid: nothing to do
    await buffer.close()
  })

  it('starts a new transaction when an xid appends again after its commit', async () => {
    const buffer = await SpillStreamBuffer.open(await tmp.make(), { memoryBytes: 0 })
    await buffer.append(4, streamed(4, [insert(TAGS, '1', 'a')]))
    const first = buffer.commit(4)
    await buffer.append(4, streamed(4, [insert(TAGS, '2', 'b')]))
    expect((await collect(first)).items).toStrictEqual([insert(TAGS, '1', 'a')])
    expect((await collect(buffer.commit(4))).items).toStrictEqual([insert(TAGS, '2', 'b')])
    await buffer.close()
  })

  it('yields nothing for an xid with nothing buffered', async () => {
    const buffer = await SpillStreamBuffer.open(await tmp.make())
    expect((await collect(buffer.commit(12345))).items).toEqual([])
    await buffer.close()
  })

  it('deletes the file when the consumer stops early, and at close when it never iterates', async () => {
    const dir = await tmp.make()
    const buffer = await SpillStreamBuffer.open(dir, { memoryBytes: 0, batchChanges: 2 })
    const changes = Array.from({ length: 10 }, (_, i) => insert(TAGS, String(i), 'x'))
    await buffer.append(1, streamed(1, changes))
    await buffer.append(2, streamed(2, changes))
    for await (const batch of buffer.commit(1)) {
      expect(batch).toHaveLength(2)
      break
    }
    expect([...spillFiles(dir).keys()].every((n) => n.startsWith('stream-2.'))).toBe(true)
    const never = buffer.commit(2)
    expect(buffer.openTransactions).toBe(0)
    expect(buffer.bytesOnDisk).toBeGreaterThan(0) // still on disk until iterated or closed
    await buffer.close()
    expect(spillFiles(dir).size).toBe(0)
    await expect(never.next()).rejects.toMatchObject({ code: 'spill_closed' })
  })

  it('rejects calls after close with spill_closed', async () => {
    const buffer = await SpillStreamBuffer.open(await tmp.make())
    await buffer.close()
    await buffer.close()
    await expect(buffer.append(1, [])).rejects.toBeInstanceOf(SpillError)
    await expect(buffer.append(1, [])).rejects.toMatchObject({ code: 'spill_closed' })
    await expect(buffer.abort({ xid: 1, subxid: 1, reason: 'aborted' })).rejects.toMatchObject({ code: 'spill_closed' })
    await expect(buffer.commit(1).next()).rejects.toMatchObject({ code: 'spill_closed' })
  })

  it('refuses a change it cannot encode and leaves the transaction as it was', async () => {
    const buffer = await SpillStreamBuffer.open(await tmp.make(), { memoryBytes: 0 })
    await buffer.append(6, streamed(6, [insert(TAGS, '1', 'a')]))
    const bad = { kind: 'insert', relation: TAGS, newTuple: ['2', 42 as unknown as string] } as Change
    await expect(buffer.append(6, [...streamed(61, [insert(TAGS, 'ok', 'b')]), ...streamed(6, [bad])])).rejects.toMatchObject({ code: 'spill_invalid_item' })
    await buffer.append(6, streamed(6, [insert(TAGS, '3', 'c')]))
    expect((await collect(buffer.commit(6))).items).toStrictEqual([insert(TAGS, '1', 'a'), insert(TAGS, '3', 'c')])
    await buffer.close()
  })
})

/** `global.gc`, made available at run time. */
function exposeGc(): () => void {
  setFlagsFromString('--expose-gc')
  return runInNewContext('gc') as () => void
}

describe('SpillStreamBuffer memory bound', () => {
  it('moves a transaction of 1M small changes through with bounded memory', { timeout: 300_000 }, async () => {
    const gc = exposeGc()
    const dir = await tmp.make()
    const memoryBytes = 1024 * 1024
    const buffer = await SpillStreamBuffer.open(dir, { memoryBytes })
    const TOTAL = 1_000_000
    const BATCH = 1024
    const other: StreamedChange[] = streamed(2, [insert(TAGS, 'other', 'xid')])
    for (let start = 0; start < TOTAL; start += BATCH) {
      const batch: StreamedChange[] = []
      for (let i = start; i < Math.min(TOTAL, start + BATCH); i++) {
        batch.push({ subxid: 1, change: { kind: 'insert', relation: ITEMS_V1, newTuple: [String(i), `name-${i}`, null] } })
      }
      await buffer.append(1, batch)
      if (start % (BATCH * 100) === 0) await buffer.append(2, other)
      expect(buffer.bytesInMemory).toBeLessThanOrEqual(memoryBytes * buffer.openTransactions)
    }
    const transactionBytes = buffer.bytesOnDisk
    expect(transactionBytes).toBeGreaterThan(20 * 1024 * 1024)

    // Heap plus Buffers (off-heap): the read buffer and batches count.
    const used = (): number => {
      const m = process.memoryUsage()
      return m.heapUsed + m.external
    }
    gc()
    const baseline = used()
    let peak = 0
    let seen = 0
    let batches = 0
    let ok = true
    for await (const batch of buffer.commit(1)) {
      for (const change of batch) {
        if (change.kind !== 'insert' || change.relation !== ITEMS_V1 || change.newTuple[0] !== String(seen) || change.newTuple[2] !== null) ok = false
        seen++
      }
      if (++batches % 50 === 0) {
        gc()
        peak = Math.max(peak, used() - baseline)
      }
    }
    expect(ok).toBe(true)
    expect(seen).toBe(TOTAL)
    // The decoded transaction would take several times its encoded size; the
    // read-back holds one read buffer and one batch.
    console.log(`1M changes: ${(transactionBytes / 1048576).toFixed(1)} MiB on disk, peak heap+external growth while reading back ${(peak / 1048576).toFixed(1)} MiB`)
    expect(peak).toBeLessThan(Math.min(16 * 1024 * 1024, transactionBytes / 4))
    expect([...spillFiles(dir).keys()].every((n) => n.startsWith('stream-2.'))).toBe(true)
    expect((await collect(buffer.commit(2))).items).toHaveLength(other.length * Math.ceil(TOTAL / (BATCH * 100)))
    await buffer.close()
  })
})

describe('SpillStreamBuffer under disk faults', () => {
  async function faulty(memoryBytes = 0, extra: { readBytes?: number; batchChanges?: number } = {}) {
    const dir = await tmp.make()
    const { fs, rules } = createFaultyFs(nodeFs)
    const buffer = await SpillStreamBuffer.open(dir, { memoryBytes, fs, ...extra })
    return { dir, rules, buffer }
  }

  const a = (i: number): Change => insert(TAGS, `a${i}`, 'alpha')
  const b = (i: number): Change => insert(TAGS, `b${i}`, 'beta')

  it.each([
    { fault: 'ENOSPC', inject: (r: FaultRules<FsPort>) => r.failNext('write', { code: 'ENOSPC' }) },
    { fault: 'EIO', inject: (r: FaultRules<FsPort>) => r.failNext('write', { code: 'EIO' }) },
    { fault: 'a torn write', inject: (r: FaultRules<FsPort>) => r.tornWrite({ code: 'ENOSPC' }) },
  ])('$fault mid-append: typed error, that xid dropped cleanly, other xids unaffected', async ({ inject }) => {
    const { dir, rules, buffer } = await faulty()
    await buffer.append(1, streamed(1, [a(0)]))
    await buffer.append(2, streamed(2, [b(0)]))
    inject(rules)
    const error = await buffer.append(1, streamed(1, [a(1), a(2)])).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(SpillError)
    expect(error).toMatchObject({ code: 'spill_write_failed' })
    expect((error as SpillError).errno).toMatch(/ENOSPC|EIO/)
    // The failed xid's file is gone; its later calls say why.
    expect([...spillFiles(dir).keys()].every((n) => n.startsWith('stream-2.'))).toBe(true)
    expect(buffer.bytesOnDisk).toBe(totalSize(spillFiles(dir)))
    await expect(buffer.append(1, streamed(1, [a(3)]))).rejects.toMatchObject({ code: 'spill_transaction_failed' })
    // The other xid keeps working.
    await buffer.append(2, streamed(2, [b(1)]))
    expect((await collect(buffer.commit(2))).items).toStrictEqual([b(0), b(1)])
    // The failed one is dropped (abort) ...
    await buffer.abort({ xid: 1, subxid: 1, reason: 'disconnected' })
    expect(buffer.openTransactions).toBe(0)
    // ... and the same xid, resent, goes through once the disk is fine.
    await buffer.append(1, streamed(1, [a(0), a(1)]))
    expect((await collect(buffer.commit(1))).items).toStrictEqual([a(0), a(1)])
    expect(spillFiles(dir).size).toBe(0)
    await buffer.close()
  })

  it('a failed xid that is committed anyway rejects its iteration and leaves no file', async () => {
    const { dir, rules, buffer } = await faulty()
    await buffer.append(1, streamed(1, [a(0)]))
    rules.failNext('write', { code: 'ENOSPC' })
    await expect(buffer.append(1, streamed(1, [a(1)]))).rejects.toMatchObject({ code: 'spill_write_failed' })
    const error = await collect(buffer.commit(1)).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: 'spill_transaction_failed', errno: 'ENOSPC', diskFull: true })
    expect(spillFiles(dir).size).toBe(0)
    await buffer.close()
  })

  it('cannot create the spill file: spill_open_failed, nothing left behind', async () => {
    const { dir, rules, buffer } = await faulty()
    rules.failNext('openSync', { code: 'EMFILE' })
    await expect(buffer.append(1, streamed(1, [a(0)]))).rejects.toMatchObject({ code: 'spill_open_failed', errno: 'EMFILE' })
    expect(spillFiles(dir).size).toBe(0)
    await buffer.abort({ xid: 1, subxid: 1, reason: 'aborted' })
    await buffer.close()
  })

  it.each(['ENOSPC', 'EIO'] as const)('%s mid-commit read: typed error, file removed, other xids unaffected', async (code) => {
    const { dir, rules, buffer } = await faulty(0, { readBytes: 64, batchChanges: 10 })
    const changes = Array.from({ length: 100 }, (_, i) => a(i))
    await buffer.append(1, streamed(1, changes))
    await buffer.append(2, streamed(2, [b(0)]))
    const iterator = buffer.commit(1)
    const first = await iterator.next()
    expect(first.done).toBe(false)
    expect(first.value).toStrictEqual(changes.slice(0, 10))
    rules.failNext('readSync', { code })
    const error = await collect({ [Symbol.asyncIterator]: () => iterator }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(SpillError)
    expect(error).toMatchObject({ code: 'spill_read_failed', errno: code })
    expect([...spillFiles(dir).keys()].every((n) => n.startsWith('stream-2.'))).toBe(true)
    expect(buffer.bytesOnDisk).toBe(totalSize(spillFiles(dir)))
    await buffer.append(2, streamed(2, [b(1)]))
    expect((await collect(buffer.commit(2))).items).toStrictEqual([b(0), b(1)])
    expect(spillFiles(dir).size).toBe(0)
    await buffer.close()
  })

  it('a failed ftruncate on a subtransaction abort loses nothing: later appends overwrite the stale bytes', async () => {
    const { dir, rules, buffer } = await faulty()
    await buffer.append(1, streamed(1, [a(0)]))
    await buffer.append(1, streamed(11, [a(1), a(2), a(3)]))
    rules.failNext('ftruncateSync', { code: 'EIO' })
    await buffer.abort({ xid: 1, subxid: 11, reason: 'aborted' })
    await buffer.append(1, streamed(12, [a(4)]))
    expect((await collect(buffer.commit(1))).items).toStrictEqual([a(0), a(4)])
    expect(spillFiles(dir).size).toBe(0)
    await buffer.close()
  })

  it('a file that cannot be deleted is retried at close', async () => {
    const { dir, rules, buffer } = await faulty()
    await buffer.append(1, streamed(1, [a(0)]))
    rules.failNext('unlinkSync', { code: 'EIO' })
    await buffer.abort({ xid: 1, subxid: 1, reason: 'aborted' })
    expect(spillFiles(dir).size).toBe(1)
    expect(buffer.bytesOnDisk).toBe(0)
    await buffer.close()
    expect(spillFiles(dir).size).toBe(0)
  })

  it('opening a directory that cannot be created rejects with spill_open_failed', async () => {
    const { fs, rules } = createFaultyFs(nodeFs)
    rules.failNext('mkdirSync', { code: 'EACCES' })
    await expect(SpillDir.open(join(await tmp.make(), 'x'), { fs })).rejects.toMatchObject({ code: 'spill_open_failed', errno: 'EACCES' })
  })
})
