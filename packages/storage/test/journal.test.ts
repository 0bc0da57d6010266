/**
 * The journal: replay after a power cut (fixtures/volatile-fs.ts drops every
 * write that was not synced), torn and damaged groups, tombstones, checkpoints,
 * a crash during replay, and a full disk under the journal. A "power cut" here
 * abandons the writer without closing it and opens the directory again with
 * plain node:fs, which sees only what was synced.
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, readlinkSync, writeFileSync } from 'node:fs'
import { parseOffset } from '@sluice/protocol'
import { createFaultyFs, useTempDir } from '@sluice/test-utils'
import type { FaultRule, FaultyFs } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { FlushError, nodeFs, openFileLogStore, openReadOnlyLogStore } from '../src/index.js'
import type { FileLogStore, FsPort, ShapeLog, StorageError } from '../src/index.js'
import { FILE_DATA, GROUP_HEADER_BYTES } from '../src/file/journal-format.js'
import { Journal, type JournalOwner } from '../src/file/journal.js'
import { decodeWatermark } from '../src/format.js'
import { body, change, makeShape, readAllEntries, row } from './contract-suite.js'
import { volatileFs } from './fixtures/volatile-fs.js'
import { until } from './fixtures/until.js'
import { powerCut } from './fixtures/files.js'

const tempDirs = useTempDir()

/** The lsn of every live entry, reading chunk by chunk as a client does. */
function lsnsOf(log: ShapeLog): string[] {
  return (readAllEntries(log) as Array<{ headers?: { lsn?: string } }>).flatMap((m) => (m.headers?.lsn === undefined ? [] : [m.headers.lsn]))
}

/** The watermark in the writer's notice for followers, as the disk has it. */
function liveLsn(dir: string): bigint | undefined {
  try {
    const w = decodeWatermark(readFileSync(`${dir}/watermark.live`))
    return typeof w === 'string' ? undefined : w.lsn
  } catch {
    return undefined
  }
}

/** Until no checkpoint runs for a few turns of the event loop (one that ends may start the next). */
async function checkpointsEnded(s: FileLogStore): Promise<void> {
  for (let quiet = 0; quiet < 3; ) {
    const running = s.journal?.running
    if (running === undefined) quiet++
    else quiet = 0
    await (running ?? new Promise((r) => setTimeout(r, 5)))
  }
}

function segments(dir: string): string[] {
  return readdirSync(`${dir}/journal`).filter((n) => n.endsWith('.jnl'))
}

/** Appends `rounds` transactions to every log (tx = 10 * round + 1), one log per id, flushing each round unless told not to. */
async function rounds(s: FileLogStore, ids: string[], from: number, count: number, flushEach = true): Promise<void> {
  for (let r = from; r < from + count; r++) {
    const tx = BigInt(10 * r + 1)
    ids.forEach((id, i) => s.get(id)!.appendTransaction([change(tx, 0, i), change(tx, 1, i + 1)]))
    s.advance(tx)
    if (flushEach) await s.flush()
  }
}

/** The same port without syncfs: checkpoints fall back to an fdatasync per file. */
function withoutSyncfs(port: FsPort): FsPort {
  const { syncFilesystem: _, ...rest } = port
  return rest
}

const expectedLsns = (count: number): string[] => Array.from({ length: count }, (_, r) => String(10 * r + 1)).flatMap((l) => [l, l])

describe('journal', () => {
  it('replays every flush since the last checkpoint after a power cut, for many logs', async () => {
    const dir = await tempDirs.make('journal-power')
    const s = await openFileLogStore({ dir, fs: volatileFs(nodeFs), flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 512 })
    const ids = Array.from({ length: 40 }, (_, i) => `l${i}`)
    for (const id of ids) await makeShape(s, id, [row(1)])
    await rounds(s, ids, 0, 6)
    const w = s.durableLsn
    powerCut(dir)
    // The logs' own files were never synced after their creation: only the journal has the rest.
    expect(segments(dir).length).toBeGreaterThan(0)

    // A follower that starts before the writer recovers sees what the watermark it
    // finds covers, whole: the writer's unsynced notice (watermark.live) may be lost,
    // so that can be an older one, but never one past what survived.
    const ro = openReadOnlyLogStore({ dir })
    const seen = ro.durableLsn
    expect(seen).toBeLessThanOrEqual(w)
    for (const id of ids) expect(lsnsOf(ro.get(id)!)).toEqual(expectedLsns(6).filter((l) => BigInt(l) <= seen))

    // The journal carries the watermark: replay brings back the last flush's, and
    // publishes it to the file before deleting the segments.
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 512 })
    expect(segments(dir)).toEqual([])
    expect(again.durableLsn).toBe(w)
    for (const id of ids) expect(lsnsOf(again.get(id)!)).toEqual(expectedLsns(6))
    expect(ro.durableLsn).toBe(w)
    for (const id of ids) expect(lsnsOf(ro.get(id)!)).toEqual(expectedLsns(6))
    await ro.close()
    await rounds(again, ids, 6, 1)
    await again.close()
    // A clean close checkpoints: nothing left to replay.
    expect(segments(dir)).toEqual([])
  })

  it('ignores a torn group at the tail: its flush failed and never published its watermark', async () => {
    const dir = await tempDirs.make('journal-torn')
    const faulty = createFaultyFs<FsPort>(volatileFs(nodeFs))
    const s = await openFileLogStore({ dir, fs: faulty.fs, flushIntervalMs: 60_000, flushWhenIdle: false })
    const ids = ['a', 'b', 'c']
    for (const id of ids) await makeShape(s, id, [])
    await rounds(s, ids, 0, 3)
    const w = s.durableLsn
    faulty.rules.tornWrite({ bytes: 'half', code: 'EIO', match: (args) => readdirLink(args[0]).endsWith('.jnl') })
    ids.forEach((id, i) => s.get(id)!.appendTransaction([change(31n, 0, i)]))
    s.advance(31n)
    const err = await s.flush().catch((e: unknown) => e)
    expect(err).toBeInstanceOf(FlushError)
    expect([...(err as FlushError).rolledBack].sort()).toEqual(ids)
    expect(s.durableLsn).toBe(w)
    powerCut(dir)

    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    expect(again.durableLsn).toBe(w)
    for (const id of ids) expect(lsnsOf(again.get(id)!)).toEqual(expectedLsns(3))
    await again.close()
  })

  it('stops replay at a damaged group and leaves every log an untorn prefix', async () => {
    const dir = await tempDirs.make('journal-damaged')
    // Plain fs (a process crash, not a power cut): the page cache already holds every log's bytes.
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    const ids = ['a', 'b']
    for (const id of ids) await makeShape(s, id, [])
    await rounds(s, ids, 0, 4)
    const w = s.durableLsn
    powerCut(dir)
    const [seg] = segments(dir)
    const path = `${dir}/journal/${seg}`
    const bytes = readFileSync(path)
    // Flip a byte inside the second group's records.
    const first = bytes.readUInt32LE(16) + GROUP_HEADER_BYTES + 4
    bytes[16 + first + GROUP_HEADER_BYTES + 5]! ^= 0xff
    writeFileSync(path, bytes)

    // The watermark lives in the groups, so replay stops at the first group's:
    // every log is cut back to it, whole.
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    expect(again.quarantined).toEqual([])
    expect(w).toBe(31n)
    expect(again.durableLsn).toBe(1n)
    for (const id of ids) expect(lsnsOf(again.get(id)!)).toEqual(expectedLsns(1))
    await again.close()
  })

  it('skips the records of a deleted log when the same id is created again', async () => {
    const dir = await tempDirs.make('journal-tombstone')
    const s = await openFileLogStore({ dir, fs: volatileFs(nodeFs), flushIntervalMs: 60_000, flushWhenIdle: false })
    await makeShape(s, 'x', [row(1), row(2), row(3)])
    s.get('x')!.appendTransaction([change(5n, 0, 1), change(5n, 1, 2), change(5n, 2, 3)])
    s.advance(5n)
    await s.flush()
    await s.deleteShape('x')
    const x = await makeShape(s, 'x', [row(9)])
    x.appendTransaction([change(7n, 0, 7)])
    s.advance(7n)
    await s.flush()
    // The writer syncs its notice for followers in the background: once that is
    // done, a power cut leaves the follower the watermark, the new log's files
    // only its snapshot (synced once, when it finished), and its transaction in
    // the journal after the old log's tombstone.
    await until(() => liveLsn(dir) === 7n)
    powerCut(dir)

    const ro = openReadOnlyLogStore({ dir })
    expect(lsnsOf(ro.get('x')!)).toEqual(['7'])
    await ro.close()
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    expect(again.quarantined).toEqual([])
    expect(body(again.get('x')!.read(parseOffset('-1')))).toHaveLength(2) // row 9, snapshot-end
    expect(lsnsOf(again.get('x')!)).toEqual(['7'])
    await again.close()
  })

  /** A store of 1 KiB journal segments (a checkpoint every few flushes) on a faulty volatile port, its errors collected. */
  async function checkpointingStore(name: string, port: FsPort): Promise<{ dir: string; faulty: FaultyFs<FsPort>; s: FileLogStore; errors: StorageError[] }> {
    const dir = await tempDirs.make(name)
    const faulty = createFaultyFs<FsPort>(port)
    const errors: StorageError[] = []
    const s = await openFileLogStore({ dir, fs: faulty.fs, flushIntervalMs: 60_000, flushWhenIdle: false, journalSegmentBytes: 1024 })
    s.onError((e) => errors.push(e))
    return { dir, faulty, s, errors }
  }

  /**
   * A power cut now loses nothing: the reopened store has the watermark and `count` rounds in every log.
   * The abandoned writer lives on in this process, so first its checkpoints (one may start another) must end:
   * a real power cut stops them, this one would race them for the watermark file.
   */
  async function survivesPowerCut(dir: string, s: FileLogStore, ids: string[], count: number): Promise<void> {
    await checkpointsEnded(s)
    const w = s.durableLsn
    powerCut(dir)
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    expect(again.durableLsn).toBe(w)
    for (const id of ids) expect(lsnsOf(again.get(id)!)).toEqual(expectedLsns(count))
    await again.close()
  }

  // A sync that fails may have cost pages the kernel will not report again, so
  // the store stops checkpointing and keeps the journal for the next open.
  const logDatFails = (f: FaultyFs<FsPort>): FaultRule => f.rules.failAlways('fdatasync', { code: 'EIO', match: (args) => readdirLink(args[0]).endsWith('log.dat') })
  const syncPaths: Array<{ name: string; port: () => FsPort; fail: (f: FaultyFs<FsPort>) => FaultRule[] }> = [
    {
      // A lost page of a log file fails the syncfs and that file's own fdatasync.
      name: 'one syncfs per checkpoint',
      port: () => volatileFs(nodeFs),
      fail: (f) => [f.rules.failAlways('syncFilesystem', { code: 'EIO' }), logDatFails(f)],
    },
    {
      name: 'an fdatasync per file (no syncfs in the port)',
      port: () => withoutSyncfs(volatileFs(nodeFs)),
      fail: (f) => [logDatFails(f)],
    },
  ]
  for (const path of syncPaths) {
    it(`checkpoints closed segments in the background, and keeps the journal after a checkpoint sync fails: ${path.name}`, async () => {
      const { dir, faulty, s, errors } = await checkpointingStore('journal-checkpoint', path.port())
      const ids = ['a', 'b', 'c', 'd']
      for (const id of ids) await makeShape(s, id, [])
      await rounds(s, ids, 0, 3)
      await s.journal!.running
      expect(segments(dir).length).toBeLessThanOrEqual(2)
      expect(errors).toEqual([])
      expect(s.checkpointStats.syncfs).toBe(path.port().syncFilesystem !== undefined)

      const rules = path.fail(faulty)
      await rounds(s, ids, 3, 3)
      await s.journal!.running
      for (const rule of rules) rule.remove()
      expect(errors.length).toBe(1)
      expect(errors[0]!.code).toBe('io_error')
      expect(errors[0]!.message).toMatch(/replays it over the logs' files at the next open/)
      // The disk answers again, and still no checkpoint deletes a segment.
      const held = segments(dir).length
      await rounds(s, ids, 6, 3)
      await s.journal!.running
      expect(segments(dir).length).toBeGreaterThan(held)
      expect(errors.length).toBe(1)
      await survivesPowerCut(dir, s, ids, 9)
    })
  }

  it('a syncfs error that no log file of the store reports, or a sync that could not start, does not stop checkpoints', async () => {
    const { dir, faulty, s, errors } = await checkpointingStore('journal-syncfs-other', volatileFs(nodeFs))
    const ids = ['a', 'b', 'c']
    for (const id of ids) await makeShape(s, id, [])
    // Another program's file failed: every log file of the store syncs fine on its own.
    const other = faulty.rules.failAlways('syncFilesystem', { code: 'EIO' })
    await rounds(s, ids, 0, 3)
    await s.journal!.running
    expect(other.hits).toBeGreaterThan(0)
    expect(errors).toEqual([])
    other.remove()
    expect(segments(dir).length).toBeLessThanOrEqual(2)
    // The child could not start: that checkpoint fails, the next one runs.
    faulty.rules.failNext('syncFilesystem', { code: 'EAGAIN' })
    await rounds(s, ids, 3, 3)
    await s.journal!.running
    expect(errors.map((e) => e.code)).toEqual(['io_error'])
    expect(errors[0]!.message).not.toMatch(/replays it/)
    await rounds(s, ids, 6, 3)
    await s.journal!.running
    expect(segments(dir).length).toBeLessThanOrEqual(2)
    expect(s.checkpointStats.syncfs).toBe(true)
    await survivesPowerCut(dir, s, ids, 9)
  })

  it('close syncs file by file when its syncfs cannot start, and leaves nothing to replay', async () => {
    const dir = await tempDirs.make('journal-close-nospawn')
    const faulty = createFaultyFs<FsPort>(volatileFs(nodeFs))
    const s = await openFileLogStore({ dir, fs: faulty.fs, flushIntervalMs: 60_000, flushWhenIdle: false })
    const errors: StorageError[] = []
    s.onError((e) => errors.push(e))
    const ids = ['a', 'b', 'c']
    for (const id of ids) await makeShape(s, id, [])
    await rounds(s, ids, 0, 4)
    const w = s.durableLsn
    // The fork for `sync -f` fails (memory pressure): the close's checkpoint must not.
    const noSpawn = faulty.rules.failAlways('syncFilesystem', { code: 'ENOMEM' })
    // A rule that never fails, to count the files synced one by one.
    const synced = new Set<string>()
    faulty.rules.failAlways('fdatasync', {
      code: 'EIO',
      match: (args) => {
        synced.add(readdirLink(args[0]))
        return false
      },
    })
    await s.close()
    expect(noSpawn.hits).toBe(1)
    expect([...synced].filter((f) => f.endsWith('log.dat'))).toHaveLength(ids.length)
    expect(s.checkpointStats.syncfs).toBe(false)
    expect(errors).toEqual([])
    expect(segments(dir)).toEqual([])
    // Only synced bytes survive the cut: the per-file syncs made every log durable.
    powerCut(dir)
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    expect(again.durableLsn).toBe(w)
    for (const id of ids) expect(lsnsOf(again.get(id)!)).toEqual(expectedLsns(4))
    await again.close()
  })

  it('close after a failed checkpoint sync reports it and leaves the journal to replay', async () => {
    const dir = await tempDirs.make('journal-close-broken')
    const faulty = createFaultyFs<FsPort>(volatileFs(nodeFs))
    const s = await openFileLogStore({ dir, fs: faulty.fs, flushIntervalMs: 60_000, flushWhenIdle: false, journalSegmentBytes: 1024 })
    s.onError(() => undefined)
    const ids = ['a', 'b']
    for (const id of ids) await makeShape(s, id, [])
    faulty.rules.failNext('syncFilesystem', { code: 'EIO' })
    faulty.rules.failNext('fdatasync', { code: 'EIO', match: (args) => readdirLink(args[0]).endsWith('log.dat') })
    await rounds(s, ids, 0, 4)
    await s.journal!.running
    await expect(s.close()).rejects.toMatchObject({ code: 'io_error' })
    expect(segments(dir).length).toBeGreaterThan(0)
    expect(existsSync(`${dir}/heads`)).toBe(false)
    powerCut(dir)

    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    for (const id of ids) expect(lsnsOf(again.get(id)!)).toEqual(expectedLsns(4))
    await again.close()
  })

  it('reserves the tail budget at open, so tails within it never grow the arena', async () => {
    const MiB = 1024 * 1024
    const dir = await tempDirs.make('journal-reserve')
    // 96 MiB: past the 64 MiB floor. Segments close only on age here, so the tails stay until close.
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, tailBudgetBytes: 96 * MiB, prefaultTails: true })
    expect(s.stats().tailMemoryBytes).toBe(96 * MiB)
    const ids = Array.from({ length: 200 }, (_, i) => `log${i}`)
    for (const id of ids) await makeShape(s, id, [])
    // Below the 64 KiB at which a log writes its tail back on its own.
    const big = new Uint8Array(15_000).fill(0x61)
    for (let r = 0; r < 4; r++) {
      const tx = BigInt(10 * r + 1)
      for (const id of ids) s.get(id)!.appendLines(tx, [0], [big], 1)
      s.advance(tx)
      await s.flush()
    }
    // 200 logs x 60 KB of tails (their blocks rounded up to powers of two): all in the reserve.
    expect(s.stats().tailBytes).toBeGreaterThan(10 * MiB)
    expect(s.stats().tailMemoryBytes).toBe(96 * MiB)
    await s.close()
    // A small budget still gets the 64 MiB floor; an explicit reserve wins over both.
    const small = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, tailBudgetBytes: 8 * MiB })
    expect(small.stats().tailMemoryBytes).toBe(64 * MiB)
    await small.close()
    const explicit = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, tailReserveBytes: 2 * MiB })
    expect(explicit.stats().tailMemoryBytes).toBe(2 * MiB)
    // The snapshot's end and the four rounds.
    for (const id of ids) expect(explicit.get(id)!.head().entryCount).toBe(5)
    await explicit.close()
  })

  describe('tail budget', () => {
    const BUDGET = 1024 * 1024
    /** 300 logs in a store whose segments only the tail budget closes. */
    async function budgetStore(name: string): Promise<{ dir: string; faulty: FaultyFs<FsPort>; s: FileLogStore; ids: string[]; errors: StorageError[]; held: boolean[] }> {
      const dir = await tempDirs.make(name)
      const faulty = createFaultyFs<FsPort>(volatileFs(nodeFs))
      const s = await openFileLogStore({ dir, fs: faulty.fs, flushIntervalMs: 60_000, flushWhenIdle: false, tailReserveBytes: 1024 * 1024, tailBudgetBytes: BUDGET })
      const errors: StorageError[] = []
      const held: boolean[] = []
      s.onError((e) => errors.push(e))
      s.onPressure((h) => held.push(h))
      const ids = Array.from({ length: 300 }, (_, i) => `log${i}`)
      for (const id of ids) await makeShape(s, id, [])
      return { dir, faulty, s, ids, errors, held }
    }
    /** Rounds appended without a flush until the tails pass the budget, then one flush: how many rounds that took. */
    async function burstPastBudget(s: FileLogStore, ids: string[], from: number): Promise<number> {
      let r = from
      while (s.stats().tailBytes <= BUDGET) await rounds(s, ids, r++, 1, false)
      await s.flush()
      return r - from
    }

    it('past half the budget a checkpoint runs early; past all of it the writer is held back until the tails are under half', async () => {
      const { dir, s, ids, errors, held } = await budgetStore('journal-tail-budget')
      // Below half: nothing happens (segments are 64 MiB by default, so only the budget closes one).
      await rounds(s, ids, 0, 2)
      expect(s.stats().tailBytes).toBeLessThan(BUDGET / 2)
      expect(s.stats()).toMatchObject({ journalSegments: 1, underPressure: false, pressures: 0 })
      expect(s.stats().checkpoint.logs).toBe(0)

      const burst = await burstPastBudget(s, ids, 2)
      expect(s.underPressure).toBe(true)
      expect(held).toEqual([true])
      // A held-back writer appends nothing: the checkpoint alone must bring the tails down and release it.
      await until(() => !s.underPressure)
      expect(held).toEqual([true, false])
      const after = s.stats()
      expect(after.tailBytes).toBeLessThanOrEqual(BUDGET / 2)
      expect(after).toMatchObject({ underPressure: false, pressures: 1 })
      expect(after.checkpoint.logs).toBe(ids.length)
      // The sealed segment is gone; the next commit starts another.
      expect(segments(dir)).toEqual([])
      expect(errors).toEqual([])

      // A writer that does not hold back: its appends are still taken, checkpoints go on, and once it stops they bring the tails under half.
      const end = 2 + burst * 3
      for (let r = 2 + burst; r < end; r++) await rounds(s, ids, r, 1)
      await until(() => !s.underPressure && !s.stats().checkpoint.running && s.stats().tailBytes <= BUDGET / 2)
      expect(held.at(-1)).toBe(false)
      expect(errors).toEqual([])
      await survivesPowerCut(dir, s, ids, end)
    })

    it('a throwing pressure listener is reported, not a failed flush; close releases a held writer', async () => {
      const { dir, faulty, s, ids, errors, held } = await budgetStore('journal-tail-budget-close')
      s.onPressure(() => {
        throw new Error('listener bug')
      })
      // No checkpoint can finish (the sync cannot start), so the writer stays held until close.
      const noSync = faulty.rules.failAlways('syncFilesystem', { code: 'EAGAIN' })
      // The flush that passes the budget commits and publishes whatever the listener does.
      const burst = await burstPastBudget(s, ids, 0)
      expect(s.durableLsn).toBe(BigInt(10 * (burst - 1) + 1))
      expect(errors.some((e) => e.message.includes('listener bug'))).toBe(true)
      await until(() => noSync.hits > 0)
      expect(held).toEqual([true])
      expect(s.underPressure).toBe(true)
      noSync.remove()
      await s.close()
      expect(held.at(-1)).toBe(false)
      expect(s.underPressure).toBe(false)
      const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
      for (const id of ids) expect(lsnsOf(again.get(id)!)).toEqual(expectedLsns(burst))
      await again.close()
    })

    it('a checkpoint that fails while the writer is held back is tried again until one succeeds, and the hold ends', async () => {
      const { dir, faulty, s, ids, errors, held } = await budgetStore('journal-tail-budget-full')
      // While the writer is held back a checkpoint writes back on the thread pool (write): the disk is full for the first few.
      const full = faulty.rules.failNext('write', { code: 'ENOSPC', match: (args) => readdirLink(args[0]).endsWith('log.dat'), times: 3 })
      const burst = await burstPastBudget(s, ids, 0)
      expect(s.underPressure).toBe(true)
      await until(() => !s.underPressure)
      expect(full.hits).toBe(3)
      expect(errors.length).toBeGreaterThan(0)
      expect(errors.every((e) => e.code === 'disk_full')).toBe(true)
      expect(held).toEqual([true, false])
      // The hold may end before the retry has deleted the segment: the failed checkpoint wrote back the other logs' tails.
      await until(() => segments(dir).length === 0 && !s.stats().checkpoint.running)
      expect(s.stats().checkpoint.writtenBack).toBe(ids.length)
      await survivesPowerCut(dir, s, ids, burst)
    })

    it('after a failed checkpoint sync the writer is not held back: no checkpoint will run again', async () => {
      const { dir, faulty, s, ids, errors, held } = await budgetStore('journal-tail-budget-broken')
      faulty.rules.failAlways('syncFilesystem', { code: 'EIO' })
      faulty.rules.failAlways('fdatasync', { code: 'EIO', match: (args) => readdirLink(args[0]).endsWith('log.dat') })
      const burst = await burstPastBudget(s, ids, 0)
      await until(() => errors.length > 0)
      await until(() => !s.underPressure)
      expect(held).toEqual([true, false])
      expect(errors[0]!.message).toMatch(/replays it over the logs' files at the next open/)
      // Past the budget again: no hold, since nothing would ever release it.
      await rounds(s, ids, burst, 1)
      expect(s.underPressure).toBe(false)
      faulty.rules.clear()
      const w = s.durableLsn
      powerCut(dir)
      const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
      expect(again.durableLsn).toBe(w)
      for (const id of ids) expect(lsnsOf(again.get(id)!)).toEqual(expectedLsns(burst + 1))
      await again.close()
    })
  })

  it('replays again after a crash during replay', async () => {
    const dir = await tempDirs.make('journal-replay-crash')
    const s = await openFileLogStore({ dir, fs: volatileFs(nodeFs), flushIntervalMs: 60_000, flushWhenIdle: false })
    const ids = ['a', 'b', 'c']
    for (const id of ids) await makeShape(s, id, [])
    await rounds(s, ids, 0, 4)
    const w = s.durableLsn
    powerCut(dir)

    // The replay dies after a few of its writes (nothing it wrote was synced).
    const faulty = createFaultyFs<FsPort>(volatileFs(nodeFs))
    faulty.rules.failNext('writeSync', { code: 'EIO', match: (args) => readdirLink(args[0]).includes('/shapes/'), times: 1 })
    await expect(openFileLogStore({ dir, fs: faulty.fs, flushIntervalMs: 60_000, flushWhenIdle: false })).rejects.toMatchObject({ code: 'io_error' })
    powerCut(dir)
    expect(segments(dir).length).toBeGreaterThan(0)

    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    expect(again.durableLsn).toBe(w)
    for (const id of ids) expect(lsnsOf(again.get(id)!)).toEqual(expectedLsns(4))
    await again.close()
  })

  it('a full disk under the journal fails the flush for every log in it, holds the watermark, and clears', async () => {
    const dir = await tempDirs.make('journal-enospc')
    const faulty = createFaultyFs<FsPort>(nodeFs)
    const s = await openFileLogStore({ dir, fs: faulty.fs, flushIntervalMs: 60_000, flushWhenIdle: false })
    const ids = ['a', 'b']
    for (const id of ids) await makeShape(s, id, [])
    await rounds(s, ids, 0, 2)
    const w = s.durableLsn
    faulty.rules.failNext('writeSync', { code: 'ENOSPC', match: (args) => readdirLink(args[0]).endsWith('.jnl') })
    ids.forEach((id, i) => s.get(id)!.appendTransaction([change(21n, 0, i), change(21n, 1, i + 1)]))
    s.advance(21n)
    const err = (await s.flush().catch((e: unknown) => e)) as FlushError
    expect(err).toBeInstanceOf(FlushError)
    expect(err.code).toBe('disk_full')
    expect(err.durableLsn).toBe(w)
    expect([...err.rolledBack].sort()).toEqual(ids)
    for (const id of ids) expect(s.get(id)!.appendedHead().last).toEqual(parseOffset('11_1'))

    // The caller replays from the watermark; the next group goes into a fresh segment.
    ids.forEach((id, i) => s.get(id)!.appendTransaction([change(21n, 0, i), change(21n, 1, i + 1)]))
    s.advance(21n)
    expect((await s.flush()).durableLsn).toBe(21n)
    // The failed segment was closed; its checkpoint runs in this process (a real crash would stop it).
    await s.journal!.running
    powerCut(dir)
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    for (const id of ids) expect(lsnsOf(again.get(id)!)).toEqual(expectedLsns(3))
    await again.close()
  })
})

/** The path behind a descriptor argument ('' for anything else). */
function readdirLink(fd: unknown): string {
  try {
    return readlinkSync(`/proc/self/fd/${String(fd)}`)
  } catch {
    return ''
  }
}

describe('journal segment closing', () => {
  const ID = 'a'
  const ONE = new Uint8Array([1])
  /** A journal of 1 MiB segments: the per-owner minimum is 1 MiB / 32768 = 32 bytes; a one-byte write record takes 17. */
  /** Owner n, the same object each time (the journal lists an owner once per group and segment by marking it). */
  interface Owner extends JournalOwner {
    readonly n: number
  }
  const pool: Owner[] = []
  const owner = (n: number): Owner => (pool[n] ??= { n, journalGroup: 0, journalSegment: 0 })
  async function journalIn(name: string, segmentAgeMs = 60_000): Promise<Journal<Owner>> {
    const dir = await tempDirs.make(name)
    mkdirSync(`${dir}/journal`)
    return new Journal<Owner>(nodeFs, dir, 1, { segmentBytes: 1024 * 1024, segmentAgeMs })
  }
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
  async function group(j: Journal<Owner>, from: number, owners: number): Promise<void> {
    for (let o = from; o < from + owners; o++) j.write(owner(o), ID, FILE_DATA, o, ONE, 0, 1)
    await j.commit()
  }

  it('seal closes the current segment at once, never under a commit or with nothing in it, and the next checkpoint takes it', async () => {
    const j = await journalIn('journal-seal')
    const synced: number[] = []
    const steps = { sync: async (o: Owner) => void synced.push(o.n), concurrency: 1, keep: async () => undefined }
    expect(j.seal()).toBe(false) // no segment yet
    await group(j, 0, 3)
    const writing = group(j, 3, 1)
    expect(j.committing).toBe(true)
    expect(j.seal()).toBe(false)
    await writing
    expect(j.closedSegments).toBe(0)
    expect(j.seal()).toBe(true)
    expect(j.closedSegments).toBe(1)
    expect(j.seal()).toBe(false) // sealed already
    await group(j, 10, 2) // goes into a new segment
    expect(j.segmentCount).toBe(2)
    await j.checkpoint(false, steps)
    expect(synced.sort((a, b) => a - b)).toEqual([0, 1, 2, 3])
    expect(j.segmentCount).toBe(1)
    // A sealed last segment: a checkpoint takes it too, and the next commit starts another.
    expect(j.seal()).toBe(true)
    await j.checkpoint(false, steps)
    expect(synced.slice(4).sort((a, b) => a - b)).toEqual([10, 11])
    expect(j.segmentCount).toBe(0)
    await group(j, 0, 1)
    expect(j.segmentCount).toBe(1)
    j.close()
  })

  it('lists each owner of a group in the segment the group goes to, though the open one was sealed while the group was built', async () => {
    const j = await journalIn('journal-listed-as-written')
    const synced: number[] = []
    const steps = { sync: async (o: Owner) => void synced.push(o.n), concurrency: 1, keep: async () => undefined }
    await group(j, 0, 2)
    // Owner 5 writes while segment 1 is open (listed there as it writes); 6 after the seal (no open segment).
    j.write(owner(5), ID, FILE_DATA, 0, ONE, 0, 1)
    expect(j.seal()).toBe(true)
    j.write(owner(6), ID, FILE_DATA, 0, ONE, 0, 1)
    // A write during a commit belongs to the next group, listed in the segment the commit writes to.
    const writing = j.commit()
    j.write(owner(7), ID, FILE_DATA, 0, ONE, 0, 1)
    await writing
    await j.commit()
    expect(j.segmentCount).toBe(2)
    await j.checkpoint(false, steps)
    // Segment 1 holds only the records of 0 and 1; naming 5 too costs a write-back, nothing else.
    expect(synced.sort((a, b) => a - b)).toEqual([0, 1, 5])
    synced.length = 0
    expect(j.seal()).toBe(true)
    await j.checkpoint(false, steps)
    expect(synced.sort((a, b) => a - b)).toEqual([5, 6, 7])
    j.close()
  })

  it('lists an owner once per group and once per segment, however often it writes', async () => {
    const j = await journalIn('journal-owner-marks')
    for (let i = 0; i < 5; i++) j.write(owner(1), ID, FILE_DATA, i, ONE, 0, 1)
    j.truncate(owner(1), ID, FILE_DATA, 2)
    j.write(owner(2), ID, FILE_DATA, 0, ONE, 0, 1)
    expect((await j.commit()).map((o) => o.n)).toEqual([1, 2])
    j.write(owner(2), ID, FILE_DATA, 1, ONE, 0, 1)
    j.write(owner(3), ID, FILE_DATA, 0, ONE, 0, 1)
    expect((await j.commit()).map((o) => o.n)).toEqual([2, 3])
    expect(j.seal()).toBe(true)
    // The next segment lists its owners anew, those of the sealed one included.
    await group(j, 1, 1)
    const synced: number[] = []
    await j.checkpoint(true, { sync: async (o: Owner) => void synced.push(o.n), concurrency: 1, keep: async () => undefined })
    expect(synced.sort((a, b) => a - b)).toEqual([1, 2, 3])
    expect(j.segmentCount).toBe(0)
    j.close()
  })

  it('closes a segment of few owners at its size', async () => {
    const j = await journalIn('journal-close-few')
    for (let i = 0; i < 70; i++) await group(j, 0, 1000) // 17 KB a group
    expect(j.segmentCount).toBe(2)
    j.close()
  })

  it('keeps a segment naming many owners open until it holds the minimum per owner', async () => {
    const j = await journalIn('journal-close-many')
    await group(j, 0, 70_000) // 1.19 MB: past the size, 17 bytes per owner
    await group(j, 0, 1)
    expect(j.segmentCount).toBe(1)
    await group(j, 0, 70_000) // 34 bytes per owner
    await group(j, 0, 1)
    expect(j.segmentCount).toBe(2)
    j.close()
  })

  it('closes at four times the size whatever it holds per owner', async () => {
    const j = await journalIn('journal-close-cap')
    let owners = 0
    while (owners < 300_000 && j.segmentCount <= 1) {
      await group(j, owners, 20_000)
      owners += 20_000
    }
    // 17 bytes for each owner: four times 1 MiB after about 247k owners.
    expect(j.segmentCount).toBe(2)
    expect(owners).toBeGreaterThan(240_000)
    j.close()
  })

  it('closes an old segment when it holds the minimum per owner, and at ten times the age in any case', async () => {
    const few = await journalIn('journal-age-few', 200)
    for (let i = 0; i < 3; i++) await group(few, 0, 10) // 51 bytes per owner
    await sleep(250)
    await group(few, 0, 1)
    expect(few.segmentCount).toBe(2)
    few.close()

    const many = await journalIn('journal-age-many', 200)
    await group(many, 0, 50_000) // 17 bytes per owner
    await sleep(250)
    await group(many, 0, 1)
    expect(many.segmentCount).toBe(1)
    await sleep(1800)
    await group(many, 0, 1)
    expect(many.segmentCount).toBe(2)
    many.close()
  })

  it('a shape deleted while a commit is being written keeps its tombstone for the next group', async () => {
    const dir = await tempDirs.make('journal-tombstone-race')
    let gate: Promise<void> | undefined
    let open = (): void => {}
    const gated: FsPort = {
      ...nodeFs,
      async fdatasync(fd) {
        if (gate && readlinkSync(`/proc/self/fd/${fd}`).endsWith('.jnl')) await gate
        return nodeFs.fdatasync(fd)
      },
    }
    const s = await openFileLogStore({ dir, fs: gated, flushIntervalMs: 60_000, flushWhenIdle: false })
    await makeShape(s, 'a', [])
    await makeShape(s, 'b', [])
    gate = new Promise((r) => (open = r))
    s.get('a')!.appendTransaction([change(5n, 0, 1)])
    s.advance(5n)
    const flushing = s.flush()
    await until(() => s.journal!.committing)
    await s.deleteShape('b')
    gate = undefined
    open()
    await flushing
    // The group written was recorded before the deletion: its tombstone waits for the next.
    expect(s.journal!.tombstonesPending).toBe(true)
    await s.flush()
    expect(s.journal!.tombstonesPending).toBe(false)
    await s.close()
  })
})
