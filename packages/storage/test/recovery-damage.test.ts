/**
 * Recovery must never silently throw away durable data (engine bug; these tests
 * fail against the engine as of commit ccae395).
 *
 * recovery.ts treats every record that fails its check as the torn tail a
 * crash can leave, and cuts the log there, below the durable watermark if need
 * be. A torn tail only ever lies past every durable record, so a failing record
 * that is covered by the watermark is damage (or a format the build does not
 * understand), and the log must be refused (quarantined, or an error), not cut.
 *
 * Two ways to get there:
 *  - ccae395 changed the record check from crc32 to mix32 without a new
 *    FORMAT_VERSION, so a store written by the previous build opens as if every
 *    record were torn, and every log is cut to empty, snapshot included;
 *  - one damaged durable record (bit rot) makes recovery cut the log there.
 */
import { shapeDir } from '../src/file/shape-dirs.js'
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { crc32 } from 'node:zlib'
import { afterAll, describe, expect, it } from 'vitest'
import { StorageError, openFileLogStore } from '../src/index.js'

const enc = new TextEncoder()
const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

/** A store with shape `v`: two snapshot rows, snapshot-end, then transactions 10 and 20, all durable. */
async function durableStore(): Promise<{ dir: string; shapeDir: string; sizes: Record<string, number> }> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-damage-'))
  dirs.push(dir)
  const store = await openFileLogStore({ dir, chunkBytes: 100, flushIntervalMs: 1000 })
  const w = store.createShape('v')
  w.append([enc.encode('{"row":1}'), enc.encode('{"row":2}')])
  const log = await w.finish(enc.encode('{"headers":{"control":"snapshot-end"}}'))
  log.appendTransaction([{ offset: { tx: 10n, op: 0n }, json: enc.encode('{"change":1}') }])
  log.appendTransaction([{ offset: { tx: 20n, op: 0n }, json: enc.encode('{"change":2}') }])
  store.advance(20n)
  await store.flush()
  expect(log.head().entryCount).toBe(5)
  await store.close()
  const vDir = shapeDir(dir, 'v')
  const sizes = Object.fromEntries(['log.dat', 'entries.idx', 'chunks.idx'].map((f) => [f, statSync(join(vDir, f)).size]))
  return { dir, shapeDir: vDir, sizes }
}

/**
 * Opens the store for writing; passes if the log kept all 5 entries, or was
 * refused (an error, or moved to quarantine/ with its bytes intact). Fails if
 * the log was cut.
 */
async function expectNothingDiscarded(dir: string, sizes: Record<string, number>): Promise<void> {
  let store
  try {
    store = await openFileLogStore({ dir, chunkBytes: 100, flushIntervalMs: 1000 })
  } catch (err) {
    expect(err).toBeInstanceOf(StorageError)
    return // refused: nothing was touched
  }
  try {
    const log = store.get('v')
    if (log) {
      expect(log.head().entryCount, 'entries left in the log after recovery').toBe(5)
      const now = Object.fromEntries(Object.keys(sizes).map((f) => [f, statSync(join(shapeDir(dir, 'v'), f)).size]))
      expect(now, 'file sizes after recovery').toEqual(sizes)
    } else {
      expect(store.quarantined).toEqual(['v'])
      const [kept] = readdirSync(join(dir, 'quarantine'))
      expect(statSync(join(dir, 'quarantine', kept!, 'log.dat')).size).toBe(sizes['log.dat'])
    }
  } finally {
    await store.close()
  }
}

describe('recovery never discards durable data (engine bug)', () => {
  it('does not empty the logs of a store written by the previous build (crc32 record checks, same format version 1)', async () => {
    const { dir, shapeDir, sizes } = await durableStore()
    // Re-sign every record as the previous build did: crc32(bytes before the check) XOR the salt.
    for (const [file, size] of [
      ['entries.idx', 32],
      ['chunks.idx', 48],
    ] as const) {
      const buf = readFileSync(join(shapeDir, file))
      for (let at = 16; at + size <= buf.length; at += size) {
        buf.writeUInt32LE((crc32(buf.subarray(at, at + size - 4)) ^ 0x5a17ce01) >>> 0, at + size - 4)
      }
      writeFileSync(join(shapeDir, file), buf)
    }
    expect(readFileSync(join(shapeDir, 'entries.idx'))[4], 'same version byte').toBe(1)
    await expectNothingDiscarded(dir, sizes)
  })

  it('does not cut a durable transaction whose index record is damaged', async () => {
    const { dir, shapeDir, sizes } = await durableStore()
    // Flip one bit in the last entry record (transaction 20, covered by the watermark).
    const buf = readFileSync(join(shapeDir, 'entries.idx'))
    const last = buf.length - 32
    buf[last + 16] = buf[last + 16]! ^ 0x01
    writeFileSync(join(shapeDir, 'entries.idx'), buf)
    await expectNothingDiscarded(dir, sizes)
  })
})
