/**
 * The heads file (heads-file.ts, heads-snapshots.ts): written at a clean close
 * and while the writer runs, it lets an open take each log's head from it
 * instead of scanning the log's files, for every log whose files are still the
 * ones it names and end where it says; a log appended to since is scanned from
 * its prefix on, any other whole (a damaged file, files of other sizes or
 * another inode, a log re-created under its id).
 */
import { appendFileSync, existsSync, readFileSync, readdirSync, renameSync, statSync, truncateSync, writeFileSync } from 'node:fs'
import { shapeDir } from '../src/file/shape-dirs.js'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it, vi } from 'vitest'
import { HEADS_FILE, type HeadsEntry, type HeadsLayout, OLD_HEADS_FILE, decodeHeads, encodeHeads } from '../src/file/heads-file.js'
import { nodeFs, openFileLogStore } from '../src/index.js'
import type { FileLogStore, FileStoreOptions, FsPort, StatFiles } from '../src/index.js'
import { change, makeShape, readAllEntries, row } from './contract-suite.js'
import { powerCut } from './fixtures/files.js'
import { volatileFs } from './fixtures/volatile-fs.js'
import { countedNativeStat } from './fixtures/native-stat.js'
import { countingFs } from './fixtures/counting-fs.js'

const tempDirs = useTempDir()

const entries = readAllEntries

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

/** Opens `dir` as these tests' stores are opened (timed flushes off, small chunks). */
function reopen(dir: string, options: Partial<FileStoreOptions> = {}): Promise<FileLogStore> {
  return openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300, ...options })
}

function snapshotOf(s: FileLogStore): Record<string, unknown[]> {
  return Object.fromEntries(IDS.filter((id) => s.get(id) !== undefined).map((id) => [id, entries(s.get(id)!)]))
}

describe('heads file', () => {
  it('encodes and decodes every head, and refuses damage, a watermark past the store\'s and trailing bytes', () => {
    const logs = [
      { id: 'x', meta: 'meta-x\u0000\u0080\u00ff', head: { entries: 7, dataEnd: 900, last: { tx: 42n, op: 3n }, closedChunks: 1, snapshotChunks: 1 }, chunks: [{ end: { tx: 0n, op: 0n }, endEntry: 3, endPos: 400, kind: 1 }], dataIno: 2 ** 40 + 7 },
      { id: 'y'.repeat(200), meta: '', head: { entries: 0, dataEnd: 16, last: { tx: 0n, op: 0n }, closedChunks: 0, snapshotChunks: 0 }, chunks: [], dataIno: 12 },
    ]
    const bytes = encodeHeads(42n, logs)
    const back = decodeHeads(bytes, 42n)
    expect(typeof back).toBe('object')
    expect([...(back as Map<string, unknown>).values()]).toEqual(logs)
    // Written at 42: true of a store whose watermark moved on since, not of one behind it.
    expect(typeof decodeHeads(bytes, 43n)).toBe('object')
    expect(decodeHeads(bytes, 41n)).toBe("written past the store's watermark")
    for (const at of [5, 20, 40, bytes.length - 1]) {
      const damaged = Buffer.from(bytes)
      damaged[at]! ^= 1
      expect(typeof decodeHeads(damaged, 42n)).toBe('string')
    }
    expect(typeof decodeHeads(bytes.subarray(0, bytes.length - 3), 42n)).toBe('string')
    expect(typeof decodeHeads(Buffer.concat([bytes, Buffer.alloc(1)]), 42n)).toBe('string')
  })

  it('checks every byte but the lineage, which is rewritten in place; a file of an earlier build (no lineage) is checked whole', () => {
    const logs = [{ id: 'x', meta: 'm', head: { entries: 2, dataEnd: 90, last: { tx: 4n, op: 1n }, closedChunks: 0, snapshotChunks: 0 }, chunks: [], dataIno: 5 }]
    const withLineage = encodeHeads(7n, logs, 0x1234_5678_9abc_def0n)
    expect(withLineage.readBigUInt64LE(8)).toBe(0x1234_5678_9abc_def0n)
    const patched = Buffer.from(withLineage)
    patched.writeBigUInt64LE(99n, 8)
    expect([...(decodeHeads(patched, 7n) as Map<string, HeadsEntry>).values()]).toEqual(logs)
    for (const at of [5, 7, 16, patched.length - 1]) {
      const damaged = Buffer.from(patched)
      damaged[at]! ^= 1
      expect(typeof decodeHeads(damaged, 7n)).toBe('string')
    }
    // Lineage 0: written before there were lineages, its check covers those bytes too.
    const earlier = encodeHeads(7n, logs)
    expect(typeof decodeHeads(earlier, 7n)).toBe('object')
    const forged = Buffer.from(earlier)
    forged.writeBigUInt64LE(99n, 8)
    expect(typeof decodeHeads(forged, 7n)).toBe('string')
  })

  it('decoded beside an earlier file, keeps the earlier entries of unchanged logs as they were, in order or not, and decodes the rest', () => {
    const entry = (id: string, entries: number, dataIno = 100): HeadsEntry => ({
      id,
      meta: `meta of ${id}`,
      head: { entries, dataEnd: 16 + entries * 10, last: { tx: BigInt(entries), op: 0n }, closedChunks: 1, snapshotChunks: 1 },
      chunks: [{ end: { tx: 0n, op: 1n }, endEntry: 1, endPos: 26, kind: 1 }],
      dataIno,
    })
    const earlierBytes = encodeHeads(9n, ['a', 'b', 'c', 'd', 'e', 'f'].map((id, i) => entry(id, i + 1)))
    const layout: HeadsLayout = { order: [], starts: [] }
    const earlierLogs = decodeHeads(earlierBytes, 9n, undefined, layout) as Map<string, HeadsEntry>
    const earlier = { logs: earlierLogs, bytes: earlierBytes, ...layout }
    // b grew, c went, g came between, e's files are others (another inode), f moved before a.
    const now = [entry('f', 6), entry('a', 1), entry('b', 9), entry('g', 1), entry('d', 4), entry('e', 5, 101)]
    const bytes = encodeHeads(10n, now)
    const plain = decodeHeads(bytes, 10n) as Map<string, HeadsEntry>
    const beside = decodeHeads(bytes, 10n, earlier) as Map<string, HeadsEntry>
    expect([...beside.values()]).toEqual([...plain.values()])
    expect([...beside.keys()]).toEqual(['f', 'a', 'b', 'g', 'd', 'e'])
    for (const id of ['a', 'd', 'f']) expect(beside.get(id)).toBe(earlierLogs.get(id))
    for (const id of ['b', 'e']) expect(beside.get(id)).not.toBe(earlierLogs.get(id))
    // Damage is found as without it.
    const damaged = Buffer.from(bytes)
    damaged[30]! ^= 1
    expect(typeof decodeHeads(damaged, 10n, earlier)).toBe('string')
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

  it('opens every log of a clean close without touching its files, keeps the file, and goes on as a scan would', async () => {
    const dir = await tempDirs.make('heads-clean')
    const s = await populated(dir)
    const before = snapshotOf(s)
    await s.close()
    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(true)

    const counting = countingFs()
    const again = await openFileLogStore({ dir, fs: counting.fs, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300 })
    expect(counting.opens()).toBe(0)
    expect(again.cleanOpened).toBe(IDS.length)
    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(true)
    expect(snapshotOf(again)).toEqual(before)
    // Appends go on at the right place, replays of what is there are skipped.
    expect(again.get('a')!.appendTransaction([change(12n, 1, 1)])).toBe(0)
    expect(again.get('a')!.appendTransaction([change(13n, 0, 9)])).toBe(1)
    again.advance(13n)
    await again.flush()
    await again.close()

    // The same store scanned (no heads file) reads the same.
    const scanned = await reopen(dir)
    expect(scanned.cleanOpened).toBe(IDS.length)
    const viaHeads = snapshotOf(scanned)
    await scanned.close()
    writeFileSync(`${dir}/${HEADS_FILE}`, 'gone')
    const full = await reopen(dir)
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
    const again = await reopen(dir)
    expect(again.cleanOpened).toBe(IDS.length)
    expect(snapshotOf(again)).toEqual(before)
    await again.close()
  })

  it('after a crash that follows a clean open, still vouches for the logs nothing was appended to; the others are scanned from its prefix and keep only what was durable', async () => {
    const dir = await tempDirs.make('heads-crash')
    const s = await populated(dir)
    await s.close()

    // A clean open, then more work on a, b and c only, then a power cut (nothing unsynced survives).
    const again = await openFileLogStore({ dir, fs: volatileFs(nodeFs), flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300, headsIntervalMs: 0 })
    expect(again.cleanOpened).toBe(IDS.length)
    for (let tx = 13n; tx <= 20n; tx++) {
      for (const id of ['a', 'b', 'c']) again.get(id)!.appendTransaction([change(tx, 0, 1)])
      again.advance(tx)
      if (tx <= 16n) await again.flush()
    }
    const durable = again.durableLsn
    const kept = snapshotOf(again)
    powerCut(dir)

    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(true)
    const metaReads: string[] = []
    const counting: FsPort = {
      ...nodeFs,
      readFileSync(path) {
        if (path.endsWith('/meta.bin')) metaReads.push(path)
        return nodeFs.readFileSync(path)
      },
    }
    const after = await openFileLogStore({ dir, fs: counting, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300 })
    expect(after.cleanOpened).toBe(2)
    // The three grown logs were scanned from the file's prefix on: a whole scan would read their meta.bin.
    expect(metaReads).toEqual([])
    expect(after.durableLsn).toBe(durable)
    expect(snapshotOf(after)).toEqual(kept)
    await after.close()
  })

  it('is rewritten while the writer runs, when something changed: after a crash only the logs appended to since are scanned', async () => {
    const dir = await tempDirs.make('heads-timed')
    const s = await reopen(dir, { headsIntervalMs: 20 })
    for (const id of IDS) await makeShape(s, id, [row(1), row(2)])
    IDS.forEach((id, i) => s.get(id)!.appendTransaction([change(1n, 0, i)]))
    s.advance(1n)
    await s.flush()
    // Written by the timer: nothing else writes it before a close.
    await vi.waitFor(() => expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(true), { timeout: 5_000 })
    // Past a write that may have been under way while the shapes were made.
    await new Promise((r) => setTimeout(r, 200))
    const first = statSync(`${dir}/${HEADS_FILE}`).mtimeMs
    // Nothing changes: nothing is written.
    await new Promise((r) => setTimeout(r, 150))
    expect(statSync(`${dir}/${HEADS_FILE}`).mtimeMs).toBe(first)
    s.get('e')!.appendTransaction([change(2n, 0, 7)])
    s.advance(2n)
    await s.flush()
    await vi.waitFor(() => expect(statSync(`${dir}/${HEADS_FILE}`).mtimeMs).not.toBe(first), { timeout: 5_000 })
    await s.close()

    // A crash of a writer that wrote the file itself (writeHeads, as the timer does), then appended to a.
    const again = await reopen(dir, { headsIntervalMs: 0 })
    again.get('a')!.appendTransaction([change(3n, 0, 1)])
    again.advance(3n)
    await again.flush()
    await again.writeHeads()
    again.get('b')!.appendTransaction([change(4n, 0, 1)])
    again.advance(4n)
    await again.flush()
    const kept = snapshotOf(again)
    powerCut(dir)
    const after = await reopen(dir)
    expect(after.cleanOpened).toBe(IDS.length - 1)
    expect(snapshotOf(after)).toEqual(kept)
    await after.close()
  })

  it('is not written again after an open that found every log as it says, until something changes; after an open that did not, it is', async () => {
    const dir = await tempDirs.make('heads-current')
    const s = await populated(dir)
    await s.close()
    const closed = statSync(`${dir}/${HEADS_FILE}`)

    const again = await reopen(dir, { headsIntervalMs: 20 })
    expect(again.cleanOpened).toBe(IDS.length)
    // Many timer turns: the file in place is still the close's (a write renames a new file over it).
    await new Promise((r) => setTimeout(r, 300))
    expect(statSync(`${dir}/${HEADS_FILE}`).ino).toBe(closed.ino)
    again.get('c')!.appendTransaction([change(13n, 0, 1)])
    again.advance(13n)
    await again.flush()
    await vi.waitFor(() => expect(statSync(`${dir}/${HEADS_FILE}`).ino).not.toBe(closed.ino), { timeout: 5_000 })
    await again.close()

    // A writer without timed writes appends to d and crashes: the next open scans d (it grew past the file).
    const crashed = await reopen(dir, { headsIntervalMs: 0 })
    crashed.get('d')!.appendTransaction([change(14n, 0, 1)])
    crashed.advance(14n)
    await crashed.flush()
    const kept = snapshotOf(crashed)
    powerCut(dir)
    const grown = statSync(`${dir}/${HEADS_FILE}`).ino
    const after = await reopen(dir, { headsIntervalMs: 20 })
    expect(after.cleanOpened).toBe(IDS.length - 1)
    expect(snapshotOf(after)).toEqual(kept)
    // Its timer writes the file again, with nothing appended.
    await vi.waitFor(() => expect(statSync(`${dir}/${HEADS_FILE}`).ino).not.toBe(grown), { timeout: 5_000 })
    await after.close()
  })

  it('finds a log the file does not name by listing only its bucket, whose link count tells it holds one log more', async () => {
    const dir = await tempDirs.make('heads-bucket-count')
    const s = await populated(dir)
    await s.close()
    const older = readFileSync(`${dir}/${HEADS_FILE}`)
    // A log made after the file was written (then the file is put back as a crash would have left it).
    const again = await reopen(dir)
    await makeShape(again, 'late', [row(5)])
    again.get('late')!.appendTransaction([change(20n, 0, 1)])
    again.advance(20n)
    await again.flush()
    const kept = snapshotOf(again)
    await again.close()
    writeFileSync(`${dir}/${HEADS_FILE}`, older)

    const counting = countingFs()
    const after = await reopen(dir, { fs: counting.fs })
    expect(after.cleanOpened).toBe(IDS.length)
    expect(snapshotOf(after)).toEqual(kept)
    // One bucket listed: the one the late log went into. The others hold just what the file names.
    expect(counting.lists()).toBe(1)
    await after.close()

    // With every log named, no bucket is listed at all.
    const named = countingFs()
    const clean = await reopen(dir, { fs: named.fs })
    expect(clean.cleanOpened).toBe(IDS.length + 1)
    expect(named.lists()).toBe(0)
    await clean.close()
  })

  it('lists every bucket where the file system gives no link count, and finds the same logs', async () => {
    const dir = await tempDirs.make('heads-no-nlink')
    const s = await populated(dir)
    await s.close()
    const older = readFileSync(`${dir}/${HEADS_FILE}`)
    const again = await reopen(dir)
    await makeShape(again, 'late', [row(5)])
    const kept = snapshotOf(again)
    await again.close()
    writeFileSync(`${dir}/${HEADS_FILE}`, older)

    const counting = countingFs(nodeFs, { nlink: false })
    const after = await reopen(dir, { fs: counting.fs })
    expect(after.cleanOpened).toBe(IDS.length)
    expect(snapshotOf(after)).toEqual(kept)
    const buckets = readdirSync(`${dir}/shapes`).length
    expect(counting.lists()).toBe(buckets)
    await after.close()
  })

  it('is taken back from where a write moved it aside when a crash came before the new one took its name', async () => {
    const dir = await tempDirs.make('heads-aside')
    const s = await populated(dir)
    const before = snapshotOf(s)
    await s.close()
    // A rewrite of the file: the new one replaces the old, whose removal happens off the event loop.
    const again = await reopen(dir, { headsIntervalMs: 0 })
    await again.writeHeads()
    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(true)
    expect(existsSync(`${dir}/${OLD_HEADS_FILE}`)).toBe(false)
    await again.close()
    // The state a crash between the write's two renames leaves: the old file aside, no new one in place.
    renameSync(`${dir}/${HEADS_FILE}`, `${dir}/${OLD_HEADS_FILE}`)
    const after = await reopen(dir)
    expect(after.cleanOpened).toBe(IDS.length)
    expect(snapshotOf(after)).toEqual(before)
    expect(existsSync(`${dir}/${OLD_HEADS_FILE}`)).toBe(false)
    await after.close()
  })

  it('does not vouch for a log deleted and made again under its id with files of the same sizes', async () => {
    const dir = await tempDirs.make('heads-recreated')
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, headsIntervalMs: 0 })
    await makeShape(s, 'a', [row(1)])
    await makeShape(s, 'c', [row(1), row(2)])
    await s.close()
    const sizes = (): number[] => ['log.dat', 'entries.idx', 'chunks.idx', 'meta.bin'].map((f) => statSync(`${shapeDir(dir, 'c')}/${f}`).size)
    const old = sizes()

    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, headsIntervalMs: 0 })
    expect(again.cleanOpened).toBe(2)
    await again.deleteShape('c')
    // Deleted alone, the file stays: it still vouches for a.
    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(true)
    // The same sizes, other rows: only the inode, which the system may hand out again, tells them apart.
    await makeShape(again, 'c', [row(3), row(4)])
    expect(sizes()).toEqual(old)
    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(false)
    const kept = snapshotOf(again)
    powerCut(dir)

    const after = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    expect(after.cleanOpened).toBe(0)
    expect(snapshotOf(after)).toEqual(kept)
    expect(JSON.stringify(snapshotOf(after).c)).toContain('"id":"3"')
    // A writer whose open found the file naming a log gone since treats that id the same way.
    await after.close()
    const reopened = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, headsIntervalMs: 0 })
    expect(reopened.cleanOpened).toBe(2)
    await reopened.deleteShape('c')
    powerCut(dir)
    const crashed = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, headsIntervalMs: 0 })
    expect(crashed.get('c')).toBeUndefined()
    await makeShape(crashed, 'c', [row(5), row(6)])
    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(false)
    await crashed.close()
  })

  it('leaves out a log closed in the middle of a transaction, and that log is cut back by its scan', async () => {
    const dir = await tempDirs.make('heads-open-txn')
    const s = await populated(dir)
    const before = snapshotOf(s)
    // Part of transaction 13 on `c` only; the store is never told 13 is complete.
    s.get('c')!.appendTransaction([change(13n, 0, 1)], { more: true })
    await s.close()

    const again = await reopen(dir)
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

    const again = await reopen(dir)
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

    const again = await reopen(dir)
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
    const { statFiles, calls } = countedNativeStat()
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

  it('falls back to a stat per file when the batched stat fails, and uses the file again after a crash', async () => {
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
    const again = await reopen(dir, { statFiles: failing })
    expect(calls).toBe(1)
    expect(again.cleanOpened).toBe(IDS.length - 1)
    expect(again.quarantined).toEqual(['b'])
    const { b: _b, ...rest } = before
    expect(snapshotOf(again)).toEqual(rest)
    // No clean close since (a crash): the file written at the last one still vouches for the logs.
    powerCut(dir)
    calls = 0
    const crashed = await reopen(dir, { statFiles: failing })
    expect(calls).toBe(1)
    expect(crashed.cleanOpened).toBe(IDS.length - 1)
    expect(snapshotOf(crashed)).toEqual(rest)
    await crashed.close()
  })
})

