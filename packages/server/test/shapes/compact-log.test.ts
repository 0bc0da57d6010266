import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type ShapeLogStore, openFileLogStore, readSpans } from '@sluice/storage'
import { afterEach, describe, expect, it } from 'vitest'
import { splitEntries } from '../../src/http/live/split-entries.js'
import { compactLog } from '../../src/shapes/compaction/compact-log.js'
import { TeeTarget } from '../../src/shapes/compaction/tee-target.js'
import { changeJson, commit, makeShape, rowJson } from '../http/live/helpers.js'

/**
 * One log's compaction on a real file store: the merge's memory is bounded
 * (past `maxMergeBytes` it gives up and leaves the old log alone), and within
 * the bound it writes one message per changed key.
 */

const cleanups: Array<() => Promise<unknown>> = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function store(): Promise<ShapeLogStore> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-compact-log-'))
  cleanups.push(() => rm(dir, { recursive: true, force: true }))
  const s = await openFileLogStore({ dir, chunkBytes: 4096, flushIntervalMs: 5 })
  cleanups.push(() => s.close())
  return s
}

/** 200 rows, then 20 rounds of updates to every one of them. */
async function history(s: ShapeLogStore) {
  const log = await makeShape(s, 'h', Array.from({ length: 200 }, (_, i) => rowJson(i)))
  for (let round = 1; round <= 20; round++) {
    await commit(s, log, BigInt(round * 1000), Array.from({ length: 200 }, (_, i) => changeJson(BigInt(round * 1000), 2 * i, i, { v: `r${round}` })))
  }
  return log
}

describe('compactLog', () => {
  it('gives up past its memory bound, leaving the old log and no new one', async () => {
    const s = await store()
    const old = await history(s)
    const until = old.head().lastOffset
    const outcome = await compactLog(s, old, until, 'h_c1', new TeeTarget(old), undefined, 20_000).then(
      () => 'compacted',
      (error: unknown) => String(error),
    )
    expect(outcome).toMatch(/compaction gave up/)
    await s.flush()
    expect(s.ids()).toEqual(['h'])
    expect(old.head().lastOffset).toEqual(until)
  })

  it('within the bound, writes each changed key once, at its last change', async () => {
    const s = await store()
    const old = await history(s)
    const until = old.head().lastOffset
    const result = await compactLog(s, old, until, 'h_c1', new TeeTarget(old), undefined, 1024 * 1024)
    expect(result.keys).toBe(200)
    expect(result.changes).toBe(4000)
    let at = result.log.read({ tx: -1n, op: 0n })
    const live: Array<{ key: string; value: { v: string } }> = []
    for (;;) {
      const bytes = readSpans(at)
      at.release()
      for (const e of splitEntries(bytes)) {
        const m = JSON.parse(e.toString('utf8')) as { key?: string; value: { v: string }; headers: { lsn?: string } }
        if (m.key !== undefined && m.headers.lsn !== undefined) live.push({ key: m.key, value: m.value })
      }
      if (at.reachedHead) break
      at = result.log.read(at.nextOffset)
    }
    expect(live).toHaveLength(200)
    expect(new Set(live.map((m) => m.value.v))).toEqual(new Set(['r20']))
  })
})
