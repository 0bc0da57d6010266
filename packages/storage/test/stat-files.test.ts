/**
 * The batched stat of many logs' files (stat-files.ts): cut into parts that
 * the thread pool runs side by side, each filling its own stretch of the
 * result, which must read exactly as the port's statSync file by file.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import type { HeadsEntry } from '../src/file/heads-file.js'
import { type StatFiles, statAll, statFilesSync } from '../src/file/stat-files.js'
import { EarlyStats, planHeads } from '../src/file/store-directory.js'
import { nodeFs } from '../src/index.js'
import { countedNativeStat } from './fixtures/native-stat.js'

const tempDirs = useTempDir()
const NAMES = ['log.dat', 'entries.idx']

describe('statAll', () => {
  it('gives, for thousands of directories stat-ed in parallel parts, what a stat per file gives', async () => {
    const { statFiles: batch, calls } = countedNativeStat()
    const base = await tempDirs.make('stat-parts')
    const dirs: string[] = []
    for (let i = 0; i < 2100; i++) {
      const dir = `b.${(i % 7).toString(16).padStart(2, '0')}/log${i}`
      mkdirSync(`${base}/${dir}`, { recursive: true })
      // Sizes that differ from directory to directory and file to file; some files missing.
      NAMES.forEach((name, n) => {
        if ((i + n) % 11 !== 0) writeFileSync(`${base}/${dir}/${name}`, Buffer.alloc((i * 7 + n * 13) % 97))
      })
      dirs.push(dir)
    }
    dirs.push('b.00/not-there')

    const batched = await statAll(nodeFs, batch, base, dirs, NAMES)
    const expected = new Float64Array(dirs.length * NAMES.length * 2)
    statFilesSync(nodeFs, base, dirs, NAMES, expected)
    expect(calls.length).toBeGreaterThan(1)
    expect(calls.reduce((a, b) => a + b, 0)).toBe(dirs.length)
    // Sizes everywhere; inodes where the file is there (a missing one's is whatever each way leaves).
    const differ: number[] = []
    for (let at = 0; at < expected.length; at += 2) {
      if (batched[at] !== expected[at] || (expected[at] !== -1 && batched[at + 1] !== expected[at + 1])) differ.push(at)
    }
    expect(differ).toEqual([])
    // Spot checks that the two agree on the right thing: a missing file is -1, a present one its size.
    expect(batched[0]).toBe(-1)
    expect(batched[2]).toBe(13 % 97)
    expect(batched[(dirs.length - 1) * NAMES.length * 2]).toBe(-1)
  })
})

describe('EarlyStats: the stats an open starts while it decodes the heads file', () => {
  const entry = (id: string): HeadsEntry => ({ id, meta: '', head: { entries: 0, dataEnd: 0, last: { tx: 0n, op: 0n }, closedChunks: 0, snapshotChunks: 0 }, chunks: [], dataIno: 1 })

  /** An EarlyStats over a batch that records each call's directories and fills nothing. */
  function early(): { stats: EarlyStats; calls: string[][] } {
    const calls: string[][] = []
    const batch: StatFiles = async (_base, dirs) => {
      calls.push([...dirs])
    }
    return { stats: new EarlyStats(nodeFs, batch, '/nowhere'), calls }
  }

  it('starts a part per 2,048 logs as the ids come, and plans as planHeads does', () => {
    const ids = Array.from({ length: 5000 }, (_, i) => `log${i}`)
    const { stats, calls } = early()
    stats.begin(ids.length + 1)
    for (const id of ids.slice(0, 2048)) stats.entry(id)
    // The first part is under way before the decode has gone further.
    expect(calls.map((c) => c.length)).toEqual([2048])
    for (const id of [...ids.slice(2048), 'not/an id']) stats.entry(id)
    const clean = new Map([...ids, 'not/an id'].map((id) => [id, entry(id)]))
    const planned = stats.plan(clean)!
    expect(calls.map((c) => c.length)).toEqual([2048, 2048, 904])
    const plan = planHeads(clean)
    expect(planned.plan.entries).toEqual(plan.entries)
    expect(planned.plan.dirs).toEqual(plan.dirs)
    // (planHeads sizes its buckets by the file's entries, the id it leaves out included.)
    expect([...planned.plan.buckets]).toEqual([...plan.buckets.subarray(0, plan.entries.length)])
    expect(calls.flat()).toEqual(plan.dirs)
    expect(planned.stats.parts.map((p) => p.to)).toEqual([2048, 4096, 5000])
  })

  it('gives no plan when the decoded file is not what it heard (an id named twice), so the open stats again', () => {
    const { stats } = early()
    stats.begin(3)
    for (const id of ['a', 'b', 'a']) stats.entry(id)
    expect(stats.plan(new Map(['a', 'b'].map((id) => [id, entry(id)])))).toBeUndefined()
    const other = early().stats
    other.begin(2)
    for (const id of ['a', 'b']) other.entry(id)
    expect(other.plan(new Map(['b', 'a'].map((id) => [id, entry(id)])))).toBeUndefined()
  })
})
