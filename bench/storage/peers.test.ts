/**
 * The benchmark's baselines must do the same job as the engine they are
 * compared with, or the comparison means nothing. One suite, run against each
 * peer store: concrete cases for chunking, virtual offsets, visibility and
 * replays, then a randomised comparison with `MemoryLogStore`, the contract's
 * reference, read for read and byte for byte.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import type { LogOffset } from '@sluice/protocol'
import { BEFORE_ALL, LAST_VIRTUAL, formatOffset } from '@sluice/protocol'
import { MemoryLogStore, readSpans } from '@sluice/storage'
import type { LogEntryInput, ShapeLog, ShapeLogStore } from '@sluice/storage'
import { openLmdbLogStore } from './peers/lmdb-store.js'
import { openSqliteLogStore } from './peers/sqlite-store.js'
import { prng } from './rows.js'

interface PeerCase {
  readonly name: string
  open(dir: string, chunkBytes: number, syncEveryCommit?: boolean): Promise<ShapeLogStore>
}

const PEERS: readonly PeerCase[] = [
  { name: 'sqlite', open: (dir, chunkBytes, syncEveryCommit = false) => openSqliteLogStore({ dir, chunkBytes, syncEveryCommit }) },
  { name: 'lmdb', open: (dir, chunkBytes, syncEveryCommit = false) => openLmdbLogStore({ dir, chunkBytes, syncEveryCommit }) },
]

const enc = new TextEncoder()
const dec = new TextDecoder()

/** A JSON line of exactly `bytes` bytes (stored as bytes + 1 with the separator). */
function line(tag: string, bytes: number): Uint8Array {
  const base = `{"k":"${tag}","p":""}`
  if (bytes < base.length) throw new Error(`line ${tag} cannot be ${bytes} bytes`)
  return enc.encode(`{"k":"${tag}","p":"${'x'.repeat(bytes - base.length)}"}`)
}

function tx(lsn: bigint, tags: readonly string[], bytes = 19): LogEntryInput[] {
  return tags.map((tag, op) => ({ offset: { tx: lsn, op: BigInt(op) }, json: line(tag, bytes) }))
}

/** The tags of the entries a read returns, in order. */
function tags(log: ShapeLog, after: LogOffset): { tags: string[]; next: string; head: boolean; count: number } {
  const r = log.read(after)
  try {
    const text = dec.decode(readSpans(r))
    const found = [...text.matchAll(/"k":"([^"]*)"/g)].map((m) => m[1]!)
    expect(text.length).toBe(r.byteLength)
    if (r.byteLength > 0) expect(text.endsWith(',')).toBe(true)
    return { tags: found, next: formatOffset(r.nextOffset), head: r.reachedHead, count: r.entryCount }
  } finally {
    r.release()
  }
}

const dirs: string[] = []
const stores: ShapeLogStore[] = []
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close()
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true })
})

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-peer-'))
  dirs.push(dir)
  return dir
}

describe.each(PEERS)('$name peer', (peer) => {
  async function open(chunkBytes: number, syncEveryCommit = false): Promise<ShapeLogStore> {
    const store = await peer.open(join(tempDir(), 'store'), chunkBytes, syncEveryCommit)
    stores.push(store)
    return store
  }

  it('cuts the snapshot into chunks with virtual offsets 0_n, snapshot-end closing the last', async () => {
    // Stored entries are 20 bytes; a chunk closes at the entry that reaches 50 bytes, so every third entry.
    const store = await open(50)
    const writer = store.createShape('s1', { meta: enc.encode('def') })
    expect(store.get('s1')).toBeUndefined()
    writer.append([line('a', 19), line('b', 19), line('c', 19), line('d', 19)])
    writer.append([line('e', 19)])
    const log = await writer.finish(line('end', 19))
    expect(store.ids()).toEqual(['s1'])
    expect(dec.decode(log.meta)).toBe('def')
    expect(log.head()).toEqual({ lastOffset: { tx: 0n, op: 1n }, entryCount: 6, closedChunks: 2, snapshotChunks: 2 })
    expect(tags(log, BEFORE_ALL)).toEqual({ tags: ['a', 'b', 'c'], next: '0_0', head: false, count: 3 })
    expect(tags(log, { tx: 0n, op: 0n })).toEqual({ tags: ['d', 'e', 'end'], next: '0_1', head: true, count: 3 })
    expect(tags(log, { tx: 0n, op: 1n }).tags).toEqual([])
    expect(tags(log, LAST_VIRTUAL)).toEqual({ tags: [], next: '0_inf', head: true, count: 0 })
  })

  it('ends the snapshot in a chunk of its own when the rows closed one exactly', async () => {
    const store = await open(40)
    const writer = store.createShape('s1')
    writer.append([line('a', 19), line('b', 19)])
    const log = await writer.finish(line('end', 19))
    expect(log.head().snapshotChunks).toBe(2)
    expect(tags(log, { tx: 0n, op: 0n }).tags).toEqual(['end'])
  })

  it('shows live entries only after advance and flush, at transaction boundaries', async () => {
    const store = await open(1000)
    const log = await store.createShape('s1').finish(line('end', 19))
    expect(log.appendTransaction(tx(100n, ['a', 'b']))).toBe(2)
    expect(log.appendTransaction(tx(200n, ['c']))).toBe(1)
    expect(tags(log, LAST_VIRTUAL).tags).toEqual([])
    await store.flush()
    expect(tags(log, LAST_VIRTUAL).tags).toEqual([])
    store.advance(150n)
    const flushed = await store.flush()
    expect(flushed).toMatchObject({ durableLsn: 150n, advanced: ['s1'] })
    expect(store.durableLsn).toBe(150n)
    expect(tags(log, LAST_VIRTUAL)).toEqual({ tags: ['a', 'b'], next: '100_1', head: true, count: 2 })
    expect(log.head().lastOffset).toEqual({ tx: 100n, op: 1n })
    store.advance(200n)
    await store.flush()
    expect(tags(log, { tx: 100n, op: 1n })).toEqual({ tags: ['c'], next: '200_0', head: true, count: 1 })
  })

  it('closes live chunks at the threshold, mid-transaction, and reads from mid-chunk to the chunk end', async () => {
    const store = await open(60)
    const log = await store.createShape('s1').finish(line('end', 19))
    log.appendTransaction(tx(10n, ['a', 'b', 'c', 'd']))
    log.appendTransaction(tx(20n, ['e', 'f', 'g']))
    store.advance(20n)
    await store.flush()
    expect(log.head()).toEqual({ lastOffset: { tx: 20n, op: 2n }, entryCount: 8, closedChunks: 3, snapshotChunks: 1 })
    expect(tags(log, LAST_VIRTUAL)).toEqual({ tags: ['a', 'b', 'c'], next: '10_2', head: false, count: 3 })
    expect(tags(log, { tx: 10n, op: 0n })).toEqual({ tags: ['b', 'c'], next: '10_2', head: false, count: 2 })
    expect(tags(log, { tx: 10n, op: 2n })).toEqual({ tags: ['d', 'e', 'f'], next: '20_1', head: false, count: 3 })
    // An offset between entries (and one inside a chunk that is still open).
    expect(tags(log, { tx: 15n, op: 0n })).toEqual({ tags: ['e', 'f'], next: '20_1', head: false, count: 2 })
    expect(tags(log, { tx: 20n, op: 1n })).toEqual({ tags: ['g'], next: '20_2', head: true, count: 1 })
    expect(tags(log, { tx: 20n, op: 2n })).toEqual({ tags: [], next: '20_2', head: true, count: 0 })
  })

  it('skips replayed entries and rejects malformed transactions', async () => {
    const store = await open(1000)
    const log = await store.createShape('s1').finish(line('end', 19))
    expect(log.appendTransaction(tx(10n, ['a', 'b']))).toBe(2)
    expect(log.appendTransaction(tx(10n, ['a', 'b']))).toBe(0)
    expect(log.appendTransaction(tx(10n, ['a', 'b', 'c']))).toBe(1)
    expect(() => log.appendTransaction([...tx(30n, ['x']), ...tx(31n, ['y'])])).toThrow(/one transaction/)
    expect(() =>
      log.appendTransaction([
        { offset: { tx: 40n, op: 2n }, json: line('p', 19) },
        { offset: { tx: 40n, op: 1n }, json: line('q', 19) },
      ]),
    ).toThrow(/increase/)
    store.advance(40n)
    await store.flush()
    expect(tags(log, LAST_VIRTUAL).tags).toEqual(['a', 'b', 'c'])
  })

  it('publishes a transaction split with `more` only after its last part', async () => {
    const store = await open(1000)
    const log = await store.createShape('s1').finish(line('end', 19))
    const parts = tx(10n, ['a', 'b', 'c'])
    log.appendTransaction(parts.slice(0, 2), { more: true })
    store.advance(10n)
    await store.flush()
    expect(tags(log, LAST_VIRTUAL).tags).toEqual([])
    log.appendTransaction(parts.slice(2))
    await store.flush()
    expect(tags(log, LAST_VIRTUAL).tags).toEqual(['a', 'b', 'c'])
  })

  it('keeps shapes apart, refuses duplicate ids, deletes, and drops aborted snapshots', async () => {
    const store = await open(1000)
    const one = await store.createShape('one').finish(line('end1', 19))
    const two = await store.createShape('two').finish(line('end2', 19))
    expect(() => store.createShape('one')).toThrow(/exists/)
    one.appendTransaction(tx(5n, ['o']))
    two.appendTransaction(tx(5n, ['t']))
    store.advance(5n)
    await store.flush()
    expect(tags(one, BEFORE_ALL).tags).toEqual(['end1'])
    expect(tags(one, LAST_VIRTUAL).tags).toEqual(['o'])
    expect(tags(two, LAST_VIRTUAL).tags).toEqual(['t'])
    const aborted = store.createShape('three')
    aborted.append([line('z', 19)])
    await aborted.abort()
    expect(store.get('three')).toBeUndefined()
    expect(await store.deleteShape('one')).toBe(true)
    expect(await store.deleteShape('one')).toBe(false)
    expect(store.ids()).toEqual(['two'])
    expect(tags(two, LAST_VIRTUAL).tags).toEqual(['t'])
  })

  it('with syncEveryCommit, still publishes only on flush', async () => {
    const store = await open(1000, true)
    const log = await store.createShape('s1').finish(line('end', 19))
    log.appendTransaction(tx(10n, ['a']))
    expect(tags(log, LAST_VIRTUAL).tags).toEqual([])
    store.advance(10n)
    await store.flush()
    expect(tags(log, LAST_VIRTUAL).tags).toEqual(['a'])
  })

  it('reads byte-identically to MemoryLogStore over a random history', async () => {
    for (const seed of [1, 2, 3]) {
      const random = prng(seed)
      const chunkBytes = 200 + Math.floor(random() * 400)
      const mem = new MemoryLogStore({ chunkBytes })
      const store = await open(chunkBytes)
      const id = `shape-${seed}`
      const writers = [mem.createShape(id), store.createShape(id)]
      const snapshotRows = Math.floor(random() * 40)
      for (let i = 0; i < snapshotRows; i += 7) {
        const rows = Array.from({ length: Math.min(7, snapshotRows - i) }, (_, j) => line(`s${i + j}`, 25 + Math.floor(random() * 60)))
        for (const w of writers) w.append(rows)
      }
      const end = line('snapshot-end', 30)
      const logs = [await writers[0]!.finish(end), await writers[1]!.finish(end)] as const
      let lsn = 1000n
      const offsets: LogOffset[] = [BEFORE_ALL, LAST_VIRTUAL, { tx: 0n, op: 0n }, { tx: 0n, op: 1n }, { tx: 0n, op: 99n }]
      for (let t = 0; t < 60; t++) {
        lsn += BigInt(1 + Math.floor(random() * 50))
        const size = 1 + Math.floor(random() * (random() < 0.1 ? 30 : 5))
        const entries = Array.from({ length: size }, (_, op) => ({
          offset: { tx: lsn, op: BigInt(op * 2) },
          json: line(`${lsn}_${op}`, 30 + Math.floor(random() * 80)),
        }))
        offsets.push(entries[0]!.offset, { tx: lsn, op: 1n }, { tx: lsn - 1n, op: 0n })
        // Replays of the whole or of a tail must be skipped alike.
        const replay = random() < 0.1
        for (const log of logs) {
          expect(log.appendTransaction(entries)).toBe(size)
          if (replay) expect(log.appendTransaction(entries.slice(Math.floor(size / 2)))).toBe(0)
        }
        if (random() < 0.3) {
          const upTo = lsn - (random() < 0.5 ? 0n : 1n)
          for (const s of [mem, store]) {
            s.advance(upTo)
            await s.flush()
          }
        }
        if (random() < 0.2 || t === 59) compare(logs[0], logs[1], offsets)
      }
      for (const s of [mem, store]) {
        s.advance(lsn)
        await s.flush()
      }
      compare(logs[0], logs[1], offsets)
      // Following nextOffset from -1 walks the whole log through the same chunks.
      let a: LogOffset = BEFORE_ALL
      let b: LogOffset = BEFORE_ALL
      for (let steps = 0; steps < 10_000; steps++) {
        const ra = logs[0].read(a)
        const rb = logs[1].read(b)
        expect(readSpans(rb).equals(readSpans(ra))).toBe(true)
        ra.release()
        rb.release()
        a = ra.nextOffset
        b = rb.nextOffset
        if (ra.reachedHead && ra.entryCount === 0) break
      }
      expect(formatOffset(b)).toBe(formatOffset(a))
      await mem.close()
    }
  })
})

function compare(expected: ShapeLog, actual: ShapeLog, offsets: readonly LogOffset[]): void {
  expect(actual.head()).toEqual(expected.head())
  for (const after of offsets) {
    const want = expected.read(after)
    const got = actual.read(after)
    const label = `after ${formatOffset(after)}`
    expect(readSpans(got).toString('latin1'), label).toBe(readSpans(want).toString('latin1'))
    expect({ n: got.entryCount, b: got.byteLength, next: formatOffset(got.nextOffset), head: got.reachedHead }, label).toEqual({
      n: want.entryCount,
      b: want.byteLength,
      next: formatOffset(want.nextOffset),
      head: want.reachedHead,
    })
    want.release()
    got.release()
  }
}
