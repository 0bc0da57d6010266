/**
 * The clean-close heads file (heads-file.ts): the open after a clean close
 * takes every log's head from it instead of scanning the log's files, removes
 * it before changing anything, and falls back to scanning whenever it cannot
 * vouch for a log (a crash since, a damaged file, a log left mid-transaction,
 * files of other sizes).
 */
import { appendFileSync, existsSync, readFileSync, readdirSync, statSync, truncateSync, writeFileSync } from 'node:fs'
import { loadSendfile } from '@sluice/sendfile'
import { shapeDir } from '../src/file/shape-dirs.js'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { HEADS_FILE, decodeHeads, encodeHeads } from '../src/file/heads-file.js'
import { nodeFs, openFileLogStore } from '../src/index.js'
import type { FileLogStore, FsPort, StatFiles } from '../src/index.js'
import { change, makeShape, readAllEntries, row } from './contract-suite.js'
import { powerCut } from './fixtures/files.js'
import { volatileFs } from './fixtures/volatile-fs.js'

const tempDirs = useTempDir()

const entries = readAllEntries

/** A port counting the files opened under shapes/ (what a scan of the logs costs). */
function countingFs(base: FsPort = nodeFs): { fs: FsPort; opens: () => number } {
  let opens = 0
  return {
    fs: {
      ...base,
      openSync(path, flags, mode) {
        if (path.includes('/shapes/')) opens++
        return base.openSync(path, flags, mode)
      },
      readFileSync(path) {
        if (path.includes('/shapes/')) opens++
        return base.readFileSync(path)
      },
    },
    opens: () => opens,
  }
}

const IDS = ['a', 'b', 'c', 'd', 'e']

/** Logs with snapshots, several chunks and transactions, all flushed. */
async function populated(dir: string, fs: FsPort = nodeFs): Promise<FileLogStore> {
  const s = await openFileLogStore({ dir, fs, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300 })
  for (const id of IDS) await makeShape(s, id, [row(1), row(2)])
  for (let tx = 1n; tx <= 12n; tx++) {
    IDS.forEach((id, i) => s.get(id)!.appendTransaction([change(tx, 0, i), change(tx, 1, i + 1)]))
    s.advance(tx)
  }
  await s.flush()
  return s
}

function snapshotOf(s: FileLogStore): Record<string, unknown[]> {
  return Object.fromEntries(IDS.filter((id) => s.get(id) !== undefined).map((id) => [id, entries(s.get(id)!)]))
}

describe('heads file', () => {
  it('encodes and decodes every head, and refuses damage, another watermark and trailing bytes', () => {
    const logs = [
      { id: 'x', meta: 'meta-x\u0000\u0080\u00ff', head: { entries: 7, dataEnd: 900, last: { tx: 42n, op: 3n }, closedChunks: 1, snapshotChunks: 1 }, chunks: [{ end: { tx: 0n, op: 0n }, endEntry: 3, endPos: 400, kind: 1 }] },
      { id: 'y'.repeat(200), meta: '', head: { entries: 0, dataEnd: 16, last: { tx: 0n, op: 0n }, closedChunks: 0, snapshotChunks: 0 }, chunks: [] },
    ]
    const bytes = encodeHeads(42n, logs)
    const back = decodeHeads(bytes, 42n)
    expect(typeof back).toBe('object')
    expect([...(back as Map<string, unknown>).values()]).toEqual(logs)
    expect(decodeHeads(bytes, 43n)).toBe('written at another watermark')
    for (const at of [5, 20, 40, bytes.length - 1]) {
      const damaged = Buffer.from(bytes)
      damaged[at]! ^= 1
      expect(typeof decodeHeads(damaged, 42n)).toBe('string')
    }
    expect(typeof decodeHeads(bytes.subarray(0, bytes.length - 3), 42n)).toBe('string')
    expect(typeof decodeHeads(Buffer.concat([bytes, Buffer.alloc(1)]), 42n)).toBe('string')
  })

  it('gives back every byte value of a meta as given, after a clean close and after a scan', async () => {
    const dir = await tempDirs.make('heads-meta')
    const meta = new Uint8Array([...Array.from({ length: 256 }, (_, i) => i), ...new TextEncoder().encode('{"table":"☃ 𝄞"}')])
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    const given = meta.slice()
    await makeShape(s, 'm', [row(1)], given)
    // The log keeps a copy: the caller's bytes may change after.
    given.fill(0)
    expect(s.get('m')!.meta).toEqual(Buffer.from(meta))
    await s.close()
    const clean = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    expect(clean.get('m')!.meta).toEqual(Buffer.from(meta))
    await clean.close()
    // Without the heads file: the meta from meta.bin.
    writeFileSync(`${dir}/${HEADS_FILE}`, 'damaged')
    const scanned = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    expect(scanned.get('m')!.meta).toEqual(Buffer.from(meta))
    await scanned.close()
  })

  it('opens every log of a clean close without touching its files, removes the file first, and goes on as a scan would', async () => {
    const dir = await tempDirs.make('heads-clean')
    const s = await populated(dir)
    const before = snapshotOf(s)
    await s.close()
    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(true)

    const counting = countingFs()
    const again = await openFileLogStore({ dir, fs: counting.fs, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300 })
    expect(counting.opens()).toBe(0)
    expect(again.cleanOpened).toBe(IDS.length)
    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(false)
    expect(snapshotOf(again)).toEqual(before)
    // Appends go on at the right place, replays of what is there are skipped.
    expect(again.get('a')!.appendTransaction([change(12n, 1, 1)])).toBe(0)
    expect(again.get('a')!.appendTransaction([change(13n, 0, 9)])).toBe(1)
    again.advance(13n)
    await again.flush()
    await again.close()

    // The same store scanned (no heads file) reads the same.
    const scanned = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300 })
    expect(scanned.cleanOpened).toBe(IDS.length)
    const viaHeads = snapshotOf(scanned)
    await scanned.close()
    writeFileSync(`${dir}/${HEADS_FILE}`, 'gone')
    const full = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300 })
    expect(full.cleanOpened).toBe(0)
    expect(snapshotOf(full)).toEqual(viaHeads)
    expect(entries(full.get('a')!).length).toBe(entries(full.get('b')!).length + 1)
    await full.close()
  })

  it('is written once when closes overlap, and a later close waits for the first', async () => {
    const dir = await tempDirs.make('heads-two-closes')
    const s = await populated(dir)
    const before = snapshotOf(s)
    await Promise.all([s.close(), s.close()])
    await s.close()
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300 })
    expect(again.cleanOpened).toBe(IDS.length)
    expect(snapshotOf(again)).toEqual(before)
    await again.close()
  })

  it('is gone after a crash that follows a clean open: the next open scans and keeps only what was durable', async () => {
    const dir = await tempDirs.make('heads-crash')
    const s = await populated(dir)
    await s.close()

    // A clean open, then more work, then a power cut (nothing unsynced survives).
    const again = await openFileLogStore({ dir, fs: volatileFs(nodeFs), flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300 })
    expect(again.cleanOpened).toBe(IDS.length)
    for (let tx = 13n; tx <= 20n; tx++) {
      for (const id of IDS) again.get(id)!.appendTransaction([change(tx, 0, 1)])
      again.advance(tx)
      if (tx <= 16n) await again.flush()
    }
    const durable = again.durableLsn
    const kept = snapshotOf(again)
    powerCut(dir)

    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(false)
    const after = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300 })
    expect(after.cleanOpened).toBe(0)
    expect(after.durableLsn).toBe(durable)
    expect(snapshotOf(after)).toEqual(kept)
    await after.close()
  })

  it('leaves out a log closed in the middle of a transaction, and that log is cut back by its scan', async () => {
    const dir = await tempDirs.make('heads-open-txn')
    const s = await populated(dir)
    const before = snapshotOf(s)
    // Part of transaction 13 on `c` only; the store is never told 13 is complete.
    s.get('c')!.appendTransaction([change(13n, 0, 1)], { more: true })
    await s.close()

    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300 })
    expect(again.cleanOpened).toBe(IDS.length - 1)
    expect(snapshotOf(again)).toEqual(before)
    // The whole of 13 arrives again (the replay) and is taken.
    expect(again.get('c')!.appendTransaction([change(13n, 0, 1), change(13n, 1, 2)])).toBe(2)
    await again.close()
  })

  it('is ignored (and removed) when damaged, and every log is scanned', async () => {
    const dir = await tempDirs.make('heads-damaged')
    const s = await populated(dir)
    const before = snapshotOf(s)
    await s.close()
    const bytes = readFileSync(`${dir}/${HEADS_FILE}`)
    bytes[bytes.length >> 1]! ^= 0x10
    writeFileSync(`${dir}/${HEADS_FILE}`, bytes)

    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300 })
    expect(again.cleanOpened).toBe(0)
    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(false)
    expect(snapshotOf(again)).toEqual(before)
    await again.close()
  })

  it('scans a log whose files are not the sizes the close left, and sets it aside when damaged', async () => {
    const dir = await tempDirs.make('heads-sizes')
    const s = await populated(dir)
    const before = snapshotOf(s)
    await s.close()
    writeFileSync(`${shapeDir(dir, 'b')}/entries.idx`, 'not a sluice file')

    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300 })
    expect(again.cleanOpened).toBe(IDS.length - 1)
    expect(again.quarantined).toEqual(['b'])
    expect(readdirSync(`${dir}/quarantine`)).toHaveLength(1)
    const { b: _b, ...rest } = before
    expect(snapshotOf(again)).toEqual(rest)
    await again.close()
  })

  it('checks the files of a store of a thousand logs as it checks a few', async () => {
    const dir = await tempDirs.make('heads-many')
    const ids = Array.from({ length: 1_100 }, (_, i) => `log${i}`)
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    await Promise.all(ids.map((id) => makeShape(s, id, [row(1)])))
    ids.forEach((id, i) => s.get(id)!.appendTransaction([change(1n, 0, i)]))
    s.advance(1n)
    await s.flush()
    const before = Object.fromEntries(ids.map((id) => [id, entries(s.get(id)!)]))
    await s.close()
    // One log's index replaced by garbage (set aside), one log's data grown by a torn write (scanned, cut back).
    writeFileSync(`${shapeDir(dir, 'log7')}/entries.idx`, 'not a sluice file')
    appendFileSync(`${shapeDir(dir, 'log900')}/log.dat`, Buffer.alloc(100, 7))

    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    expect(again.cleanOpened).toBe(ids.length - 2)
    expect(again.quarantined).toEqual(['log7'])
    const { log7: _gone, ...rest } = before
    expect(Object.fromEntries(ids.filter((id) => id !== 'log7').map((id) => [id, entries(again.get(id)!)]))).toEqual(rest)
    expect(statSync(`${shapeDir(dir, 'log900')}/log.dat`).size).toBe(again.get('log900')!.appendedHead().dataEnd)
    await again.close()
  })

  it("with the addon's batched stat, opens every log of a clean close in one call and still catches a file truncated, grown or replaced", async () => {
    const load = loadSendfile()
    if (!load.available || load.sendfile.statFiles === undefined) throw new Error(`the addon's statFiles is not available: ${load.available ? 'an old build' : load.reason}`)
    const native = load.sendfile.statFiles
    const calls: number[] = []
    const statFiles: StatFiles = (base, dirs, names, out) => {
      calls.push(dirs.length)
      return native(base, dirs, names, out)
    }
    const dir = await tempDirs.make('heads-batched')
    const ids = Array.from({ length: 300 }, (_, i) => `log${i}`)
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    await Promise.all(ids.map((id) => makeShape(s, id, [row(1)])))
    ids.forEach((id, i) => s.get(id)!.appendTransaction([change(1n, 0, i)]))
    s.advance(1n)
    await s.flush()
    const before = Object.fromEntries(ids.map((id) => [id, entries(s.get(id)!)]))
    await s.close()

    const opened = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, statFiles })
    expect(calls).toEqual([ids.length])
    expect(opened.cleanOpened).toBe(ids.length)
    expect(Object.fromEntries(ids.map((id) => [id, entries(opened.get(id)!)]))).toEqual(before)
    // Appends after a batched open land in the files it found.
    opened.get('log5')!.appendTransaction([change(2n, 0, 99)])
    opened.advance(2n)
    await opened.flush()
    const log5 = entries(opened.get('log5')!)
    await opened.close()

    // Damage while the server is down: an index replaced by garbage, a data file grown by a torn write, one cut short.
    writeFileSync(`${shapeDir(dir, 'log7')}/entries.idx`, 'not a sluice file')
    appendFileSync(`${shapeDir(dir, 'log200')}/log.dat`, Buffer.alloc(100, 7))
    truncateSync(`${shapeDir(dir, 'log42')}/log.dat`, statSync(`${shapeDir(dir, 'log42')}/log.dat`).size - 3)
    calls.length = 0
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, statFiles })
    expect(calls).toEqual([ids.length])
    expect(again.cleanOpened).toBe(ids.length - 3)
    expect(again.quarantined).toContain('log7')
    expect(entries(again.get('log5')!)).toEqual(log5)
    expect(statSync(`${shapeDir(dir, 'log200')}/log.dat`).size).toBe(again.get('log200')!.appendedHead().dataEnd)
    await again.close()
  })

  it('falls back to a stat per file when the batched stat fails, and after a crash does not use it', async () => {
    const dir = await tempDirs.make('heads-batch-fails')
    const s = await populated(dir)
    const before = snapshotOf(s)
    await s.close()
    let calls = 0
    const failing: StatFiles = async () => {
      calls++
      throw Object.assign(new Error('no batch here'), { errno: 24 })
    }
    writeFileSync(`${shapeDir(dir, 'b')}/entries.idx`, 'not a sluice file')
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300, statFiles: failing })
    expect(calls).toBe(1)
    expect(again.cleanOpened).toBe(IDS.length - 1)
    expect(again.quarantined).toEqual(['b'])
    const { b: _b, ...rest } = before
    expect(snapshotOf(again)).toEqual(rest)
    // No clean close since (a crash): no heads file, so no batch either; every log is scanned.
    powerCut(dir)
    calls = 0
    const crashed = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300, statFiles: failing })
    expect(calls).toBe(0)
    expect(crashed.cleanOpened).toBe(0)
    await crashed.close()
  })
})

