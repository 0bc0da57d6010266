/**
 * The write-back thread (write-back.ts): the bytes land where they were sent,
 * in batches of every size; a failing file fails only its own write, with the
 * system's error code; a closed log's write and a lost thread fail cleanly;
 * and a store on the real file system writes back through it.
 */
import { shapeDir } from '../src/file/shape-dirs.js'
import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs'
import { parseOffset } from '@sluice/protocol'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { FileRef } from '../src/file/fd-cache.js'
import { openFileLogStore } from '../src/index.js'
import { WriteBackThread } from '../src/file/write-back.js'
import { body, change, makeShape } from './contract-suite.js'

const tempDirs = useTempDir()

function file(dir: string, name: string, size: number): FileRef {
  const path = `${dir}/${name}`
  writeFileSync(path, Buffer.alloc(size, 0x2e))
  return new FileRef(path, 'r+')
}

/** One file's write as a job of its own. */
const put = (t: WriteBackThread, ref: FileRef, bytes: Uint8Array, position: number): Promise<void> => t.writeAll([{ ref, bytes, position }])

/** A thread of the test's own, closed at the end whatever happens. */
async function withThread(run: (t: WriteBackThread) => Promise<void>): Promise<void> {
  const t = new WriteBackThread()
  try {
    await run(t)
  } finally {
    await t.close()
  }
}

const fill = (n: number, seed: number): Buffer => Buffer.from(Array.from({ length: n }, (_, i) => (i * 7 + seed) % 251))

describe('write-back thread', () => {
  it('writes each job at its position, across many batches and past a block', async () => {
    const dir = await tempDirs.make('wbt')
    await withThread(async (t) => {
      const refs = Array.from({ length: 1500 }, (_, i) => file(dir, `f${i}`, 64))
      // More jobs than one batch holds, some at a hole past the file's end.
      await Promise.all(refs.map((ref, i) => put(t, ref, fill(10 + (i % 50), i), i % 3 === 0 ? 100 : 8)))
      refs.forEach((ref, i) => {
        const got = readFileSync(ref.path)
        const at = i % 3 === 0 ? 100 : 8
        expect(got.subarray(at, at + 10 + (i % 50)).equals(fill(10 + (i % 50), i))).toBe(true)
        expect(got.subarray(0, 8).equals(Buffer.alloc(8, 0x2e))).toBe(true)
    })
    // Writes bigger than a shared block travel in block-sized parts, also right after a closed log's.
    const big = file(dir, 'big', 0)
    const bigger = file(dir, 'bigger', 0)
    const closed = file(dir, 'closed', 0)
    closed.retired = true
    const bytes = fill(3 * 1024 * 1024 + 17, 5)
    const more = fill(5 * 1024 * 1024, 6)
    const settled = await Promise.allSettled([put(t, closed, fill(2 * 1024 * 1024, 1), 0), put(t, big, bytes, 0), put(t, bigger, more, 0), put(t, refs[0]!, fill(4, 9), 0)])
    expect(settled.map((r) => r.status)).toEqual(['rejected', 'fulfilled', 'fulfilled', 'fulfilled'])
    expect(readFileSync(big.path).equals(bytes)).toBe(true)
    expect(readFileSync(bigger.path).equals(more)).toBe(true)
    expect(readFileSync(refs[0]!.path).subarray(0, 4).equals(fill(4, 9))).toBe(true)
    // A job of two big writes (a log's data and records) is cut across parts, each piece at its own position.
    const data = file(dir, 'data', 0)
    const records = file(dir, 'records', 0)
    const dataBytes = fill(2 * 1024 * 1024 + 333, 7)
    const recordBytes = fill(1024 * 1024 + 5, 8)
    await t.writeAll([
      { ref: data, bytes: dataBytes, position: 100 },
      { ref: records, bytes: recordBytes, position: 7 },
    ])
    expect(readFileSync(data.path).subarray(100).equals(dataBytes)).toBe(true)
    expect(readFileSync(records.path).subarray(7).equals(recordBytes)).toBe(true)
    })
  })

  it('fails only the writes whose files fail, with the system error code', async () => {
    const dir = await tempDirs.make('wbt-fail')
    await withThread(async (t) => {
      const good = file(dir, 'good', 0)
      const missing = new FileRef(`${dir}/missing`, 'r+')
      mkdirSync(`${dir}/adir`)
      const directory = new FileRef(`${dir}/adir`, 'r+')
      // A file replaced under a ref that knows its inode: never written into the new one.
      const replaced = file(dir, 'replaced', 4)
      replaced.ino = 1 // not the inode of what is there now
      const closed = file(dir, 'closed', 0)
      closed.retired = true
      const results = await Promise.allSettled([
        put(t, good, fill(5, 1), 0),
        put(t, missing, fill(5, 2), 0),
        put(t, directory, fill(5, 3), 0),
        put(t, replaced, fill(5, 4), 0),
        put(t, closed, fill(5, 5), 0),
      ])
      expect(results[0]!.status).toBe('fulfilled')
      const code = (r: PromiseSettledResult<void>): unknown => (r.status === 'rejected' ? (r.reason as { code?: unknown }).code : 'ok')
      expect(results.slice(1).map(code)).toEqual(['ENOENT', 'EISDIR', 'ESTALE', 'store_closed'])
      expect(readFileSync(good.path).equals(fill(5, 1))).toBe(true)
      expect(readFileSync(replaced.path).equals(Buffer.alloc(4, 0x2e))).toBe(true)
      expect(readFileSync(closed.path)).toHaveLength(0)
    })
  })

  it('writes a job of several files as one: the first failure fails it, its other files are written', async () => {
    const dir = await tempDirs.make('wbt-job')
    await withThread(async (t) => {
      const a = file(dir, 'a', 0)
      const b = file(dir, 'b', 0)
      const missing = new FileRef(`${dir}/missing`, 'r+')
      await t.writeAll([
        { ref: a, bytes: fill(7, 1), position: 0 },
        { ref: b, bytes: fill(9, 2), position: 3 },
      ])
      expect(readFileSync(a.path).equals(fill(7, 1))).toBe(true)
      expect(readFileSync(b.path).subarray(3).equals(fill(9, 2))).toBe(true)
      const failed = await t
        .writeAll([
          { ref: missing, bytes: fill(4, 3), position: 0 },
          { ref: a, bytes: fill(4, 4), position: 0 },
        ])
        .catch((e: unknown) => e)
      expect((failed as { code?: unknown }).code).toBe('ENOENT')
      expect(readFileSync(a.path).subarray(0, 4).equals(fill(4, 4))).toBe(true)
    })
  })


  it('writes a list of jobs behind one promise, with each failure at its job, across batches and alongside lone jobs', async () => {
    const dir = await tempDirs.make('wbt-jobs')
    await withThread(async (t) => {
      // More jobs than one batch takes, one bigger than a block, two failing (a missing file, a closed log).
      const refs = Array.from({ length: 700 }, (_, i) => file(dir, `j${i}`, 16))
      const closed = file(dir, 'closed', 0)
      closed.retired = true
      const jobs = refs.map((ref, i) => [
        { ref, bytes: fill(i === 5 ? 2 * 1024 * 1024 : 5 + (i % 40), i), position: 16 },
        ...(i === 300 ? [{ ref: new FileRef(`${dir}/missing`, 'r+'), bytes: fill(3, 0), position: 0 }] : []),
      ])
      jobs.push([{ ref: closed, bytes: fill(8, 1), position: 0 }])
      const lone = file(dir, 'lone', 0)
      const [failures] = await Promise.all([t.writeJobs(jobs), put(t, lone, fill(11, 7), 0)])
      expect(failures).toHaveLength(jobs.length)
      const failed = failures.flatMap((f, i) => (f === undefined ? [] : [[i, (f as { code?: string }).code]]))
      expect(failed).toEqual([
        [300, 'ENOENT'],
        [700, 'store_closed'],
      ])
      refs.forEach((ref, i) => {
        // The failing job's other file is written all the same.
        expect(readFileSync(ref.path).subarray(16).equals(fill(i === 5 ? 2 * 1024 * 1024 : 5 + (i % 40), i))).toBe(true)
      })
      expect(readFileSync(lone.path).equals(fill(11, 7))).toBe(true)
      expect(await t.writeJobs([])).toEqual([])
    })
  })
  it('learns the inode of a file it opened, and then refuses another file put at its path', async () => {
    const dir = await tempDirs.make('wbt-ino')
    await withThread(async (t) => {
      const ref = file(dir, 'f', 0)
      expect(ref.ino).toBe(-1)
      await put(t, ref, fill(3, 1), 0)
      expect(ref.ino).toBe(statSync(ref.path).ino)
      // Deleted and made again under the same name (another log's file).
      renameSync(ref.path, `${dir}/f.old`)
      writeFileSync(ref.path, Buffer.alloc(3, 0x2e))
      const err = await put(t, ref, fill(3, 2), 0).catch((e: unknown) => e)
      expect((err as { code?: unknown }).code).toBe('ESTALE')
      expect(readFileSync(ref.path).equals(Buffer.alloc(3, 0x2e))).toBe(true)
    })
  })

  it('fails the writes in flight when the thread goes, and starts a new one for the next', async () => {
    const dir = await tempDirs.make('wbt-lost')
    const t = new WriteBackThread()
    const refs = Array.from({ length: 200 }, (_, i) => file(dir, `f${i}`, 0))
    const pending = Promise.allSettled(refs.map((ref, i) => put(t, ref, fill(1000, i), 0)))
    await new Promise((r) => setImmediate(r)) // posted
    await t.close()
    const settled = await pending
    // Whatever the thread wrote before it went, the rest failed; none hangs.
    expect(settled.every((r) => r.status === 'fulfilled' || (r.reason as { code?: unknown }).code === 'EIO')).toBe(true)
    await put(t, refs[0]!, fill(10, 42), 0)
    expect(readFileSync(refs[0]!.path).subarray(0, 10).equals(fill(10, 42))).toBe(true)
    await t.close()
  })

  it('is what a store on the real file system writes back through, and a reopen finds the files whole', async () => {
    const dir = await tempDirs.make('wbt-store')
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, journalSegmentBytes: 4096 })
    expect(s.writer).toBeInstanceOf(WriteBackThread)
    const logs = await Promise.all(Array.from({ length: 50 }, (_, i) => makeShape(s, `l${i}`, [])))
    for (let tx = 1n; tx <= 30n; tx++) {
      for (const [i, log] of logs.entries()) if ((Number(tx) + i) % 3 === 0) log.appendTransaction([change(tx, 0, i)])
      s.advance(tx)
      await s.flush()
    }
    await s.close()
    // Moved aside, the journal cannot fill anything in: the files alone must hold every entry.
    renameSync(`${dir}/journal`, `${dir}/journal.aside`)
    mkdirSync(`${dir}/journal`)
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    for (const [i, _] of logs.entries()) {
      const entries = body(again.get(`l${i}`)!.read(parseOffset('0_inf')))
      expect(entries).toHaveLength(Array.from({ length: 30 }, (_, k) => k + 1).filter((tx) => (tx + i) % 3 === 0).length)
    }
    // Opened from the heads file, the logs know their files' inodes without opening them.
    const restored = again.get('l0') as unknown as { data: FileRef; entries: FileRef }
    expect(restored.data.ino).toBe(statSync(`${shapeDir(dir, 'l0')}/log.dat`).ino)
    expect(restored.entries.ino).toBe(statSync(`${shapeDir(dir, 'l0')}/entries.idx`).ino)
    await again.close()
  })
})
