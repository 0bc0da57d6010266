/**
 * A log directory with one of its files gone (an operator's rm, a bad disk, a
 * copy that missed a file): the store still opens, the damaged log is set
 * aside in quarantine/ with what is left of it, the error is reported, and
 * every other log is served as before. Checked after a clean close (the
 * heads file's stat check, natively batched or file by file) and after a
 * crash (recovery's scan), and for the read-only store.
 */
import { existsSync, readdirSync, rmSync } from 'node:fs'
import { loadSendfile } from '@sluice/sendfile'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { HEADS_FILE } from '../src/file/heads-file.js'
import { openFileLogStore, openReadOnlyLogStore, shapeDir } from '../src/index.js'
import type { FileLogStore, StatFiles, StorageError } from '../src/index.js'
import { change, makeShape, readAllEntries, row } from './contract-suite.js'
import { powerCut } from './fixtures/files.js'
import { IDS, OPTIONS, expectGoesOnWithout, populated } from './fixtures/quarantine.js'

const tempDirs = useTempDir()

const FILES = ['log.dat', 'entries.idx', 'chunks.idx', 'meta.bin'] as const

function nativeStatFiles(): StatFiles {
  const load = loadSendfile()
  if (!load.available || load.sendfile.statFiles === undefined) throw new Error(`the addon's statFiles is not available: ${load.available ? 'an old build' : load.reason}`)
  return load.sendfile.statFiles
}

type Way = 'clean, native stat' | 'clean, stat per file' | 'crash'

/** Opens `dir` with `b`'s `file` deleted, after a clean close or a crash, and checks what the store made of it. */
async function openWithout(way: Way, file: (typeof FILES)[number]): Promise<void> {
  const dir = await tempDirs.make('missing')
  const { store, before } = await populated(dir)
  if (way === 'crash') {
    await store.flush()
    powerCut(dir)
    // Replay runs first, and names the log whose file is gone.
    expect(readdirSync(`${dir}/journal`).length).toBeGreaterThan(0)
  } else {
    await store.close()
    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(true)
  }
  rmSync(`${shapeDir(dir, 'b')}/${file}`)

  let batched = 0
  const native = way === 'clean, native stat' ? nativeStatFiles() : undefined
  const statFiles: StatFiles | undefined = native && ((base, dirs, names, out) => (batched++, native(base, dirs, names, out)))
  const errors: StorageError[] = []
  const again = await openFileLogStore({ dir, ...OPTIONS, ...(statFiles ? { statFiles } : {}), onError: (err) => errors.push(err) })
  try {
    if (native) expect(batched).toBe(1)
    expect(again.quarantined).toEqual(['b'])
    expect(again.get('b')).toBeUndefined()
    expect(again.ids().sort()).toEqual(['a', 'c', 'd'])
    // Reported, with the log and the file named.
    expect(errors).toHaveLength(1)
    expect(errors[0]!.code).toBe('corrupt_log')
    expect(errors[0]!.message).toContain('shape b')
    expect(errors[0]!.message).toContain(file)
    // Set aside with what was left of it, not deleted.
    const kept = readdirSync(`${dir}/quarantine`)
    expect(kept).toHaveLength(1)
    expect(kept[0]!.startsWith('b.')).toBe(true)
    expect(readdirSync(`${dir}/quarantine/${kept[0]}`).sort()).toEqual(FILES.filter((f) => f !== file).sort())
    expect(existsSync(shapeDir(dir, 'b'))).toBe(false)
    for (const id of ['a', 'c', 'd']) expect(readAllEntries(again.get(id)!)).toEqual(before[id])
  } catch (err) {
    await again.close()
    throw err
  }
  // The store goes on: the shape can be made again, and the others take appends.
  await expectGoesOnWithout(again, dir)
}

describe('a log with one of its files missing', () => {
  for (const way of ['clean, native stat', 'clean, stat per file', 'crash'] as const) {
    for (const file of FILES) {
      it(`is quarantined and the store opens (${way}, ${file} gone)`, async () => {
        await openWithout(way, file)
      })
    }
  }

  it('is quarantined too when several logs each miss a different file', async () => {
    const dir = await tempDirs.make('missing-several')
    const { store, before } = await populated(dir)
    await store.close()
    rmSync(`${shapeDir(dir, 'a')}/log.dat`)
    rmSync(`${shapeDir(dir, 'c')}/chunks.idx`)
    rmSync(`${shapeDir(dir, 'd')}/meta.bin`)
    const again = await openFileLogStore({ dir, ...OPTIONS, statFiles: nativeStatFiles() })
    expect(again.quarantined.sort()).toEqual(['a', 'c', 'd'])
    expect(readAllEntries(again.get('b')!)).toEqual(before.b)
    await again.close()
  })

  it('does not crash the read-only store: such a log fails with corrupt_log (absent without its meta.bin), the others are served', async () => {
    const dir = await tempDirs.make('missing-read-only')
    const { store, before } = await populated(dir)
    await store.close()
    // Read-only stores follow a live writer, so files can go missing under them too: one removed before it looks, the others after.
    rmSync(`${shapeDir(dir, 'a')}/entries.idx`)
    const ro = openReadOnlyLogStore({ dir, pollIntervalMs: 0 })
    try {
      expect(ro.ids().sort()).toEqual(IDS)
      const corrupt = expect.objectContaining({ name: 'StorageError', code: 'corrupt_log' })
      expect(() => ro.get('a')!.head()).toThrow(corrupt)
      expect(readAllEntries(ro.get('d')!)).toEqual(before.d)
      rmSync(`${shapeDir(dir, 'b')}/meta.bin`)
      rmSync(`${shapeDir(dir, 'c')}/log.dat`)
      expect(ro.get('b')).toBeUndefined()
      expect(() => ro.get('c')!.read({ tx: 0n, op: 0n })).toThrow(corrupt)
      expect(() => ro.poll()).not.toThrow()
      // A log the reader has open keeps being served from its descriptors.
      rmSync(`${shapeDir(dir, 'd')}/chunks.idx`)
      expect(readAllEntries(ro.get('d')!)).toEqual(before.d)
    } finally {
      await ro.close()
    }
    // The writer, opened after, sets all four aside.
    const w = await openFileLogStore({ dir, ...OPTIONS })
    expect(w.quarantined.sort()).toEqual(IDS)
    await w.close()
  })

  it('with its whole directory gone, reads in the read-only store as deleted, not damaged', async () => {
    const dir = await tempDirs.make('missing-read-only-dir')
    const { store } = await populated(dir)
    await store.close()
    const ro = openReadOnlyLogStore({ dir, pollIntervalMs: 0 })
    try {
      const log = ro.get('a')!
      rmSync(shapeDir(dir, 'a'), { recursive: true })
      expect(() => log.head()).toThrow(expect.objectContaining({ name: 'StorageError', code: 'shape_deleted' }))
      expect(ro.get('a')).toBeUndefined()
    } finally {
      await ro.close()
    }
  })
})
