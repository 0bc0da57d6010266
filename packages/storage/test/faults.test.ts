/**
 * Disk full, I/O errors and torn writes, injected through the filesystem port
 * into real files. Each fault must surface as a typed error, hold the watermark
 * back, leave nothing corrupt, and stop mattering once it clears.
 */
import { shapeDir } from '../src/file/shape-dirs.js'
import { storedIds } from './fixtures/log-dirs.js'
import { statSync, writeFileSync } from 'node:fs'
import { createFaultyFs, useTempDir } from '@sluice/test-utils'
import { formatOffset, parseOffset } from '@sluice/protocol'
import { afterEach, describe, expect, it } from 'vitest'
import { FlushError, StorageError, nodeFs, openFileLogStore } from '../src/index.js'
import type { FileLogStore, FsPort } from '../src/index.js'
import { SNAPSHOT_END, body, change, makeShape, row } from './contract-suite.js'
import { onFile } from './fixtures/fd-match.js'

const tempDirs = useTempDir()
const tempDir = (prefix: string) => tempDirs.make(prefix)

const onPath =
  (name: string) =>
  (args: readonly unknown[]): boolean =>
    String(args[0]).endsWith(name) || String(args[1]).endsWith(name)

async function codeOf(fn: () => unknown): Promise<string> {
  try {
    await fn()
  } catch (err) {
    return (err as StorageError).code ?? String(err)
  }
  return 'no error'
}

/** What is left in tmp/ once it empties, or after 5 s: a dropped snapshot's directory is removed in the background. */
async function tmpEmptied(dir: string): Promise<string[]> {
  for (let i = 0; i < 500 && nodeFs.readdirSync(`${dir}/tmp`).length > 0; i++) await new Promise((r) => setTimeout(r, 10))
  return nodeFs.readdirSync(`${dir}/tmp`)
}

describe('fault injection', () => {
  let store: FileLogStore | undefined
  afterEach(async () => {
    await store?.close().catch(() => undefined)
    store = undefined
  })

  async function setup(chunkBytes = 4096, journal = true) {
    const dir = await tempDir('faults')
    const faulty = createFaultyFs<FsPort>(nodeFs)
    store = await openFileLogStore({ dir, chunkBytes, fs: faulty.fs, flushIntervalMs: 60_000, flushWhenIdle: false, journal })
    return { dir, rules: faulty.rules, store }
  }

  it('writing through (no journal): a full disk during an append is a typed error that holds the watermark and loses nothing', async () => {
    const { dir, rules, store: s } = await setup(4096, false)
    await makeShape(s, 'a', [row(1)])
    const log = s.get('a')!
    log.appendTransaction([change(10n, 0, 1)])
    s.advance(10n)
    await s.flush()
    const sizeBefore = statSync(`${shapeDir(dir, 'a')}/log.dat`).size

    rules.failNext('writeSync', { code: 'ENOSPC', match: onFile('log.dat') })
    expect(await codeOf(() => log.appendTransaction([change(20n, 0, 2), change(20n, 2, 3)]))).toBe('disk_full')
    expect(log.appendedHead().last).toEqual(parseOffset('10_0'))
    // The caller moves on regardless; the watermark must not pass the failed transaction.
    s.advance(30n)
    const flushed = await s.flush()
    expect(flushed.durableLsn).toBe(19n)
    expect(statSync(`${shapeDir(dir, 'a')}/log.dat`).size).toBe(sizeBefore)

    // The fault clears; the replayed transaction goes in and the watermark catches up.
    expect(log.appendTransaction([change(20n, 0, 2), change(20n, 2, 3)])).toBe(2)
    s.advance(30n)
    expect((await s.flush()).durableLsn).toBe(30n)
    expect(body(log.read(parseOffset('0_0')))).toHaveLength(3)
  })

  it('writing through (no journal): a torn write of the entry index during a flush rolls the log back, and the replay lands in its place', async () => {
    const { dir, rules, store: s } = await setup(4096, false)
    await makeShape(s, 'torn', [])
    const log = s.get('torn')!
    log.appendTransaction([change(5n, 0, 1), change(5n, 2, 2)])
    s.advance(5n)
    // Index records are written by the flush, just before the sync.
    rules.tornWrite({ bytes: 40, code: 'EIO', match: onFile('entries.idx') })
    const err = await s.flush().then(
      () => undefined,
      (e: unknown) => e,
    )
    expect(err).toBeInstanceOf(FlushError)
    expect((err as FlushError).rolledBack).toEqual(['torn'])
    expect(s.durableLsn).toBe(0n)
    expect(statSync(`${shapeDir(dir, 'torn')}/entries.idx`).size).toBe(16 + 32) // header + snapshot-end record
    expect(log.appendTransaction([change(5n, 0, 1), change(5n, 2, 2)])).toBe(2)
    s.advance(5n)
    await s.flush()
    expect(body(log.read(parseOffset('0_0')))).toHaveLength(2)

    // And after a reopen the log is exactly what was published.
    await s.close()
    store = await openFileLogStore({ dir, chunkBytes: 4096 })
    expect(formatOffset(store.get('torn')!.head().lastOffset)).toBe('5_2')
    expect(body(store.get('torn')!.read(parseOffset('0_0')))).toHaveLength(2)
  })

  it('writing through (no journal): a torn write of the entry bytes is cut away too', async () => {
    const { dir, rules, store: s } = await setup(4096, false)
    await makeShape(s, 'tornd', [])
    const log = s.get('tornd')!
    rules.tornWrite({ bytes: 'half', code: 'ENOSPC', match: onFile('log.dat') })
    expect(await codeOf(() => log.appendTransaction([change(5n, 0, 1)]))).toBe('disk_full')
    const head = log.appendedHead()
    expect(statSync(`${shapeDir(dir, 'tornd')}/log.dat`).size).toBe(head.dataEnd)
    expect(log.appendTransaction([change(5n, 0, 1)])).toBe(1)
  })

  // Per-log syncs (journal: false): one log's sync fails, the other's succeeds.
  it('a failed sync rolls back what was not durable and asks for a replay from the watermark', async () => {
    const { rules, store: s } = await setup(4096, false)
    await makeShape(s, 'a', [])
    const a = s.get('a')!
    await makeShape(s, 'b', [])
    const b = s.get('b')!
    a.appendTransaction([change(10n, 0, 1)])
    b.appendTransaction([change(10n, 0, 2)])
    s.advance(10n)
    await s.flush()

    a.appendTransaction([change(20n, 0, 3)])
    b.appendTransaction([change(20n, 0, 4)])
    s.advance(20n)
    const rule = rules.failNext('fdatasync', { code: 'EIO', match: onFile('log.dat'), times: 1 })
    let error: unknown
    await s.flush().catch((err: unknown) => (error = err))
    expect(rule.hits).toBe(1)
    expect(error).toBeInstanceOf(FlushError)
    const fe = error as FlushError
    expect(fe.code).toBe('io_error')
    expect(fe.durableLsn).toBe(10n)
    expect(fe.rolledBack).toHaveLength(1)
    expect(s.durableLsn).toBe(10n)
    expect(s.lastError).toBe(fe)
    // The failed log forgot transaction 20; the other kept it (synced, waiting for the watermark).
    const failed = fe.rolledBack[0] === 'a' ? a : b
    const kept = failed === a ? b : a
    expect(formatOffset(failed.appendedHead().last)).toBe('10_0')
    expect(formatOffset(kept.appendedHead().last)).toBe('20_0')
    expect(formatOffset(failed.head().lastOffset)).toBe('10_0')

    // Replay from the watermark: idempotent for the log that kept it.
    expect(a.appendTransaction([change(20n, 0, 3)]) + b.appendTransaction([change(20n, 0, 4)])).toBe(1)
    s.advance(20n)
    expect((await s.flush()).durableLsn).toBe(20n)
    expect(s.lastError).toBeUndefined()
    expect(body(a.read(parseOffset('0_0')))).toHaveLength(2)
    expect(body(b.read(parseOffset('0_0')))).toHaveLength(2)
  })

  it('without the journal, a failed watermark publish keeps the old watermark until it succeeds', async () => {
    const { dir, rules, store: s } = await setup(4096, false)
    await makeShape(s, 'w', [])
    const log = s.get('w')!
    log.appendTransaction([change(10n, 0, 1)])
    s.advance(10n)
    rules.failNext('renameSync', { code: 'EIO', match: onPath('watermark') })
    expect(await codeOf(() => s.flush())).toBe('io_error')
    expect(s.durableLsn).toBe(0n)
    expect(log.read(parseOffset('0_0')).entryCount).toBe(0)
    expect((await s.flush()).durableLsn).toBe(10n)
    expect(log.read(parseOffset('0_0')).entryCount).toBe(1)
    await s.close()
    store = await openFileLogStore({ dir })
    expect(store.durableLsn).toBe(10n)
  })

  it('a journal group that fails to publish a watermark keeps the old one, and the next group publishes it', async () => {
    const { dir, rules, store: s } = await setup()
    await makeShape(s, 'w', [])
    const log = s.get('w')!
    log.appendTransaction([change(10n, 0, 1)])
    s.advance(10n)
    await s.flush()
    // Nothing appended: the group holds the watermark alone.
    s.advance(20n)
    rules.failNext('fdatasync', { code: 'EIO' })
    expect(await codeOf(() => s.flush())).toBe('io_error')
    expect(s.durableLsn).toBe(10n)
    // As after any FlushError, the caller advances again (it replays from durableLsn).
    s.advance(20n)
    expect((await s.flush()).durableLsn).toBe(20n)
    expect(log.read(parseOffset('0_0')).entryCount).toBe(1)
    // A crash now (once the background checkpoint that the new segment started is
    // done, so no two processes write at once): the last group's watermark is the store's.
    await s.journal?.running
    writeFileSync(`${dir}/LOCK`, '999999999')
    store = await openFileLogStore({ dir })
    expect(store.durableLsn).toBe(20n)
  })

  it('a full disk while writing a snapshot leaves no shape behind, and creation can be retried', async () => {
    const { dir, rules, store: s } = await setup()
    const w = s.createShape('snap')
    rules.failNext('writeSync', { code: 'ENOSPC', match: onFile('log.dat') })
    expect(await codeOf(() => w.append([row(1), row(2)]))).toBe('disk_full')
    expect(s.get('snap')).toBeUndefined()
    expect(await tmpEmptied(dir)).toEqual([])
    await makeShape(s, 'snap', [row(1), row(2)])
    const log = s.get('snap')!
    expect(body(log.read(parseOffset('-1')))).toHaveLength(3)
  })

  it('a failed sync while finishing a snapshot rejects it without publishing the shape', async () => {
    const { dir, rules, store: s } = await setup()
    const w = s.createShape('fin')
    w.append([row(1)])
    rules.failNext('fdatasync', { code: 'EIO' })
    expect(await codeOf(() => w.finish(SNAPSHOT_END))).toBe('io_error')
    expect(s.get('fin')).toBeUndefined()
    expect(storedIds(dir)).toEqual([])
    await makeShape(s, 'fin', [row(1)])
    const log = s.get('fin')!
    expect(body(log.read(parseOffset('-1')))).toHaveLength(2)
  })

  it('a full disk during a live append to a finishing log fails that snapshot only, without holding the watermark', async () => {
    const { dir, rules, store: s } = await setup()
    const other = await makeShape(s, 'other', [])
    other.appendTransaction([change(50n, 0, 1)])
    s.advance(50n)
    await s.flush()
    const w = s.createShape('fin')
    w.append([row(1)])
    const finishing = w.finish(SNAPSHOT_END)
    expect(w.appendTransaction([change(20n, 0, 1)])).toBe(1)
    rules.failNext('writeSync', { code: 'ENOSPC', match: onFile('log.dat') })
    // The transaction lies below the watermark, so the watermark cannot wait for
    // a replay of it: the snapshot fails instead.
    expect(await codeOf(() => w.appendTransaction([change(30n, 0, 2)]))).toBe('disk_full')
    expect(await codeOf(() => finishing)).toBe('disk_full')
    expect(await codeOf(() => w.appendTransaction([change(40n, 0, 3)]))).toBe('invalid_append')
    expect(s.get('fin')).toBeUndefined()
    other.appendTransaction([change(60n, 0, 2)])
    s.advance(60n)
    expect((await s.flush()).durableLsn).toBe(60n)
    expect(await tmpEmptied(dir)).toEqual([])
    expect(storedIds(dir)).toEqual(['other'])
    // Invalid input is not a fault: it leaves a finishing snapshot intact.
    const again = s.createShape('fin')
    const done = again.finish(SNAPSHOT_END)
    expect(again.appendTransaction([change(20n, 0, 1)])).toBe(1)
    expect(await codeOf(() => again.appendTransaction([change(25n, 2, 1), change(25n, 1, 2)]))).toBe('invalid_append')
    expect(body((await done).read(parseOffset('0_0')))).toHaveLength(1)
  })

  it('writing through (no journal): keeps working when cutting back a failed append fails too', async () => {
    const { dir, rules, store: s } = await setup(4096, false)
    await makeShape(s, 'cut', [])
    const log = s.get('cut')!
    rules.tornWrite({ bytes: 10, code: 'EIO', match: onFile('log.dat') })
    rules.failNext('ftruncateSync', { code: 'EIO', times: 3 })
    expect(await codeOf(() => log.appendTransaction([change(5n, 0, 1), change(5n, 2, 2)]))).toBe('io_error')
    // The garbage stays past the end for now; the next append cuts it and writes in place.
    expect(log.appendTransaction([change(6n, 0, 1)])).toBe(1)
    s.advance(6n)
    await s.flush()
    expect(statSync(`${shapeDir(dir, 'cut')}/entries.idx`).size).toBe(16 + 2 * 32)
    expect(statSync(`${shapeDir(dir, 'cut')}/log.dat`).size).toBe(log.appendedHead().dataEnd)
    await s.close()
    store = await openFileLogStore({ dir })
    expect(formatOffset(store.get('cut')!.head().lastOffset)).toBe('6_0')
  })

  it('reports faults of timed flushes to error listeners and recovers on its own', async () => {
    const dir = await tempDir('faults-timed')
    const faulty = createFaultyFs<FsPort>(nodeFs)
    const s = await openFileLogStore({ dir, fs: faulty.fs, flushIntervalMs: 5 })
    store = s
    const errors: StorageError[] = []
    s.onError((e) => errors.push(e))
    await makeShape(s, 't', [])
    const log = s.get('t')!
    const rule = faulty.rules.failAlways('fdatasync', { code: 'EIO' })
    log.appendTransaction([change(3n, 0, 1)])
    s.advance(3n)
    await new Promise((r) => setTimeout(r, 300))
    expect(errors.length).toBeGreaterThan(0)
    // Retries back off: a 5 ms interval without backoff would have failed about 60 times by now.
    expect(errors.length).toBeLessThan(20)
    expect(errors[0]).toBeInstanceOf(StorageError)
    expect(s.durableLsn).toBe(0n)
    rule.remove()
    // The rolled-back transaction must be replayed, as the server does after a FlushError.
    log.appendTransaction([change(3n, 0, 1)])
    s.advance(3n)
    for (let i = 0; i < 50 && s.durableLsn < 3n; i++) await new Promise((r) => setTimeout(r, 10))
    expect(s.durableLsn).toBe(3n)
    expect(body(log.read(parseOffset('0_0')))).toHaveLength(1)
  })
})
