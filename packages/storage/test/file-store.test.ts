/**
 * File-engine behaviour beyond the shared contract: reopening, cutting back to
 * the watermark, damaged tails, bounded descriptors, quarantine
 * of damaged logs, and a read-only store following a writer.
 */
import { join } from 'node:path'
import { bucketDir, shapeDir } from '../src/file/shape-dirs.js'
import { storedIds } from './fixtures/log-dirs.js'
import { appendFileSync, cpSync, openSync, closeSync, readFileSync, readdirSync, readlinkSync, statSync, writeFileSync, writeSync, existsSync } from 'node:fs'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { createFaultyFs, useTempDir } from '@sluice/test-utils'
import { BEFORE_ALL, formatOffset, parseOffset } from '@sluice/protocol'
import { afterEach, describe, expect, it } from 'vitest'
import { ENTRY_RECORD_BYTES, HEADER_BYTES } from '../src/format.js'
import { nodeFs, openFileLogStore, openReadOnlyLogStore, readSpans } from '../src/index.js'
import type { FileLogStore, FsPort, LogRead, ShapeLog, StorageError } from '../src/index.js'
import type { LogOffset } from '@sluice/protocol'
import { SNAPSHOT_END, body, change, makeShape, row } from './contract-suite.js'

const tempDirs = useTempDir()

async function waitFor(done: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms
  while (!done()) {
    if (Date.now() > end) throw new Error('condition not reached')
    await new Promise((r) => setTimeout(r, 10))
  }
}
const o = parseOffset

describe('file engine', () => {
  const open: FileLogStore[] = []
  afterEach(async () => {
    for (const s of open.splice(0)) await s.close().catch(() => undefined)
  })
  const openStore = async (dir: string, chunkBytes = 2048, extra: { maxOpenFiles?: number; journal?: boolean } = {}) => {
    const s = await openFileLogStore({ dir, chunkBytes, flushIntervalMs: 60_000, flushWhenIdle: false, ...extra })
    open.push(s)
    return s
  }

  it('reopens with every published entry and cuts what the watermark never covered', async () => {
    const dir = await tempDirs.make('reopen')
    const s = await openStore(dir)
    await makeShape(s, 'a', [row(1), row(2)])
    const log = s.get('a')!
    for (let tx = 1n; tx <= 30n; tx++) log.appendTransaction([change(tx, 0, Number(tx)), change(tx, 2, Number(tx))])
    s.advance(20n)
    await s.flush()
    await s.close()
    open.length = 0

    const again = await openStore(dir)
    expect(again.durableLsn).toBe(20n)
    const reopened = again.get('a')!
    expect(formatOffset(reopened.head().lastOffset)).toBe('20_2')
    // The next transactions after the cut are accepted again (the replay).
    expect(reopened.appendTransaction([change(21n, 0, 21)])).toBe(1)
    expect(reopened.appendTransaction([change(20n, 2, 20)])).toBe(0)
    again.advance(21n)
    await again.flush()
    let at = BEFORE_ALL
    let n = 0
    for (;;) {
      const r = reopened.read(at)
      if (r.entryCount === 0) break
      n += body(r).length
      at = r.nextOffset
    }
    expect(n).toBe(3 + 41)
  })

  // A log keeps its heads' LSNs as 32-bit halves (file-log.ts), the low one signed (log-heads.ts
  // lsnHalves): every comparison must still be exact where the low half's top bit turns on (2^31,
  // and again above 2^32), where halves carry (2^32), where a double stops being exact (2^53) and at the top.
  it.each([true, false])('keeps LSNs exact across 2^31, 2^32, 2^53 and 2^64 (journal: %s)', async (journal) => {
    const dir = await tempDirs.make(`u64-${journal}`)
    const s = await openStore(dir, 2048, { journal })
    const log = await makeShape(s, 'a', [row(1)])
    const lsns = [2n ** 31n - 1n, 2n ** 31n, 2n ** 31n + 1n, 2n ** 32n - 1n, 2n ** 32n, 2n ** 32n + 2n ** 31n - 1n, 2n ** 32n + 2n ** 31n, 2n ** 53n - 1n, 2n ** 53n, 2n ** 53n + 1n, 2n ** 63n, 2n ** 64n - 2n]
    for (const [i, lsn] of lsns.entries()) {
      expect(log.appendTransaction([change(lsn, 0, i), change(lsn, 1, i)])).toBe(2)
      // A replay of this transaction, of part of it, or of the one before adds nothing.
      expect(log.appendTransaction([change(lsn, 1, i)])).toBe(0)
      if (i > 0) expect(log.appendTransaction([change(lsns[i - 1]!, 5, i)])).toBe(0)
    }
    // Published up to 2^53 + 1: the ends above stay unpublished, 2^53 - 1 and 2^53 are not mixed up.
    s.advance(2n ** 53n + 1n)
    await s.flush()
    expect(formatOffset(log.head().lastOffset)).toBe(`${2n ** 53n + 1n}_1`)
    s.advance(2n ** 64n - 2n)
    await s.flush()
    expect(formatOffset(log.head().lastOffset)).toBe(`${2n ** 64n - 2n}_1`)
    // Every chunk from there on (a chunk holds a few of these transactions).
    const seen: Array<{ headers: { lsn: string } }> = []
    for (let at = o(`${2n ** 53n - 1n}_1`), reached = false; !reached; ) {
      const read = log.read(at)
      seen.push(...(body(read) as typeof seen))
      at = read.nextOffset
      reached = read.reachedHead
    }
    expect(seen.map((e) => e.headers.lsn)).toEqual(lsns.slice(lsns.indexOf(2n ** 53n - 1n) + 1).flatMap((l) => [String(l), String(l)]))
    await s.close()
    open.length = 0

    const again = await openStore(dir, 2048, { journal })
    const reopened = again.get('a')!
    expect(formatOffset(reopened.head().lastOffset)).toBe(`${2n ** 64n - 2n}_1`)
    expect(reopened.appendTransaction([change(2n ** 64n - 2n, 1, 9)])).toBe(0)
    expect(reopened.appendTransaction([change(2n ** 64n - 1n, 0, 9)])).toBe(1)
  })

  // Writing through (no journal), so the copy's files hold the non-durable tail
  // the damage lands on; with the journal that tail is in memory (write-behind)
  // and the crash test covers it.
  it('recovers a log of 200,000 chunks (its chunk list is never spread as call arguments)', async () => {
    const dir = await tempDirs.make('many-chunks')
    // Chunks of 64 bytes: every change below seals one.
    const s = await openStore(dir, 64, { journal: false })
    await makeShape(s, 'long', [row(1)])
    const log = s.get('long')!
    const count = 200_000
    for (let tx = 1; tx <= count; tx++) log.appendTransaction([change(BigInt(tx), 0, tx)])
    s.advance(BigInt(count))
    await s.flush()
    const copy = await tempDirs.make('many-chunks-copy')
    cpSync(dir, copy, { recursive: true })
    writeFileSync(`${copy}/LOCK`, '999999999') // the "crashed" writer's pid: recovery scans the log's files
    const r = await openStore(copy, 64, { journal: false })
    expect(formatOffset(r.get('long')!.head().lastOffset)).toBe(`${count}_0`)
    expect(statSync(`${shapeDir(copy, 'long')}/chunks.idx`).size).toBeGreaterThan(HEADER_BYTES + count * 8)
    // The last changes read back as written (reading all 200,000 would only slow the test).
    const near = o(`${count - 5}_0`)
    expect(body(r.get('long')!.read(near))).toEqual(body(log.read(near)))
    expect(body(r.get('long')!.read(near)).length).toBeGreaterThan(0)
  })

  it('recovers a copy taken mid-flight, whatever garbage follows the durable prefix', async () => {
    const dir = await tempDirs.make('crashcopy')
    const s = await openStore(dir, 1024, { journal: false })
    await makeShape(s, 'a', Array.from({ length: 10 }, (_, i) => row(i, 30)))
    const log = s.get('a')!
    for (let tx = 1n; tx <= 40n; tx++) log.appendTransaction([change(tx, 0, Number(tx)), change(tx, 2, Number(tx)), change(tx, 4, 1)])
    s.advance(25n)
    await s.flush()
    for (let tx = 41n; tx <= 50n; tx++) log.appendTransaction([change(tx, 0, Number(tx))])
    const expected = readAll(log)

    const damage: Array<[string, (shapeDir: string) => void]> = [
      ['nothing', () => {}],
      ['zeros after the records', (d) => appendFileSync(`${d}/entries.idx`, Buffer.alloc(ENTRY_RECORD_BYTES * 3))],
      ['a torn record', (d) => appendFileSync(`${d}/entries.idx`, Buffer.alloc(17, 7))],
      ['garbage bytes', (d) => appendFileSync(`${d}/log.dat`, Buffer.from('{"half":'))],
      [
        'a hole of zeros over the non-durable records',
        (d) => {
          const size = statSync(`${d}/entries.idx`).size
          const fd = openSync(`${d}/entries.idx`, 'r+')
          writeSync(fd, Buffer.alloc(ENTRY_RECORD_BYTES * 5), 0, ENTRY_RECORD_BYTES * 5, size - ENTRY_RECORD_BYTES * 20)
          closeSync(fd)
        },
      ],
      ['a torn chunk record', (d) => appendFileSync(`${d}/chunks.idx`, Buffer.alloc(20, 1))],
    ]
    for (const [what, harm] of damage) {
      const copy = await tempDirs.make('copy')
      cpSync(dir, copy, { recursive: true })
      writeFileSync(`${copy}/LOCK`, '999999999') // the "crashed" writer's pid
      harm(shapeDir(copy, 'a'))
      const r = await openStore(copy, 1024, { journal: false })
      const got = readAll(r.get('a')!)
      expect([what, formatOffset(r.get('a')!.head().lastOffset)]).toEqual([what, '25_4'])
      expect(got.equals(expected)).toBe(true)
      // Cut files hold exactly the durable prefix; appends continue after it.
      const entries = statSync(`${shapeDir(copy, 'a')}/entries.idx`).size
      expect((entries - HEADER_BYTES) % ENTRY_RECORD_BYTES).toBe(0)
      expect(r.get('a')!.appendTransaction([change(26n, 0, 26)])).toBe(1)
      r.advance(26n)
      await r.flush()
      expect(formatOffset(r.get('a')!.head().lastOffset)).toBe('26_0')
    }
  })

  it('serves many more logs than it keeps descriptors for', async () => {
    const dir = await tempDirs.make('fds')
    const s = await openStore(dir, 512, { maxOpenFiles: 6 })
    for (let i = 0; i < 40; i++) await makeShape(s, `s${i}`, [row(i)])
    for (let round = 1n; round <= 3n; round++) {
      for (let i = 0; i < 40; i++) s.get(`s${i}`)!.appendTransaction([change(round, 0, i)])
      s.advance(round)
      await s.flush()
    }
    expect(s.fds.size).toBeLessThanOrEqual(6)
    // A read holds its descriptor open while others churn through the cache.
    const pinned = s.get('s0')!.read(BEFORE_ALL)
    for (let i = 1; i < 40; i++) body(s.get(`s${i}`)!.read(BEFORE_ALL))
    expect(readSpans(pinned).toString()).toContain('"0"')
    pinned.release()
    expect(s.fds.size).toBeLessThanOrEqual(6)
    for (let i = 0; i < 40; i++) expect(formatOffset(s.get(`s${i}`)!.head().lastOffset)).toBe('3_0')
  })

  it('sets damaged or unknown-version logs aside and serves the rest', async () => {
    const dir = await tempDirs.make('quarantine')
    const s = await openStore(dir)
    await makeShape(s, 'good', [row(1)])
    await makeShape(s, 'bad', [row(2)])
    await makeShape(s, 'future', [row(3)])
    await s.close()
    open.length = 0
    writeFileSync(`${shapeDir(dir, 'bad')}/entries.idx`, 'not a sluice file')
    const future = readFileSync(`${shapeDir(dir, 'future')}/log.dat`)
    future[4] = 99
    writeFileSync(`${shapeDir(dir, 'future')}/log.dat`, future)
    // A log of an unknown version comes from a newer release (a downgrade): its clean close wrote its heads
    // file in its own version too, which this release cannot use, so every log is scanned (heads-file.test.ts
    // has the files-changed-under-a-usable-heads-file case).
    const heads = readFileSync(`${dir}/heads`)
    heads[4] = 99
    writeFileSync(`${dir}/heads`, heads)

    const errors: StorageError[] = []
    const again = await openStore(dir)
    again.onError((e) => errors.push(e))
    expect(again.ids()).toEqual(['good'])
    expect(again.quarantined.sort()).toEqual(['bad', 'future'])
    expect(readdirSync(`${dir}/quarantine`).length).toBe(2)
    expect(body(again.get('good')!.read(BEFORE_ALL))).toHaveLength(2)
  })

  it('drops unfinished snapshots and empties the trash on open', async () => {
    const dir = await tempDirs.make('tmp')
    const s = await openStore(dir)
    s.createShape('half').append([row(1)])
    await makeShape(s, 'gone', [row(1)])
    await s.deleteShape('gone')
    await s.close()
    open.length = 0
    await openStore(dir)
    await new Promise((r) => setTimeout(r, 50))
    expect(readdirSync(`${dir}/tmp`)).toEqual([])
    expect(readdirSync(`${dir}/trash`)).toEqual([])
    expect(storedIds(dir)).toEqual([])
  })

  it('a burst of deletions leaves no oversized trash/ behind once its removals drain', async () => {
    const dir = await tempDirs.make('trash-burst')
    let release: () => void = () => {}
    const gate = new Promise<void>((r) => (release = r))
    // Removals wait, as they would behind a burst of thousands: every deleted log sits in trash/ at once.
    const fs: FsPort = { ...nodeFs, rm: async (path, options) => gate.then(() => nodeFs.rm(path, options)) }
    const s = await openFileLogStore({ dir, chunkBytes: 2048, flushIntervalMs: 60_000, flushWhenIdle: false, fs })
    open.push(s)
    const ids = Array.from({ length: 700 }, (_, i) => `${String(i).padStart(4, '0')}-${'x'.repeat(120)}`)
    await Promise.all([...ids, 'kept'].map((id) => makeShape(s, id, [row(1)])))
    const keptRows = body(s.get('kept')!.read(BEFORE_ALL))
    for (const id of ids) await s.deleteShape(id)
    const grown = statSync(`${dir}/trash`).size
    expect(grown).toBeGreaterThan(64 * 1024)
    release()
    await waitFor(() => readdirSync(`${dir}/trash`).length === 0 && statSync(`${dir}/trash`).size < grown)
    expect(statSync(`${dir}/trash`).size).toBeLessThanOrEqual(4096)
    // The store goes on deleting into the new trash/, and reopens with what it kept.
    await makeShape(s, 'later', [row(1)])
    expect(await s.deleteShape('later')).toBe(true)
    await s.close()
    open.length = 0
    const again = await openStore(dir)
    expect(again.ids()).toEqual(['kept'])
    expect(body(again.get('kept')!.read(BEFORE_ALL))).toEqual(keptRows)
  })

  it('makes trash/ again when it is missing (a crash between removing and making it)', async () => {
    const dir = await tempDirs.make('trash-missing')
    const s = await openStore(dir)
    await makeShape(s, 'a', [row(1)])
    nodeFs.rmdirSync(`${dir}/trash`)
    expect(await s.deleteShape('a')).toBe(true)
    expect(s.ids()).toEqual([])
    await waitFor(() => existsSync(`${dir}/trash`) && readdirSync(`${dir}/trash`).length === 0)
    expect(storedIds(dir)).toEqual([])
  })

  it('publishes a transaction whose first part was appended while a flush was running', async () => {
    // Regression: a `more` append during a flush left the log dirty with nothing
    // to publish; that flush dropped it from the publish set, and the final part
    // (appended while the log was still marked dirty) was never published.
    const dir = await tempDirs.make('more-during-flush')
    let release: () => void = () => {}
    let gate: Promise<void> | undefined
    const fs: FsPort = {
      ...nodeFs,
      async fdatasync(fd) {
        if (gate) await gate
        await nodeFs.fdatasync(fd)
      },
    }
    const s = await openFileLogStore({ dir, chunkBytes: 4096, flushIntervalMs: 60_000, flushWhenIdle: false, fs })
    open.push(s)
    await makeShape(s, 'm', [])
    await makeShape(s, 'l', [])
    s.get('m')!.appendTransaction([change(5n, 0, 1)])
    s.advance(5n)
    gate = new Promise((r) => (release = r))
    const first = s.flush()
    await new Promise((r) => setTimeout(r, 10)) // the flush is now waiting in fdatasync
    s.get('l')!.appendTransaction([change(10n, 0, 1)], { more: true })
    gate = undefined
    release()
    await first
    s.get('l')!.appendTransaction([change(10n, 2, 2)])
    s.advance(10n)
    await s.flush()
    expect(formatOffset(s.get('l')!.head().lastOffset)).toBe('10_2')
  })

  it('finishes a snapshot in a process that has nothing else to do', async () => {
    const dir = await tempDirs.make('alive')
    const script = fileURLToPath(new URL('./fixtures/finish-only.ts', import.meta.url))
    const out = spawnSync(process.execPath, ['--import', 'tsx', '--conditions=sluice-source', script, dir], { encoding: 'utf8', timeout: 30_000 })
    expect(out.stderr).toBe('')
    expect(out.stdout.trim()).toBe('finished 2')
  })

  it('lets a read-only store follow the writer, seeing only what is published', async () => {
    const dir = await tempDirs.make('ro')
    const w = await openStore(dir, 1024)
    const reader = openReadOnlyLogStore({ dir })
    expect(reader.get('a')).toBeUndefined()
    const writer = w.createShape('a')
    writer.append([row(1)])
    expect(reader.get('a')).toBeUndefined()
    await writer.finish(Buffer.from('{"headers":{"control":"snapshot-end"}}'))
    const log = w.get('a')!
    const ro = reader.get('a')!
    expect(body(ro.read(BEFORE_ALL))).toHaveLength(2)

    for (let tx = 1n; tx <= 20n; tx++) log.appendTransaction([change(tx, 0, 1), change(tx, 2, 2)])
    expect(ro.read(parseOffset('0_0')).entryCount).toBe(0)
    w.advance(12n)
    await w.flush()
    expect(formatOffset(ro.head().lastOffset)).toBe('12_2')
    expect(readAll(ro).equals(readAll(log))).toBe(true)
    expect(() => ro.appendTransaction([change(30n, 0, 1)])).toThrow(/read-only/)

    const seen: bigint[] = []
    const off = reader.onFlush((r) => seen.push(r.durableLsn))
    w.advance(20n)
    await w.flush()
    // Polled every 20 ms; a machine busy with other suites may delay the timer a lot.
    for (let i = 0; i < 500 && !seen.includes(20n); i++) await new Promise((r) => setTimeout(r, 10))
    off()
    expect(seen).toContain(20n)
    expect(formatOffset(ro.head().lastOffset)).toBe('20_2')

    await w.deleteShape('a')
    expect(reader.get('a')).toBeUndefined()
    await reader.close()
  })

  it('runs no timer of its own with pollIntervalMs 0: listeners hear of a flush when the caller polls', async () => {
    const dir = await tempDirs.make('ro-manual')
    const w = await openStore(dir, 1024)
    const writer = w.createShape('a')
    await writer.finish(Buffer.from('{"headers":{"control":"snapshot-end"}}'))
    const reader = openReadOnlyLogStore({ dir, pollIntervalMs: 0 })
    const ro = reader.get('a')!
    ro.head()
    const seen: Array<{ lsn: bigint; advanced: readonly string[] }> = []
    const off = reader.onFlush((r) => seen.push({ lsn: r.durableLsn, advanced: r.advanced }))
    w.get('a')!.appendTransaction([change(5n, 0, 1)])
    w.advance(5n)
    await w.flush()
    // Long past the default period: nothing reports but poll().
    await new Promise((r) => setTimeout(r, 100))
    expect(seen).toEqual([])
    reader.poll()
    expect(seen).toEqual([{ lsn: 5n, advanced: ['a'] }])
    reader.poll()
    expect(seen).toHaveLength(1)
    off()
    await reader.close()
    await w.close()
  })

  it('rollbackToDurable cuts every log back to what the watermark covers, so a replay appends all of it again', async () => {
    const dir = await tempDirs.make('rollback-durable')
    const s = await openStore(dir, 1024)
    for (const id of ['a', 'b', 'c']) await s.createShape(id).finish(Buffer.from('{"headers":{"control":"snapshot-end"}}'))
    s.get('a')!.appendTransaction([change(5n, 0, 1)])
    s.advance(5n)
    await s.flush()
    // Taken after a failure, never published: an end in a, a transaction still open in b; c holds nothing more.
    s.get('a')!.appendTransaction([change(7n, 0, 1), change(7n, 1, 2)])
    s.get('b')!.appendTransaction([change(7n, 2, 3)], { more: true })
    expect(await s.rollbackToDurable()).toBe(2)
    expect(formatOffset(s.get('a')!.head().lastOffset)).toBe('5_0')
    // The replay delivers transaction 7 from its start: every entry is taken again, none skipped.
    expect(s.get('a')!.appendTransaction([change(7n, 0, 1), change(7n, 1, 2)])).toBe(2)
    expect(s.get('b')!.appendTransaction([change(7n, 0, 1), change(7n, 2, 3)])).toBe(2)
    s.advance(7n)
    await s.flush()
    expect(formatOffset(s.get('a')!.head().lastOffset)).toBe('7_1')
    expect(formatOffset(s.get('b')!.head().lastOffset)).toBe('7_2')
  })

  it('a poll looks at the logs the journal wrote, and at those with records past their head, not at every log held', async () => {
    const dir = await tempDirs.make('ro-touched')
    const w = await openStore(dir, 1024)
    const LOGS = 200
    for (let i = 0; i < LOGS; i++) await w.createShape(`s${i}`).finish(Buffer.from('{"headers":{"control":"snapshot-end"}}'))
    // The first flush's journal segment: a poll after it looks at every log once (a new epoch: nothing before it was seen).
    w.get('s0')!.appendTransaction([change(5n, 0, 1)])
    w.advance(5n)
    await w.flush()
    const faulty = createFaultyFs<FsPort>(nodeFs)
    const reader = openReadOnlyLogStore({ dir, pollIntervalMs: 0, fs: faulty.fs })
    for (let i = 0; i < LOGS; i++) reader.get(`s${i}`)!.head()
    const seen: Array<{ lsn: bigint; advanced: readonly string[] }> = []
    const off = reader.onFlush((r) => seen.push({ lsn: r.durableLsn, advanced: r.advanced }))
    w.get('s1')!.appendTransaction([change(6n, 0, 1)])
    w.advance(6n)
    await w.flush()
    reader.poll()
    expect(seen.at(-1)).toEqual({ lsn: 6n, advanced: ['s1'] })

    // One log written: a handful of calls, where looking at all 200 made three fstat each.
    w.get('s7')!.appendTransaction([change(7n, 0, 1)])
    // Written now, covered only by a later watermark whose group writes nothing of s7's.
    w.get('s9')!.appendTransaction([change(9n, 0, 1)])
    w.advance(7n)
    await w.flush()
    faulty.rules.resetCalls()
    reader.poll()
    expect(seen.at(-1)).toEqual({ lsn: 7n, advanced: ['s7'] })
    const calls = faulty.rules.callCounts()
    const stats = (calls['fstatSync'] ?? 0) + (calls['statSync'] ?? 0)
    expect(stats).toBeLessThan(30)
    w.advance(9n)
    await w.flush()
    // A client's read of s9 catches it up first: the poll still reports its advance.
    expect(formatOffset(reader.get('s9')!.head().lastOffset)).toBe('9_0')
    reader.poll()
    expect(seen.at(-1)).toEqual({ lsn: 9n, advanced: ['s9'] })
    expect(formatOffset(reader.get('s9')!.head().lastOffset)).toBe('9_0')
    off()
    await reader.close()
    await w.close()
  })
})

/**
 * A filesystem port that records, per inode, the file size each successful
 * fdatasync/fsync covered, and can hold syncs of chosen paths until released.
 */
function syncTracker() {
  const synced = new Map<number, number>()
  const holds: Array<{ match: (path: string) => boolean; reached: () => void; gate: Promise<void> }> = []
  const pathOf = (fd: number) => readlinkSync(`/proc/self/fd/${fd}`)
  const track = (sync: (fd: number) => Promise<void>) => async (fd: number) => {
    const path = pathOf(fd)
    const hold = holds.find((h) => h.match(path))
    if (hold) {
      holds.splice(holds.indexOf(hold), 1)
      hold.reached()
      await hold.gate
    }
    const { size, ino } = nodeFs.fstatSync(fd)
    await sync(fd)
    synced.set(ino, Math.max(synced.get(ino) ?? 0, size))
  }
  const fs: FsPort = { ...nodeFs, fdatasync: track(nodeFs.fdatasync), fsync: track(nodeFs.fsync) }
  return {
    fs,
    /** Bytes of the file at `path` known to be on disk. */
    syncedBytes: (path: string) => synced.get(statSync(path).ino) ?? 0,
    /** Holds the next sync of a path that `match` accepts; `reached` resolves once it waits. */
    hold(match: (path: string) => boolean) {
      let release!: () => void
      let reached!: () => void
      const gate = new Promise<void>((r) => (release = r))
      const isReached = new Promise<void>((r) => (reached = r))
      holds.push({ match, reached, gate })
      return { reached: isReached, release }
    },
  }
}

describe('a new log finishing with live transactions (file engine)', () => {
  const open: FileLogStore[] = []
  afterEach(async () => {
    for (const s of open.splice(0)) await s.close().catch(() => undefined)
  })
  const lsns = (log: { read(after: LogOffset): LogRead }): string[] =>
    (JSON.parse(`[${readAll(log).toString('utf8').replace(/,$/, '')}]`) as Array<{ headers: { lsn?: string; op_position?: number } }>).flatMap((m) =>
      m.headers.lsn === undefined ? [] : [`${m.headers.lsn}_${m.headers.op_position}`],
    )
  const codeOf = (fn: () => unknown): string => {
    try {
      fn()
    } catch (err) {
      return (err as StorageError).code
    }
    return 'no error'
  }
  async function setup(name: string, journal = true) {
    const dir = await tempDirs.make(name)
    const tracker = syncTracker()
    const s = await openFileLogStore({ dir, chunkBytes: 1024, flushIntervalMs: 60_000, flushWhenIdle: false, fs: tracker.fs, journal })
    open.push(s)
    // Another log takes the watermark to 50 while the new shape's snapshot "runs".
    const other = await makeShape(s, 'other', [])
    for (const tx of [10n, 30n, 50n]) other.appendTransaction([change(tx, 0, Number(tx))])
    s.advance(50n)
    await s.flush()
    return { dir, tracker, s }
  }

  // Per-log syncs (journal: false): the follower is checked against what each log file had synced.
  it('never shows a read-only follower entries that are not synced, however appends and syncs interleave', async () => {
    const { dir, tracker, s } = await setup('ro-finishing', false)
    const reader = openReadOnlyLogStore({ dir })
    const nDir = shapeDir(dir, 'n')
    /** What the follower shows of `n` is synced, byte for byte, and is exactly the expected transactions. */
    const checkFollower = (want: string[] | undefined) => {
      const ro = reader.get('n')
      if (want === undefined) {
        expect(ro).toBeUndefined()
        return
      }
      expect(ro).toBeDefined()
      expect(lsns(ro!)).toEqual(want)
      const { entryCount } = ro!.head()
      expect(HEADER_BYTES + entryCount * ENTRY_RECORD_BYTES).toBeLessThanOrEqual(tracker.syncedBytes(`${nDir}/entries.idx`))
      expect(HEADER_BYTES + readAll(ro!).length).toBeLessThanOrEqual(tracker.syncedBytes(`${nDir}/log.dat`))
    }

    const w = s.createShape('n')
    w.append([row(1), row(2)])
    const finishing = w.finish(SNAPSHOT_END)
    w.appendTransaction([change(20n, 0, 1)])
    w.appendTransaction([change(30n, 0, 2), change(30n, 2, 3)])

    // The finishing flush syncs the log in tmp/; hold that sync and append more meanwhile.
    const inTmp = tracker.hold((p) => p.includes('/tmp/') && p.endsWith('/log.dat'))
    const first = s.flush()
    await inTmp.reached
    w.appendTransaction([change(40n, 0, 4)]) // below the watermark, after the sync: the rename must wait
    inTmp.release()
    const r1 = await first
    expect(r1.advanced).not.toContain('n')
    expect(s.get('n')).toBeUndefined()
    checkFollower(undefined)

    // The next flush syncs 40 too and renames; hold the sync of shapes/ that makes the rename durable.
    const shapesSync = tracker.hold((p) => p === bucketDir(dir, 'n'))
    const second = s.flush()
    await shapesSync.reached
    // Renamed: the follower may find it now, with everything synced and nothing else.
    checkFollower(['20_0', '30_0', '30_2', '40_0'])
    // The writer's store serves it only once finish resolves.
    expect(s.get('n')).toBeUndefined()
    expect(s.ids()).not.toContain('n')
    expect(() => s.createShape('n')).toThrow(/already exists/)
    // A crash here (a copy of the directory as it is) recovers the shape whole.
    const copy = await tempDirs.make('ro-finishing-copy')
    cpSync(dir, copy, { recursive: true })
    // From the rename on, nothing at or below the watermark can join it durably any more.
    expect(codeOf(() => w.appendTransaction([change(45n, 0, 6)]))).toBe('invalid_append')
    // Live ones can, also in parts.
    expect(w.appendTransaction([change(60n, 0, 5)], { more: true })).toBe(1)
    expect(w.appendTransaction([change(60n, 2, 7)])).toBe(1)
    shapesSync.release()
    const r2 = await second
    expect(r2.advanced).toEqual(['n'])
    const log = await finishing
    expect(lsns(log)).toEqual(['20_0', '30_0', '30_2', '40_0'])
    checkFollower(['20_0', '30_0', '30_2', '40_0'])

    // The next flush writes 60's index records before syncing them: hold that sync.
    s.advance(60n)
    const live = tracker.hold((p) => p === `${nDir}/entries.idx`)
    const third = s.flush()
    await live.reached
    checkFollower(['20_0', '30_0', '30_2', '40_0'])
    live.release()
    await third
    checkFollower(['20_0', '30_0', '30_2', '40_0', '60_0', '60_2'])
    expect(lsns(log)).toEqual(['20_0', '30_0', '30_2', '40_0', '60_0', '60_2'])
    await reader.close()

    writeFileSync(`${copy}/LOCK`, '999999999')
    const recovered = await openFileLogStore({ dir: copy, chunkBytes: 1024, flushIntervalMs: 60_000, flushWhenIdle: false })
    open.push(recovered)
    expect(recovered.quarantined).toEqual([])
    expect(recovered.ids().sort()).toEqual(['n', 'other'])
    expect(lsns(recovered.get('n')!)).toEqual(['20_0', '30_0', '30_2', '40_0'])
  })

  it('leaves no shape when copied while the finishing sync runs, and keeps every queued transaction across a reopen', async () => {
    const { dir, tracker, s } = await setup('finishing-copy')
    const w = s.createShape('n')
    w.append([row(1)])
    const finishing = w.finish(SNAPSHOT_END)
    for (const tx of [15n, 25n, 35n, 45n]) w.appendTransaction([change(tx, 0, Number(tx)), change(tx, 1, Number(tx) + 1)])
    const held = tracker.hold((p) => p.includes('/tmp/') && p.endsWith('/entries.idx'))
    const flushing = s.flush()
    await held.reached
    const copy = await tempDirs.make('finishing-copy-mid')
    cpSync(dir, copy, { recursive: true })
    held.release()
    await flushing
    await finishing
    await s.close()
    open.length = 0

    writeFileSync(`${copy}/LOCK`, '999999999')
    const mid = await openFileLogStore({ dir: copy, flushIntervalMs: 60_000, flushWhenIdle: false })
    open.push(mid)
    expect(mid.ids()).toEqual(['other'])
    expect(readdirSync(`${copy}/tmp`)).toEqual([])

    const again = await openFileLogStore({ dir, chunkBytes: 1024, flushIntervalMs: 60_000, flushWhenIdle: false })
    open.push(again)
    expect(again.quarantined).toEqual([])
    expect(again.durableLsn).toBe(50n)
    expect(lsns(again.get('n')!)).toEqual(['15_0', '15_1', '25_0', '25_1', '35_0', '35_1', '45_0', '45_1'])
  })

  it('aborts while a flush holds the snapshot, before or after its rename, leaving nothing', async () => {
    const { dir, tracker, s } = await setup('abort-held')
    for (const [i, where] of [
      [1, (p: string) => p.includes('/tmp/') && p.endsWith('/log.dat')],
      [2, (p: string) => p === bucketDir(dir, `n2`)],
    ] as const) {
      const id = `n${i}`
      const w = s.createShape(id)
      w.append([row(1)])
      const finishing = w.finish(SNAPSHOT_END)
      w.appendTransaction([change(20n, 0, 1)])
      const held = tracker.hold(where)
      const flushing = s.flush()
      await held.reached
      const aborting = w.abort()
      held.release()
      await aborting
      await expect(finishing).rejects.toMatchObject({ code: 'shape_deleted' })
      await flushing
      expect(s.get(id)).toBeUndefined()
      expect(storedIds(dir).sort()).toEqual(['other'])
      expect(codeOf(() => w.appendTransaction([change(70n, 0, 1)]))).toBe('invalid_append')
    }
    // Nothing of theirs holds the watermark back or lingers in the flush sets.
    s.get('other')!.appendTransaction([change(70n, 0, 1)])
    s.advance(70n)
    expect((await s.flush()).advanced).toEqual(['other'])
  })
})

function readAll(log: { read(after: LogOffset): LogRead }): Buffer {
  const parts: Buffer[] = []
  let at = BEFORE_ALL
  for (;;) {
    const r = log.read(at)
    if (r.entryCount === 0) break
    parts.push(readSpans(r))
    r.release()
    at = r.nextOffset
  }
  return Buffer.concat(parts)
}
