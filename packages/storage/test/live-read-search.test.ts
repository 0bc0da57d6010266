/**
 * Finding where a read starts inside a chunk: a live reader asks for what came
 * after the head it was last sent, a few records from the end of an open chunk
 * that may hold thousands. The search reads a handful of entry records for it,
 * not one per halving of the chunk, and lands on the same entry as for any other
 * offset.
 */
import { createFaultyFs, useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { type FsPort, nodeFs, openFileLogStore, openReadOnlyLogStore } from '../src/index.js'
import { body, change } from './contract-suite.js'

const tempDirs = useTempDir()
const ENTRIES = 4000

describe('the search for the first entry of a read', () => {
  it('reads a few entry records for an offset near the head of a large open chunk, and the same entries as before', async () => {
    const dir = await tempDirs.make('live-read-search')
    // One open chunk holds every live entry: the search is over all of them.
    const w = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 64 * 1024 * 1024 })
    await w.createShape('s').finish(Buffer.from('{"headers":{"control":"snapshot-end"}}'))
    const log = w.get('s')!
    for (let i = 0; i < ENTRIES; i++) log.appendTransaction([change(BigInt(10 + i), 0, i)])
    w.advance(BigInt(10 + ENTRIES))
    await w.flush()
    await w.close()

    // A follower reads every record from entries.idx (nothing of the log is in its memory).
    const faulty = createFaultyFs<FsPort>(nodeFs)
    const reader = openReadOnlyLogStore({ dir, pollIntervalMs: 0, fs: faulty.fs })
    const r = reader.get('s')!
    // The snapshot's chunk is closed; every live entry is in the open one.
    expect(r.head().closedChunks).toBe(1)
    expect(r.head().entryCount).toBe(ENTRIES + 1)
    const readsFor = (k: number): { reads: number; ids: string[] } => {
      faulty.rules.resetCalls()
      const read = r.read({ tx: BigInt(10 + k), op: 0n })
      const reads = faulty.rules.callCounts()['readSync'] ?? 0
      const rows = body(read) as Array<{ value: { id: string } }>
      read.release()
      return { reads, ids: rows.map((row) => row.value.id) }
    }

    // One entry behind the head: two probes back from the end and one step of the binary search.
    const live = readsFor(ENTRIES - 2)
    expect(live.ids).toEqual([String(ENTRIES - 1)])
    // A binary search over the chunk took log2(4001), 12 reads, to find it.
    expect(live.reads).toBeLessThanOrEqual(5)
    // Ten behind: still a few, the gallop's probes (1, 3, 7, 15) and a short binary search.
    const ten = readsFor(ENTRIES - 11)
    expect(ten.ids).toEqual(Array.from({ length: 10 }, (_, i) => String(ENTRIES - 10 + i)))
    expect(ten.reads).toBeLessThanOrEqual(9)
    // Far back, and at the start: at most about twice the binary search, with the same answer.
    for (const k of [0, 1, 1234, ENTRIES - 1000]) {
      const { reads, ids } = readsFor(k)
      expect(ids.length).toBe(ENTRIES - 1 - k)
      expect(ids[0]).toBe(String(k + 1))
      expect(reads).toBeLessThanOrEqual(2 * 12 + 2)
    }
    // The head itself: nothing after it.
    expect(readsFor(ENTRIES - 1).ids).toEqual([])
    await reader.close()
  })
})
