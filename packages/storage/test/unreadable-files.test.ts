/**
 * A log whose files the disk cannot read (EIO from a bad block, EBADMSG or EUCLEAN from
 * a damaged inode) when the store opens after a crash: that log alone is set
 * aside in quarantine/ and reported, every other log is served, and the store
 * takes the shape again. A read that fails for want of descriptors is no
 * damage: the open fails, and the log stays where it is.
 */
import { existsSync, readdirSync, readlinkSync } from 'node:fs'
import { createFaultyFs, useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { nodeFs, openFileLogStore, shapeDir } from '../src/index.js'
import type { FileLogStore, FsPort, StorageError } from '../src/index.js'
import { readAllEntries } from './contract-suite.js'
import { powerCut } from './fixtures/files.js'
import { IDS, OPTIONS, expectGoesOnWithout, populated } from './fixtures/quarantine.js'

const tempDirs = useTempDir()

/** Four logs with data, all durable; then the power is cut. */
async function crashed(dir: string): Promise<Record<string, unknown[]>> {
  const { before } = await populated(dir)
  powerCut(dir)
  return before
}

/** Matches a descriptor argument open on `path`. */
const onDescriptorOf =
  (path: string) =>
  (args: readonly unknown[]): boolean => {
    try {
      return readlinkSync(`/proc/self/fd/${String(args[0])}`) === path
    } catch {
      return false
    }
  }

describe('a log whose files cannot be read at open', () => {
  for (const [code, file, method] of [
    ['EIO', 'entries.idx', 'readSync'],
    ['EBADMSG', 'log.dat', 'readSync'],
    ['EIO', 'meta.bin', 'readFileSync'],
  ] as const) {
    it(`is quarantined after a crash and the store opens (${code} reading ${file})`, async () => {
      const dir = await tempDirs.make('unreadable')
      const before = await crashed(dir)
      const target = `${shapeDir(dir, 'b')}/${file}`
      const faulty = createFaultyFs<FsPort>(nodeFs)
      const rule =
        method === 'readFileSync'
          ? faulty.rules.failAlways('readFileSync', { code, match: (args) => args[0] === target })
          : faulty.rules.failAlways('readSync', { code, match: onDescriptorOf(target) })
      const errors: StorageError[] = []
      const store: FileLogStore = await openFileLogStore({ dir, ...OPTIONS, fs: faulty.fs, onError: (err) => errors.push(err) })
      try {
        expect(rule.hits).toBeGreaterThan(0)
        expect(store.quarantined).toEqual(['b'])
        expect(store.ids().sort()).toEqual(['a', 'c', 'd'])
        expect(errors).toHaveLength(1)
        expect(errors[0]!.code).toBe('corrupt_log')
        expect(errors[0]!.message).toContain('shape b')
        expect(errors[0]!.message).toContain(code)
        const kept = readdirSync(`${dir}/quarantine`)
        expect(kept).toHaveLength(1)
        expect(kept[0]!.startsWith('b.')).toBe(true)
        expect(existsSync(shapeDir(dir, 'b'))).toBe(false)
        for (const id of ['a', 'c', 'd']) expect(readAllEntries(store.get(id)!)).toEqual(before[id])
      } catch (err) {
        await store.close()
        throw err
      }
      rule.remove()
      // The shape is made again, and every log takes appends.
      await expectGoesOnWithout(store, dir)
    })
  }

  it('fails the open, and moves nothing, when a read fails for want of descriptors (EMFILE)', async () => {
    const dir = await tempDirs.make('unreadable-emfile')
    const before = await crashed(dir)
    const target = `${shapeDir(dir, 'b')}/meta.bin`
    const faulty = createFaultyFs<FsPort>(nodeFs)
    faulty.rules.failAlways('readFileSync', { code: 'EMFILE', match: (args) => args[0] === target })
    await expect(openFileLogStore({ dir, ...OPTIONS, fs: faulty.fs })).rejects.toMatchObject({ name: 'StorageError', code: 'io_error', message: expect.stringContaining('EMFILE') })
    expect(existsSync(target)).toBe(true)
    expect(existsSync(`${dir}/quarantine`) ? readdirSync(`${dir}/quarantine`) : []).toEqual([])
    // Nothing was lost: with descriptors to spare, every log opens.
    const store = await openFileLogStore({ dir, ...OPTIONS })
    try {
      expect(store.quarantined).toEqual([])
      for (const id of IDS) expect(readAllEntries(store.get(id)!)).toEqual(before[id])
    } finally {
      await store.close()
    }
  })
})
