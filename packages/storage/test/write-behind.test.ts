/**
 * Write-behind (file-log.ts): with the journal, a registered log keeps its
 * appends in memory and the journal, serves them from memory, and writes them
 * into its files only at WRITE_BACK_BYTES (64 KiB) or at a checkpoint. These tests check that
 * readers see the same bytes either way, that a failed write-back loses
 * nothing, and that a cut racing a write-back in flight wins.
 */
import { shapeDir } from '../src/file/shape-dirs.js'
import { readlinkSync, statSync, writeFileSync } from 'node:fs'
import { parseOffset } from '@sluice/protocol'
import { createFaultyFs, useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { FlushError, nodeFs, openFileLogStore, readSpans } from '../src/index.js'
import type { FsPort, ShapeLog, StorageError } from '../src/index.js'
import { body, change, makeShape, row } from './contract-suite.js'
import { onFile } from './fixtures/fd-match.js'
import { until } from './fixtures/until.js'
import { FileRef } from '../src/file/fd-cache.js'
import { writeBackThread } from '../src/file/write-back.js'

const tempDirs = useTempDir()
const enc = new TextEncoder()
const MiB = 1024 * 1024

function big(lsn: bigint, op: number, kb: number): { offset: { tx: bigint; op: bigint }; json: Uint8Array } {
  return { offset: { tx: lsn, op: BigInt(op) }, json: enc.encode(JSON.stringify({ headers: { lsn: String(lsn), op }, value: { pad: 'y'.repeat(kb * 1024) } })) }
}

/** Every stored byte after the snapshot, read the way clients do (chunk by chunk). */
function liveBytes(log: ShapeLog): Buffer {
  const parts: Buffer[] = []
  let after = parseOffset('0_inf')
  for (;;) {
    const r = log.read(after)
    if (r.entryCount === 0) {
      r.release()
      return Buffer.concat(parts)
    }
    parts.push(readSpans(r))
    r.release()
    after = r.nextOffset
  }
}

/** How many entries follow the snapshot, chunk by chunk. */
function entriesAfterSnapshot(log: ShapeLog): number {
  let n = 0
  let after = parseOffset('0_inf')
  for (;;) {
    const r = log.read(after)
    r.release()
    if (r.entryCount === 0) return n
    n += r.entryCount
    after = r.nextOffset
  }
}

const sizeOf = (dir: string, id: string, file: string): number => statSync(`${shapeDir(dir, id)}/${file}`).size

describe('write-behind', () => {
  it('serves appends from memory until WRITE_BACK_BYTES or a checkpoint, then from the files, byte for byte the same', async () => {
    const dir = await tempDirs.make('wb-serve')
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 64 * 1024 })
    const log = await makeShape(s, 'a', [row(1), row(2)])
    const dataAfterSnapshot = sizeOf(dir, 'a', 'log.dat')
    const entriesAfterSnapshot = sizeOf(dir, 'a', 'entries.idx')
    for (let tx = 1n; tx <= 5n; tx++) log.appendTransaction([change(tx, 0, 1), change(tx, 1, 2)])
    s.advance(5n)
    await s.flush()
    // Durable (journal) and readable, but not in the log's own files yet.
    expect(body(log.read(parseOffset('0_inf')))).toHaveLength(10)
    expect(sizeOf(dir, 'a', 'log.dat')).toBe(dataAfterSnapshot)
    expect(sizeOf(dir, 'a', 'entries.idx')).toBe(entriesAfterSnapshot)
    // A mid-chunk offset resolves through the staged records.
    expect(body(log.read({ tx: 3n, op: 0n }))).toHaveLength(5)
    const inMemory = liveBytes(log)

    // 300 KiB more: past the threshold, a write-back starts on its own.
    for (let tx = 6n; tx <= 8n; tx++) log.appendTransaction([big(tx, 0, 100)])
    s.advance(8n)
    await s.flush()
    for (let i = 0; i < 200 && sizeOf(dir, 'a', 'log.dat') <= dataAfterSnapshot + 256 * 1024; i++) await new Promise((r) => setTimeout(r, 5))
    expect(sizeOf(dir, 'a', 'log.dat')).toBeGreaterThan(dataAfterSnapshot + 256 * 1024)
    const all = liveBytes(log)
    expect(all.subarray(0, inMemory.length).equals(inMemory)).toBe(true)
    // A read from a mid-chunk offset runs to the chunk's end (the first 100 KiB entry closes it).
    expect(body(log.read({ tx: 2n, op: 1n }))).toHaveLength(6 + 1)

    // Close checkpoints: everything reaches the files, and a reopen reads the same.
    await s.close()
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 64 * 1024 })
    expect(liveBytes(again.get('a')!).equals(all)).toBe(true)
    await again.close()
  })

  it('one transaction into one log, appended faster than write-backs land: a writer that waits on backlog keeps the tail a few MiB, and every byte arrives', async () => {
    const dir = await tempDirs.make('wb-backlog')
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    const log = await makeShape(s, 'a', [row(1)])
    expect(s.backlog()).toBeUndefined()
    // 48 MiB in 1 MiB batches of 64 KiB lines, all of one transaction, with no turn of the loop between batches
    // unless the store asks for one: nothing else could let a write-back land.
    const line = new Uint8Array(64 * 1024).fill(0x61)
    const perBatch = 16
    const batches = 48
    let most = 0
    let waits = 0
    for (let b = 0; b < batches; b++) {
      const ops = Array.from({ length: perBatch }, (_, i) => b * perBatch + i)
      log.appendLines(7n, ops, Array.from({ length: perBatch }, () => line), perBatch, { more: b < batches - 1 })
      most = Math.max(most, s.stats().tailBytes)
      const wait = s.backlog()
      if (wait !== undefined) {
        waits++
        await wait
        expect(s.backlog()).toBeUndefined()
      }
    }
    expect(waits).toBeGreaterThan(0)
    // The tail's block doubles past 4 MiB at most once before the wait: under 16 MiB, not the 64 MiB the whole transaction takes.
    expect(most).toBeLessThanOrEqual(16 * MiB)
    s.advance(7n)
    await s.flush()
    expect(entriesAfterSnapshot(log)).toBe(batches * perBatch)
    const all = liveBytes(log)
    await s.close()
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    expect(liveBytes(again.get('a')!).equals(all)).toBe(true)
    await again.close()
  })

  it('a writer waiting on a log\'s write-back backlog is let go when the log is deleted or the store closes', async () => {
    const dir = await tempDirs.make('wb-backlog-gone')
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    const line = new Uint8Array(64 * 1024).fill(0x61)
    const fill = (log: ShapeLog, tx: bigint): void => {
      // 6 MiB with no turn of the loop between appends: past the backlog, and no write-back has landed.
      for (let b = 0; b < 6; b++) log.appendLines(tx, Array.from({ length: 16 }, (_, i) => b * 16 + i), Array.from({ length: 16 }, () => line), 16, { more: true })
    }
    fill(await makeShape(s, 'a', [row(1)]), 3n)
    const waitA = s.backlog()
    expect(waitA).toBeDefined()
    await s.deleteShape('a')
    await waitA
    expect(s.backlog()).toBeUndefined()
    fill(await makeShape(s, 'b', [row(1)]), 4n)
    const waitB = s.backlog()
    expect(waitB).toBeDefined()
    await s.close()
    await waitB
  })

  it('a flush held up by a slow sync while a big transaction appends: past twice flushBytes the writer waits on backlog() until that flush ends', async () => {
    const dir = await tempDirs.make('wb-backlog-flush')
    let holdNext = false
    let release!: () => void
    let reached!: () => void
    const gate = new Promise<void>((r) => (release = r))
    const held = new Promise<void>((r) => (reached = r))
    const fs: FsPort = {
      ...nodeFs,
      fdatasync: async (fd) => {
        if (holdNext && readlinkSync(`/proc/self/fd/${fd}`).includes('/journal/')) {
          holdNext = false
          reached()
          await gate
        }
        return nodeFs.fdatasync(fd)
      },
    }
    const s = await openFileLogStore({ dir, fs, flushIntervalMs: 60_000, flushWhenIdle: false, flushBytes: MiB })
    const log = await makeShape(s, 'a', [row(1)])
    const line = new Uint8Array(64 * 1024).fill(0x61)
    let op = 0
    const append = (lines: number): void => {
      log.appendLines(9n, Array.from({ length: lines }, () => op++), Array.from({ length: lines }, () => line), lines, { more: true })
    }
    holdNext = true
    // Past flushBytes: a flush starts at the next turn, and its journal sync waits at the gate.
    append(17)
    await held
    expect(s.backlog()).toBeUndefined()
    // The next group gathers twice flushBytes behind the held flush: the writer is asked to wait.
    append(33)
    const wait = s.backlog()
    expect(wait).toBeDefined()
    let done = false
    void wait!.then(() => (done = true))
    await new Promise((r) => setTimeout(r, 50))
    expect(done).toBe(false)
    release()
    await wait
    expect(done).toBe(true)
    log.appendLines(9n, [op], [line], 1)
    s.advance(9n)
    await s.flush()
    expect(entriesAfterSnapshot(log)).toBe(op + 1)
    await s.close()
  })

  it("stitches a read across the files' end: the written-back part from the file, the rest from memory", async () => {
    const dir = await tempDirs.make('wb-straddle')
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 1024 * 1024 })
    const log = await makeShape(s, 'd', [])
    const dataAfterSnapshot = sizeOf(dir, 'd', 'log.dat')
    for (let tx = 1n; tx <= 3n; tx++) log.appendTransaction([big(tx, 0, 100)])
    // The write-back is done once its last write (the records) landed and its continuation ran.
    const entriesAfterSnapshot = sizeOf(dir, 'd', 'entries.idx')
    for (let i = 0; i < 200 && sizeOf(dir, 'd', 'entries.idx') === entriesAfterSnapshot; i++) await new Promise((r) => setTimeout(r, 5))
    await new Promise((r) => setTimeout(r, 20))
    expect(sizeOf(dir, 'd', 'log.dat')).toBeGreaterThan(dataAfterSnapshot)
    for (let tx = 4n; tx <= 6n; tx++) log.appendTransaction([change(tx, 0, Number(tx))])
    s.advance(6n)
    await s.flush()
    const r = log.read(parseOffset('0_inf'))
    expect(r.spans.map((x) => x.kind)).toEqual(['file', 'bytes'])
    expect(r.entryCount).toBe(6)
    r.release()
    const before = liveBytes(log)
    expect(body(log.read(parseOffset('0_inf'))).map((m) => (m as { headers: { lsn: string } }).headers.lsn)).toEqual(['1', '2', '3', '4', '5', '6'])
    await s.close()
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 1024 * 1024 })
    expect(liveBytes(again.get('d')!).equals(before)).toBe(true)
    await again.close()
  })

  it('a write-back that fails (full disk) loses nothing: reads go on from memory, the checkpoint is retried, a crash replays', async () => {
    const dir = await tempDirs.make('wb-full')
    const faulty = createFaultyFs<FsPort>(nodeFs)
    const errors: StorageError[] = []
    const s = await openFileLogStore({ dir, fs: faulty.fs, flushIntervalMs: 60_000, flushWhenIdle: false, journalSegmentBytes: 2048 })
    s.onError((e) => errors.push(e))
    const log = await makeShape(s, 'b', [])
    // A port other than the real file system takes write-backs on the thread pool (write).
    faulty.rules.failNext('write', { code: 'ENOSPC', match: onFile('log.dat'), times: 2 })
    let tx = 1n
    for (; tx <= 40n; tx++) {
      log.appendTransaction([change(tx, 0, Number(tx))])
      s.advance(tx)
      await s.flush()
    }
    await s.journal?.running
    expect(errors.some((e) => e.code === 'disk_full')).toBe(true)
    expect(body(log.read(parseOffset('0_inf')))).toHaveLength(40)
    // The disk has room again: later checkpoints write everything back.
    for (; tx <= 60n; tx++) {
      log.appendTransaction([change(tx, 0, Number(tx))])
      s.advance(tx)
      await s.flush()
    }
    await s.journal?.running
    const expected = liveBytes(log)
    expect(body(log.read(parseOffset('0_inf')))).toHaveLength(60)
    // A crash now: replay brings back whatever the files lack.
    writeFileSync(`${dir}/LOCK`, '999999999')
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    expect(again.durableLsn).toBe(60n)
    expect(liveBytes(again.get('b')!).equals(expected)).toBe(true)
    await again.close()
  })

  it("a log whose index write fails as its checkpoint write-back lands fails that checkpoint alone: the run's other logs land, nothing waits for good", async () => {
    const dir = await tempDirs.make('wb-run-index')
    // Write-backs (thread-pool writes to the logs' files) wait at a gate, so appends can come while the checkpoint's run is in flight.
    let gate: Promise<void> | undefined
    let open = (): void => {}
    let waiting = 0
    const toLog = (fd: number): boolean => onFile('log.dat')([fd]) || onFile('entries.idx')([fd])
    const gated: FsPort = {
      ...nodeFs,
      async write(fd, buffer, offset, length, position) {
        if (gate && toLog(fd)) {
          waiting++
          await gate
        }
        return nodeFs.write(fd, buffer, offset, length, position)
      },
    }
    const faulty = createFaultyFs<FsPort>(gated)
    const errors: StorageError[] = []
    const s = await openFileLogStore({ dir, fs: faulty.fs, writeBackThread: false, flushIntervalMs: 60_000, flushWhenIdle: false, journalSegmentBytes: 2048, chunkBytes: 16 * 1024 })
    s.onError((e) => errors.push(e))
    const ids = ['a', 'b', 'c']
    const logs = await Promise.all(ids.map((id) => makeShape(s, id, [])))
    gate = new Promise((r) => (open = r))
    let tx = 1n
    // Past a segment's worth: the commit that closes it starts a checkpoint, whose run of a, b and c waits at the gate.
    for (; tx <= 12n; tx++) {
      for (const log of logs) log.appendTransaction([change(tx, 0, Number(tx))])
      s.advance(tx)
      await s.flush()
    }
    await until(() => waiting > 0)
    // b takes a chunk's worth and more than a write-back's meanwhile (no flush writes its index): once its run lands it writes its index, and the disk is full.
    logs[1]!.appendTransaction([big(tx, 0, 100)])
    tx++
    const full = faulty.rules.failNext('writeSync', { code: 'ENOSPC', match: onFile('chunks.idx') })
    gate = undefined
    open()
    await until(() => full.hits > 0 && !s.stats().checkpoint.running)
    expect(errors.some((e) => e.code === 'disk_full')).toBe(true)
    // No log keeps the run's flight: more appends, flushes and checkpoints go on, and everything is there.
    for (const end = tx + 12n; tx < end; tx++) {
      for (const log of logs) log.appendTransaction([change(tx, 0, Number(tx))])
      s.advance(tx)
      await s.flush()
    }
    await s.journal?.running
    const expected = logs.map((log) => liveBytes(log))
    expect(logs.map((log) => entriesAfterSnapshot(log))).toEqual([24, 25, 24])
    await s.close()
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    ids.forEach((id, i) => expect(liveBytes(again.get(id)!).equals(expected[i]!)).toBe(true))
    await again.close()
  })

  it('a cut while a write-back is in flight wins: the rolled-back bytes reach no reader and no reopen', async () => {
    // Write-backs (thread-pool writes to the log's files; the journal's go on) wait at a gate, so the race is forced, not hoped for.
    let gate: Promise<void> | undefined
    let open = (): void => {}
    const toLog = (fd: number): boolean => onFile('log.dat')([fd]) || onFile('entries.idx')([fd])
    const gated: FsPort = {
      ...nodeFs,
      async write(fd, buffer, offset, length, position) {
        if (gate && toLog(fd)) await gate
        return nodeFs.write(fd, buffer, offset, length, position)
      },
    }
    await cutWinsOverWaitingWriteBack(await tempDirs.make('wb-race'), gated, false, () => {
      gate = new Promise((r) => (open = r))
      return async () => {
        gate = undefined
        open()
      }
    })
  })

  it('a cut wins over a write-back waiting on the write-back thread too', async () => {
    const dir = await tempDirs.make('wb-race-thread')
    // Only syncs are faulted; writes go to the real files, so the thread may take them.
    await cutWinsOverWaitingWriteBack(dir, nodeFs, true, () => {
      // The thread is kept busy with a big write queued first, so the log's write-back waits behind it.
      writeFileSync(`${dir}/busy`, '')
      const busy = writeBackThread().writeAll([{ ref: new FileRef(`${dir}/busy`, 'r+'), bytes: Buffer.alloc(64 * 1024 * 1024, 1), position: 0 }])
      return () => busy
    })
  })
})

/**
 * Log c appends a 300 KiB transaction (its write-back starts, and `hold`
 * makes it wait), then the flush's journal sync fails and c is cut back.
 * Once let go, the write lands and must count for nothing; the replay of
 * that transaction lands in its place, also after a reopen.
 */
async function cutWinsOverWaitingWriteBack(dir: string, base: FsPort, writeBackThread: boolean, hold: () => () => Promise<void>): Promise<void> {
  const faulty = createFaultyFs<FsPort>(base)
  const s = await openFileLogStore({ dir, fs: faulty.fs, writeBackThread, flushIntervalMs: 60_000, flushWhenIdle: false })
  const log = await makeShape(s, 'c', [row(1)])
  log.appendTransaction([change(10n, 0, 1)])
  s.advance(10n)
  await s.flush()
  const durable = liveBytes(log)

  const release = hold()
  log.appendTransaction([big(20n, 0, 300)])
  s.advance(20n)
  faulty.rules.failNext('fdatasync', { code: 'EIO', match: onFile('00000001.jnl') })
  const err = await s.flush().catch((e: unknown) => e)
  expect(err).toBeInstanceOf(FlushError)
  expect((err as FlushError).rolledBack).toContain('c')
  await release()
  await new Promise((r) => setTimeout(r, 100))
  // The write landed, then was cut away; memory and files agree on the durable prefix.
  expect(liveBytes(log).equals(durable)).toBe(true)
  expect(sizeOf(dir, 'c', 'log.dat')).toBeLessThan(300 * 1024)

  log.appendTransaction([big(20n, 0, 300)])
  s.advance(20n)
  await s.flush()
  const after = liveBytes(log)
  expect(after.length).toBeGreaterThan(300 * 1024)
  await s.close()
  const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
  expect(liveBytes(again.get('c')!).equals(after)).toBe(true)
  await again.close()
}
