// A shared range's own bookkeeping against a real file store: no Postgres, no HTTP.
import { pbkdf2 } from 'node:crypto'
import { BEFORE_ALL } from '@sluice/protocol'
import { type FileLogStore, openFileLogStore, readSpans } from '@sluice/storage'
import { useTempDir } from '@sluice/test-utils'
import { afterEach, describe, expect, it } from 'vitest'
import { SharedRange, SharedReads } from '../../../src/http/live/index.js'
import { makeShape, rowJson } from './helpers.js'

const dirs = useTempDir('shared-reads-unit')
const stores: FileLogStore[] = []
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close().catch(() => {})
})

/** Holds every thread of libuv's pool for a while, so file reads queued meanwhile wait. */
function busyThreadPool(): Promise<unknown> {
  const threads = Number(process.env['UV_THREADPOOL_SIZE'] ?? 4)
  return Promise.all(Array.from({ length: threads }, () => new Promise((resolve) => pbkdf2('x', 'y', 200_000, 32, 'sha256', resolve))))
}

describe('SharedReads', () => {
  it('keeps the log file open until a range read on the thread pool is copied (a closed descriptor is reused by the next open)', async () => {
    const dir = await dirs.make('store')
    const writer = await openFileLogStore({ dir, chunkBytes: 4 * 1024 * 1024 })
    stores.push(writer)
    // Over 256 KiB each, so a shared range is read on the thread pool; the two logs' bytes differ at every position.
    await makeShape(writer, 'a', Array.from({ length: 1200 }, (_, i) => rowJson(i, { pad: 'a'.repeat(400) })))
    await makeShape(writer, 'b', Array.from({ length: 1200 }, (_, i) => rowJson(i, { pad: 'b'.repeat(400) })))
    await writer.close()
    stores.length = 0
    // Reopened, so both logs are in their files; one descriptor kept open at a time.
    const store = await openFileLogStore({ dir, chunkBytes: 4 * 1024 * 1024, maxOpenFiles: 1 })
    stores.push(store)
    const a = store.get('a')!
    const b = store.get('b')!
    const direct = a.read(BEFORE_ALL)
    const expected = readSpans(direct)
    direct.release()
    expect(expected.length).toBeGreaterThan(256 * 1024)

    const busy = busyThreadPool()
    const range = new SharedReads().read(a, BEFORE_ALL)
    expect(range).toBeInstanceOf(SharedRange)
    // Reading the other log with one descriptor allowed closes every unpinned one and opens b's file,
    // which takes the lowest free number: a's, if a's read let go of it.
    const other = b.read(BEFORE_ALL)
    other.release()
    await busy

    const body = await (range as SharedRange).body(undefined)
    expect(body.includes('"pad":"bbbb'), 'the body holds the other log\'s rows').toBe(false)
    expect(body.equals(Buffer.concat([Buffer.from('['), expected.subarray(0, expected.length - 1), Buffer.from(']')]))).toBe(true)
  })
})
