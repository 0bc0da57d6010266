/**
 * The batched stat of many logs' files (stat-files.ts): cut into parts that
 * the thread pool runs side by side, each filling its own stretch of the
 * result, which must read exactly as the port's statSync file by file.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { statAll, statFilesSync } from '../src/file/stat-files.js'
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
