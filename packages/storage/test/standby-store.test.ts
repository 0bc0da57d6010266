/**
 * A standby's store (`FileLogStore.prepare`, `refresh`, `promote`): built from
 * the heads file beside a running writer without the lock and without writing
 * or opening a log file, kept current while it waits, and made the writer when
 * the lock comes free, with every log checked against its files as an open
 * does. Logs whose id and meta stay are the same objects before and after (a
 * server's shapes were restored on them); the rest are new or gone.
 *
 * The writer runs in this process with a lock these tests hand over (a real
 * flock would call a second holder in one process this process), its
 * writes through a port that keeps unsynced bytes from every other reader, so
 * giving the lock away without a close acts as a kill -9 that loses the page
 * cache too.
 */
import { cpSync, existsSync, readFileSync, writeFileSync } from 'node:fs'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { HEADS_FILE } from '../src/file/heads-file.js'
import { nodeFs, openFileLogStore, FileLogStore } from '../src/index.js'
import type { FileStoreOptions, FsPort, ShapeLog, StoreLockOptions } from '../src/index.js'
import { change, makeShape, readAllEntries, row } from './contract-suite.js'
import { volatileFs } from './fixtures/volatile-fs.js'
import { countingFs } from './fixtures/counting-fs.js'

const tempDirs = useTempDir()

const IDS = ['a', 'b', 'c', 'd', 'e']
const BASE: Partial<FileStoreOptions> = { flushIntervalMs: 60_000, flushWhenIdle: false, chunkBytes: 300, headsIntervalMs: 0 }

/** A lock one process can hand from one store to another: taken by the first caller, until `kill`. */
function handoverLock(): { lock: StoreLockOptions; kill(): void } {
  let held = false
  return {
    lock: {
      lockFile: () => {
        if (held) return false
        held = true
        return true
      },
    },
    kill: () => {
      held = false
    },
  }
}

/** A port counting the opens of the heads file in `dir`. */
function headsReads(dir: string): { fs: FsPort; opens(): number; reset(): void } {
  let opens = 0
  return {
    fs: {
      ...nodeFs,
      openSync(path, flags, mode) {
        if (path === `${dir}/${HEADS_FILE}`) opens++
        return nodeFs.openSync(path, flags, mode)
      },
    },
    opens: () => opens,
    reset: () => {
      opens = 0
    },
  }
}

/** The lineage the heads file in `dir` records (heads-file.ts). */
function lineageOf(dir: string): bigint {
  return readFileSync(`${dir}/${HEADS_FILE}`).readBigUInt64LE(8)
}

function contents(s: FileLogStore): Record<string, unknown[]> {
  return Object.fromEntries(s.ids().sort().map((id) => [id, readAllEntries(s.get(id)!)]))
}

/** Appends one row in transaction `tx` to each of `ids`, and makes it durable. */
async function appendDurable(s: FileLogStore, ids: readonly string[], tx: bigint, row: number): Promise<void> {
  for (const id of ids) s.get(id)!.appendTransaction([change(tx, 0, row)])
  s.advance(tx)
  await s.flush()
}

/** A writer of five logs with snapshots, several chunks and transactions, flushed, that wrote its heads file; LOCK names another process, as a writer elsewhere leaves it. */
async function runningWriter(dir: string, lock: StoreLockOptions): Promise<FileLogStore> {
  const w = await openFileLogStore({ dir, fs: volatileFs(nodeFs), lock, ...BASE })
  for (const id of IDS) await makeShape(w, id, [row(1), row(2)])
  for (let tx = 1n; tx <= 8n; tx++) {
    IDS.forEach((id, i) => w.get(id)!.appendTransaction([change(tx, 0, i), change(tx, 1, i + 1)]))
    w.advance(tx)
  }
  await w.flush()
  await w.writeHeads()
  writeFileSync(`${dir}/LOCK`, '999999999')
  return w
}

describe('standby store', () => {
  it('is built from the heads file without opening a log, refuses writes, and on promotion keeps the objects of logs that stayed, at their durable heads', async () => {
    const dir = await tempDirs.make('standby-promote')
    const { lock, kill } = handoverLock()
    const w = await runningWriter(dir, lock)

    const counting = countingFs(nodeFs, { stats: true })
    const standby = await FileLogStore.prepare({ dir, fs: counting.fs, ...BASE })
    expect(counting.opens()).toBe(0)
    expect(standby.prepared).toBe(true)
    expect(standby.ids().sort()).toEqual(IDS)
    for (const id of IDS) expect(standby.get(id)!.head()).toEqual(w.get(id)!.head())
    expect(() => standby.createShape('x')).toThrow(expect.objectContaining({ code: 'store_not_promoted' }))
    await expect(standby.flush()).rejects.toMatchObject({ code: 'store_not_promoted' })
    await expect(standby.deleteShape('a')).rejects.toMatchObject({ code: 'store_not_promoted' })
    const before = new Map(IDS.map((id) => [id, standby.get(id)!]))

    // The writer goes on without writing its heads file again: a and b grow (durably), c goes, f comes,
    // and d takes a transaction no flush made durable; then it dies.
    await appendDurable(w, ['a', 'b'], 9n, 7)
    await w.deleteShape('c')
    await makeShape(w, 'f', [row(3)])
    const durable = contents(w)
    w.get('d')!.appendTransaction([change(10n, 0, 8)])
    w.advance(10n)
    kill()

    await standby.promote({ ...lock, waitMs: 5_000 })
    expect(standby.prepared).toBe(false)
    expect(standby.durableLsn).toBe(9n)
    for (const id of ['a', 'b', 'd', 'e']) expect(standby.get(id)).toBe(before.get(id))
    expect(standby.get('c')).toBeUndefined()
    expect(standby.get('f')).toBeDefined()
    expect(contents(standby)).toEqual(durable)
    expect(standby.cleanOpened).toBe(2)

    // A writer now: what it appends survives a close and an open.
    await appendDurable(standby, ['a'], 11n, 9)
    const after = contents(standby)
    await standby.close()
    // The handed-over lock knows no close: a lock taken afresh.
    const reopened = await openFileLogStore({ dir, lock: { lockFile: () => true }, ...BASE })
    expect(contents(reopened)).toEqual(after)
    await reopened.close()
  })

  it('follows each new heads file on refresh (logs that stay keep their object), and promotes without reading it again', async () => {
    const dir = await tempDirs.make('standby-refresh')
    const { lock, kill } = handoverLock()
    const w = await runningWriter(dir, lock)
    const standby = await FileLogStore.prepare({ dir, ...BASE })
    const a = standby.get('a')
    expect(await standby.refresh()).toBe(false)

    await appendDurable(w, ['a'], 9n, 7)
    await w.deleteShape('b')
    await makeShape(w, 'g', [row(4)])
    await w.writeHeads()
    expect(await standby.refresh()).toBe(true)
    expect(await standby.refresh()).toBe(false)
    expect(standby.get('a')).toBe(a)
    expect(standby.get('a')!.head()).toEqual(w.get('a')!.head())
    expect(standby.get('b')).toBeUndefined()
    expect(standby.get('g')!.head()).toEqual(w.get('g')!.head())
    const durable = contents(w)
    kill()

    await standby.promote({ ...lock, waitMs: 5_000 })
    // Every log stood as the file in place says: none scanned.
    expect(standby.cleanOpened).toBe(IDS.length)
    expect(standby.get('a')).toBe(a)
    expect(contents(standby)).toEqual(durable)
    await standby.close()
  })

  it('does not trust what it prepared once the heads file in place is another: a log made again under a deleted id is read from its files', async () => {
    const dir = await tempDirs.make('standby-recreated')
    const { lock, kill } = handoverLock()
    const w = await runningWriter(dir, lock)
    const standby = await FileLogStore.prepare({ dir, ...BASE })
    const a = standby.get('a')!
    const e = standby.get('e')!

    // Deleted and made again with the same rows and meta: its files could pass for the old ones, so the
    // writer removed the heads file (the deleted-id guard) before placing it.
    await w.deleteShape('a')
    await makeShape(w, 'a', [row(1), row(2)])
    expect(existsSync(`${dir}/${HEADS_FILE}`)).toBe(false)
    await appendDurable(w, ['a'], 9n, 5)
    const durable = contents(w)
    kill()

    await standby.promote({ ...lock, waitMs: 5_000 })
    expect(contents(standby)).toEqual(durable)
    // Same meta, so the object stays, brought to what its files hold.
    expect(standby.get('a')).toBe(a)
    expect(standby.get('e')).toBe(e)
    expect(standby.cleanOpened).toBe(0)
    await standby.close()
  })

  it('promotes on what it prepared when the writer put a newer heads file of its lineage in place, without reading that file; the first log it makes draws a new lineage', async () => {
    const dir = await tempDirs.make('standby-lineage')
    const { lock, kill } = handoverLock()
    const w = await runningWriter(dir, lock)
    const reads = headsReads(dir)
    const standby = await FileLogStore.prepare({ dir, fs: reads.fs, ...BASE })
    const before = new Map(IDS.map((id) => [id, standby.get(id)!]))
    const lineage = lineageOf(dir)

    // A newer file (say, the one a stopping writer writes at its close), then more work it does not name.
    await appendDurable(w, ['a', 'b'], 9n, 7)
    await w.deleteShape('c')
    await makeShape(w, 'f', [row(3)])
    await w.writeHeads()
    expect(lineageOf(dir)).toBe(lineage)
    await appendDurable(w, ['e'], 10n, 2)
    await w.deleteShape('d')
    await makeShape(w, 'g', [row(4)])
    const durable = contents(w)
    kill()

    reads.reset()
    await standby.promote({ ...lock, waitMs: 5_000 })
    // Its version looked at, never read: the prepared entries are checked against the files instead.
    expect(reads.opens()).toBe(1)
    expect(contents(standby)).toEqual(durable)
    for (const id of ['a', 'b', 'e']) expect(standby.get(id)).toBe(before.get(id))
    expect(standby.get('c')).toBeUndefined()
    expect(standby.get('d')).toBeUndefined()
    // a, b and e grew after the prepared entries were taken: each was scanned from its entry on.
    expect(standby.cleanOpened).toBe(0)

    // Files of its lineage held elsewhere may name logs its predecessor deleted (d): its first creation gives
    // the file in place a new lineage (rewritten in place: the file stays good for an open), and so do its own.
    await makeShape(standby, 'h', [row(5)])
    const patched = lineageOf(dir)
    expect(patched).not.toBe(lineage)
    await standby.writeHeads()
    expect(lineageOf(dir)).toBe(patched)
    const after = contents(standby)
    await standby.close()
    const reopened = await openFileLogStore({ dir, lock: { lockFile: () => true }, ...BASE })
    expect(contents(reopened)).toEqual(after)
    await reopened.close()
  })

  it('reads the file in place when the writer made a log again under a deleted id since: that drew a new lineage', async () => {
    const dir = await tempDirs.make('standby-new-lineage')
    const { lock, kill } = handoverLock()
    const w = await runningWriter(dir, lock)
    const reads = headsReads(dir)
    const standby = await FileLogStore.prepare({ dir, fs: reads.fs, ...BASE })
    const lineage = lineageOf(dir)

    await w.deleteShape('a')
    await makeShape(w, 'a', [row(1), row(2)])
    await appendDurable(w, ['a'], 9n, 5)
    await w.writeHeads()
    expect(lineageOf(dir)).not.toBe(lineage)
    const durable = contents(w)
    kill()

    reads.reset()
    await standby.promote({ ...lock, waitMs: 5_000 })
    expect(reads.opens()).toBe(2)
    expect(contents(standby)).toEqual(durable)
    expect(standby.cleanOpened).toBe(IDS.length)
    await standby.close()
  })

  it('after a copy of the store (other inodes), its writer draws its own lineage, so a standby prepared from the copied file reads the writer\'s', async () => {
    const original = await tempDirs.make('standby-original')
    const first = await openFileLogStore({ dir: original, lock: { lockFile: () => true }, ...BASE })
    for (const id of IDS) await makeShape(first, id, [row(1), row(2)])
    await first.close()
    const copied = lineageOf(original)
    const dir = `${await tempDirs.make('standby-copy')}/store`
    cpSync(original, dir, { recursive: true })

    const { lock, kill } = handoverLock()
    const w = await openFileLogStore({ dir, lock, ...BASE })
    // Every entry names a file of the original: each log is scanned.
    expect(w.cleanOpened).toBe(0)
    const standby = await FileLogStore.prepare({ dir, ...BASE })
    await w.close()
    expect(lineageOf(dir)).not.toBe(copied)
    kill()
    await standby.promote({ ...lock, waitMs: 5_000 })
    expect(standby.cleanOpened).toBe(IDS.length)
    await standby.close()
  })

  it('waits for the lock, keeping itself current between attempts, and takes over when the writer dies', async () => {
    const dir = await tempDirs.make('standby-wait')
    const { lock, kill } = handoverLock()
    const w = await runningWriter(dir, lock)
    const standby = await FileLogStore.prepare({ dir, ...BASE })
    let waits = 0
    let refreshed = 0
    const promoted = standby.promote({
      ...lock,
      waitMs: Number.POSITIVE_INFINITY,
      whileWaiting: async () => {
        waits++
        if (await standby.refresh()) refreshed++
      },
    })
    let done = false
    void promoted.then(() => (done = true))
    await new Promise((r) => setTimeout(r, 250))
    expect(done).toBe(false)
    await appendDurable(w, ['e'], 9n, 1)
    await w.writeHeads()
    await new Promise((r) => setTimeout(r, 250))
    expect(refreshed).toBe(1)
    expect(standby.get('e')!.head()).toEqual(w.get('e')!.head())
    const durable = contents(w)
    kill()
    await promoted
    expect(waits).toBeGreaterThanOrEqual(2)
    expect(contents(standby)).toEqual(durable)
    await standby.close()
  })

  it('prepares an empty store (no watermark, no heads file) and promotes it as an open would', async () => {
    const dir = await tempDirs.make('standby-empty')
    const standby = await FileLogStore.prepare({ dir, ...BASE })
    expect(standby.ids()).toEqual([])
    expect(await standby.refresh()).toBe(false)
    await standby.promote()
    await makeShape(standby, 'a', [row(1)])
    const log: ShapeLog = standby.get('a')!
    // The row and the snapshot's end.
    expect(readAllEntries(log)).toHaveLength(2)
    await standby.close()
    // A prepared store closed before its promotion writes nothing and holds nothing.
    const idle = await FileLogStore.prepare({ dir, ...BASE })
    expect(idle.ids()).toEqual(['a'])
    await idle.close()
    expect(() => idle.get('a')).not.toThrow()
    await expect(idle.promote()).rejects.toMatchObject({ code: 'store_closed' })
    const again = await openFileLogStore({ dir, ...BASE })
    expect(again.ids()).toEqual(['a'])
    await again.close()
  })
})
