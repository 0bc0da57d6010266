/**
 * Readers against a live writer (real files; the cross-process reader is a real
 * second process).
 *
 * (a) In-process: the writer (fixtures/writer-loop.ts) appends the workload
 *     (fixtures/workload.ts) with group commit running every millisecond,
 *     explicit flushes, split transactions, snapshot creations and deletions,
 *     and an fd LRU far smaller than the files in use; random readers call
 *     `read()` from random offsets (real, made-up mid-chunk, virtual, aligned,
 *     out of range) and copy the spans with `readSpans` or `readSpansAsync`
 *     (letting the writer run while a read is in flight); a tailer follows
 *     every log from -1 as a live client would. Every range must be the exact
 *     expected bytes, parse as JSON lines, end at its chunk's end or at the
 *     published head (= every transaction the watermark covers), never inside a
 *     transaction unless at a closed chunk boundary, and hold nothing beyond.
 * (b) Cross-process: a child (fixtures/ro-reader.ts) reads the same directory
 *     through `openReadOnlyLogStore` while this process writes; it checks each
 *     read against the watermark it read before and after, that new shapes
 *     appear only complete, and that deleted shapes are gone once deleteShape
 *     resolved; at the end it must catch up with the final watermark.
 *
 * SOAK=1 runs each for much longer.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { BEFORE_ALL, formatOffset } from '@sluice/protocol'
import type { LogOffset } from '@sluice/protocol'
import { afterAll, describe, expect, it } from 'vitest'
import type { FsPort, ShapeLog } from '../src/index.js'
import { StorageError, nodeFs, openFileLogStore, openReadOnlyLogStore, readSpans, readSpansAsync } from '../src/index.js'
import { sleep, spawnFixture, tick } from './fixtures/proc.js'
import type { ReaderConfig } from './fixtures/ro-reader.js'
import type { Schedule } from './fixtures/workload.js'
import { ExpectedLog, FIXED_ENTRY_BYTES, followLog, observe, parseMeta, rng, specOf, specsUpTo, verifyRange, walkLog } from './fixtures/workload.js'
import { newWriterState, runWriter } from './fixtures/writer-loop.js'

const SOAK = process.env.SOAK === '1'
const SEED = Number(process.env.CONCURRENCY_SEED ?? Math.floor(Math.random() * 2 ** 31))
const CHUNK_BYTES = 16 * FIXED_ENTRY_BYTES // 2048: s0 and s2 fill chunks to exactly the threshold
const SCHEDULE: Schedule = { statics: 3, dynEvery: 20, dynLife: 50, touchPct: 40 }

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})
function tempDir(name: string): string {
  const dir = mkdtempSync(join(tmpdir(), `sluice-${name}-`))
  dirs.push(dir)
  return dir
}

describe('concurrent readers and writer', () => {
  it('in-process: every range is exact, published, and cut at its chunk or the head while the writer appends and flushes', { timeout: SOAK ? 600_000 : 60_000 }, async () => {
    const durationMs = SOAK ? 60_000 : 3_000
    const rand = rng(SEED)
    const dir = tempDir('conc-a')
    // A pass-through port that only counts syncs in flight, to tell which reads overlapped a group commit.
    let syncing = 0
    const fs: FsPort = {
      ...nodeFs,
      async fdatasync(fd) {
        syncing++
        try {
          await nodeFs.fdatasync(fd)
        } finally {
          syncing--
        }
      },
      async fsync(fd) {
        syncing++
        try {
          await nodeFs.fsync(fd)
        } finally {
          syncing--
        }
      },
    }
    const store = await openFileLogStore({ dir, chunkBytes: CHUNK_BYTES, flushIntervalMs: 1, maxOpenFiles: 8, fs })
    const state = newWriterState()
    const exps = new Map<string, ExpectedLog>()
    const expFor = (id: string): ExpectedLog => {
      let e = exps.get(id)
      if (!e) {
        e = new ExpectedLog(SCHEDULE, specOf(SCHEDULE, id)!, CHUNK_BYTES)
        exps.set(id, e)
      }
      return e
    }
    const stats = {
      reads: 0,
      asyncReads: 0,
      emptyReads: 0,
      midChunkReads: 0,
      readsDuringSync: 0,
      readsInsideSplitTx: 0,
      readsHeldAcrossDelete: 0,
      deletedHandleRejected: 0,
      headChecks: 0,
      tailedEntries: 0,
      bytes: 0,
    }
    let failure: unknown
    const deadline = Date.now() + durationMs
    // The writer runs for the planned time and then on until the readers have covered every case the
    // assertions below name: a loaded machine gives the readers fewer turns in the same time.
    const covered = () =>
      stats.reads > 200 && stats.midChunkReads > 20 && stats.readsDuringSync > 0 && stats.tailedEntries > 0 && state.deleted.size > 0
    const giveUpAt = Date.now() + (SOAK ? 500_000 : 45_000)
    const writer = runWriter(store, state, {
      schedule: SCHEDULE,
      rand: rng(SEED ^ 1),
      running: () => failure === undefined && (Date.now() < deadline || (!covered() && Date.now() < giveUpAt)),
    })

    const guard = async (name: string, body: () => Promise<void>): Promise<void> => {
      try {
        await body()
      } catch (err) {
        failure ??= err
        throw new Error(`${name}: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
      }
    }

    /** get(id) agrees with the writer's lifecycle. */
    const getChecked = (id: string): ShapeLog | undefined => {
      const log = store.get(id)
      if (log) {
        if (state.deleted.has(id)) throw new Error(`${id}: get() returns a deleted shape`)
        if (!state.finished.has(id) && !state.creating.has(id)) throw new Error(`${id}: get() returns a shape before createShape`)
      } else if (state.finished.has(id) && !state.deleted.has(id)) {
        throw new Error(`${id}: finished but get() returns undefined`)
      }
      return log
    }

    const randomReader = (seed: number) =>
      guard(`reader ${seed}`, async () => {
        const r = rng(seed)
        while (!state.stopped) {
          const specs = specsUpTo(SCHEDULE, state.k + 1)
          const id = specs[Math.floor(r() * specs.length)]!.id
          const log = getChecked(id)
          if (!log) {
            await tick()
            continue
          }
          const exp = expFor(id)
          expect(parseMeta(log.meta)).toEqual({ id, createAt: exp.spec.createAt })
          if (r() < 0.15) {
            // The published head is exactly the last transaction the watermark covers.
            const p = exp.count(store.durableLsn)
            const head = log.head()
            expect([id, head.entryCount, formatOffset(head.lastOffset), head.closedChunks]).toEqual([
              id,
              p,
              formatOffset(exp.offset(p - 1)),
              exp.closedChunksWithin(p),
            ])
            stats.headChecks++
          } else {
            const d = store.durableLsn
            const after = exp.randomOffset(r, exp.count(d))
            const read = log.read(after)
            if (syncing > 0) stats.readsDuringSync++
            if (state.partial) stats.readsInsideSplitTx++
            let bytes: Buffer
            try {
              if (read.entryCount > 0 && exp.spec.deleteAt - state.k <= 3 && r() < 0.5) {
                // Hold the spans until the writer deletes the shape, then copy them.
                while (!state.deleted.has(id) && !state.stopped) await sleep(1)
                bytes = await readSpansAsync(read)
                stats.asyncReads++
              } else if (r() < 0.5) {
                bytes = await readSpansAsync(read) // the writer runs meanwhile
                stats.asyncReads++
              } else {
                bytes = readSpans(read)
              }
            } finally {
              read.release()
            }
            const problem = verifyRange(exp, after, observe(read, bytes), d, d)
            if (problem) throw new Error(problem)
            stats.reads++
            stats.bytes += bytes.length
            if (read.entryCount === 0) stats.emptyReads++
            const i = exp.firstAfter(after)
            if (i > 0 && exp.chunkEndOf(i - 1) !== i) stats.midChunkReads++
            if (state.deleted.has(id)) {
              // The spans stayed valid across the deletion; the handle itself now refuses.
              stats.readsHeldAcrossDelete++
              expect(() => log.read(after)).toThrow(StorageError)
              stats.deletedHandleRejected++
            }
          }
          if (r() < 0.1) await sleep(0)
          else await tick()
        }
      })

    const tailer = guard('tailer', async () => {
      const cursors = new Map<string, LogOffset>()
      while (!state.stopped) {
        for (const spec of specsUpTo(SCHEDULE, state.k + 1)) {
          const log = getChecked(spec.id)
          if (!log) {
            cursors.delete(spec.id)
            continue
          }
          const f = await followLog(log, expFor(spec.id), () => store.durableLsn, {
            after: cursors.get(spec.id) ?? BEFORE_ALL,
            readAsync: (read) => readSpansAsync(read),
          }).catch((err: unknown) => {
            if (err instanceof StorageError && state.deleted.has(spec.id)) return undefined
            throw err
          })
          if (!f) continue
          if (f.problem) throw new Error(f.problem)
          cursors.set(spec.id, f.after)
          stats.tailedEntries += f.entries
        }
        await sleep(1)
      }
    })

    const results = await Promise.allSettled([writer, randomReader(SEED ^ 2), randomReader(SEED ^ 3), tailer])
    const rejected = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')
    if (rejected) {
      await store.close().catch(() => {})
      throw rejected.reason
    }

    // After the writer stopped: one last flush, and every log is exactly its expected prefix.
    await store.flush()
    let finalEntries = 0
    for (const id of store.ids()) finalEntries += walkLog(store.get(id)!, expFor(id), store.durableLsn).entries
    const k = state.k
    await store.close()
    console.log(
      `concurrency (in-process): ${k} transactions, ${state.deleted.size} shapes deleted, ${stats.reads} range reads ` +
        `(${stats.asyncReads} async, ${stats.midChunkReads} from mid-chunk offsets, ${stats.emptyReads} empty, ` +
        `${stats.readsDuringSync} during a group-commit sync, ${stats.readsInsideSplitTx} inside a split transaction, ` +
        `${stats.readsHeldAcrossDelete} held across a deletion), ${stats.headChecks} head checks, ` +
        `${stats.tailedEntries} entries tailed, ${finalEntries} entries in the final walk, ${(stats.bytes / 1e6).toFixed(1)} MB, seed ${SEED}`,
    )
    expect(stats.reads).toBeGreaterThan(200)
    expect(stats.midChunkReads).toBeGreaterThan(20)
    expect(stats.readsDuringSync).toBeGreaterThan(0)
    expect(stats.tailedEntries).toBeGreaterThan(0)
    expect(state.deleted.size).toBeGreaterThan(0)
  })

  it('cross-process: a read-only reader sees only watermark-covered, complete, byte-exact transactions, new shapes only once complete, deleted ones never again', { timeout: SOAK ? 600_000 : 90_000 }, async () => {
    const durationMs = SOAK ? 60_000 : 4_000
    const dir = tempDir('conc-b')
    const child = spawnFixture('ro-reader.ts', [])
    try {
      await child.waitFor((l) => l === 'loaded', { timeoutMs: 60_000 })
      const store = await openFileLogStore({ dir, chunkBytes: CHUNK_BYTES, flushIntervalMs: 2 })
      // The run lasts its duration and then until the reader has done enough to check (a slow machine reads less per second).
      const config: ReaderConfig = {
        dir,
        chunkBytes: CHUNK_BYTES,
        schedule: SCHEDULE,
        seed: SEED,
        enough: { reads: 101, watermarks: 6, dynamicShapes: 3 },
      }
      child.send(`go ${JSON.stringify(config)}`)
      await child.waitFor((l) => l === 'reading')
      const state = newWriterState()
      const deletions: string[] = []
      const deadline = Date.now() + durationMs
      const cap = deadline + 40_000
      await runWriter(store, state, {
        schedule: SCHEDULE,
        rand: rng(SEED ^ 7),
        running: () =>
          (Date.now() < deadline || !child.lines.includes('enough')) &&
          Date.now() < cap &&
          !child.lines.some((l) => l.startsWith('violation')),
        onDeleted: (id) => {
          deletions.push(id)
          child.send(`deleted ${id}`)
        },
      })
      await store.flush()
      const final = store.durableLsn
      child.send(`final ${final}`)
      const exit = await child.closed
      await store.close()
      const violations = child.lines.filter((l) => l.startsWith('violation'))
      expect(violations.join('\n'), child.stderr()).toBe('')
      expect(exit, child.stderr()).toEqual({ code: 0, signal: null })
      const summaryLine = child.lines.find((l) => l.startsWith('summary '))
      const summary = JSON.parse(summaryLine!.slice('summary '.length)) as {
        reads: number
        midChunkReads: number
        follows: number
        headChecks: number
        appeared: string[]
        deleteChecks: number
        watermarks: number
        flushEvents: number
        maxLsn: string
        finalEntries: number
        staleReadsOfDeletedShapes: number
      }
      const acks = child.lines.filter((l) => l.startsWith('ack ')).map((l) => l.slice(4))
      console.log(
        `concurrency (cross-process): writer ${state.k} transactions, ${deletions.length} deletions; reader: ${summary.reads} range reads ` +
          `(${summary.midChunkReads} mid-chunk), ${summary.follows} follows, ${summary.headChecks} head checks, ` +
          `${summary.appeared.length} shapes first seen complete, ${summary.deleteChecks} deletions confirmed, ` +
          `${summary.watermarks} watermarks seen, ${summary.flushEvents} onFlush events, ${summary.staleReadsOfDeletedShapes} reads behind the watermark on shapes being deleted, ` +
          `final walk ${summary.finalEntries} entries at ${final}, seed ${SEED}`,
      )
      expect(acks).toEqual(deletions)
      expect(summary.deleteChecks).toBe(deletions.length)
      expect(deletions.length).toBeGreaterThan(0)
      expect(summary.reads).toBeGreaterThan(100)
      // Shapes created while the reader ran (dynamic ones) were first seen complete.
      expect(summary.appeared.filter((id) => id.startsWith('d')).length).toBeGreaterThan(2)
      expect(summary.watermarks).toBeGreaterThan(5)
      expect(BigInt(summary.maxLsn)).toBe(final)
    } finally {
      await child.kill()
    }
  })
})

describe('read-only store and shape ids reused after deletion (engine bug)', () => {
  const enc = new TextEncoder()
  const setup = async (maxOpenFiles: number) => {
    const dir = tempDir('conc-reuse')
    const writer = await openFileLogStore({ dir, chunkBytes: 100_000, flushIntervalMs: 1000 })
    const make = async (id: string, gen: string, rows: string[]) => {
      const w = writer.createShape(id, { meta: enc.encode(gen) })
      w.append(rows.map((r) => enc.encode(r)))
      return w.finish(enc.encode(`{"headers":{"control":"snapshot-end","gen":"${gen}"}}`))
    }
    const ro = openReadOnlyLogStore({ dir, maxOpenFiles })
    const body = (log: ShapeLog): string => {
      const r = log.read(BEFORE_ALL)
      try {
        return readSpans(r).toString('utf8')
      } finally {
        r.release()
      }
    }
    return { writer, make, ro, body }
  }

  it('serves the re-created shape, not the deleted one, when the same id comes back', async () => {
    const { writer, make, ro, body } = await setup(512)
    await make('x', 'A', ['{"gen":"A","row":1}'])
    expect(body(ro.get('x')!)).toBe('{"gen":"A","row":1},{"headers":{"control":"snapshot-end","gen":"A"}},')
    await writer.deleteShape('x')
    await make('x', 'B', ['{"gen":"B","row":1}', '{"gen":"B","row":2}'])
    // A fresh read-only store sees B...
    const fresh = openReadOnlyLogStore({ dir: writer.root })
    const want = '{"gen":"B","row":1},{"gen":"B","row":2},{"headers":{"control":"snapshot-end","gen":"B"}},'
    expect(body(fresh.get('x')!)).toBe(want)
    // Its logs, listed, are the ones it serves by id.
    expect([...fresh.finishedLogs()]).toEqual([fresh.get('x')])
    await fresh.close()
    // ...the long-lived one must too; it returns its cached log of the deleted A.
    const log = ro.get('x')!
    expect(new TextDecoder().decode(log.meta)).toBe('B')
    expect(body(log)).toBe(want)
    await ro.close()
    await writer.close()
  })

  it('never serves torn bytes mixing the deleted log index with the re-created files', async () => {
    // With a small fd LRU the cached log's descriptors are closed, and reopened by path: the new files.
    const { writer, make, ro, body } = await setup(3)
    await make('x', 'A', ['{"gen":"A","row":1}'])
    expect(body(ro.get('x')!)).toContain('"gen":"A"')
    await writer.deleteShape('x')
    await make('x', 'B', ['{"gen":"B","row":1,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}', '{"gen":"B","row":2}'])
    await make('other', 'O', ['{}'])
    expect(body(ro.get('other')!)).toBe('{},{"headers":{"control":"snapshot-end","gen":"O"}},') // evicts x's descriptors
    const bytes = body(ro.get('x')!)
    // Whatever it serves must be whole JSON lines: `[` + bytes without the last `,` + `]` parses.
    expect(() => JSON.parse(`[${bytes.slice(0, -1)}]`), `served ${JSON.stringify(bytes)}`).not.toThrow()
    expect(bytes).toBe('{"gen":"B","row":1,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},{"gen":"B","row":2},{"headers":{"control":"snapshot-end","gen":"B"}},')
    await ro.close()
    await writer.close()
  })
})

describe('read-only store onFlush (engine bug)', () => {
  it('tells listeners about every watermark advance, even one a read noticed first', async () => {
    const enc = new TextEncoder()
    const dir = tempDir('conc-poll')
    // Pass-through port with a hook right after the writer announces a watermark to
    // followers (watermark.live): the moment a concurrent request can see it.
    let onPublish = (): void => {}
    let liveFd = -1
    const fs: FsPort = {
      ...nodeFs,
      openSync(path, flags, mode) {
        const fd = nodeFs.openSync(path, flags, mode)
        if (path.endsWith('/watermark.live')) liveFd = fd
        return fd
      },
      closeSync(fd) {
        // The number goes back to the kernel and may come back for another file (the heads file at close).
        if (fd === liveFd) liveFd = -1
        nodeFs.closeSync(fd)
      },
      writeSync(fd, buffer, offset, length, position) {
        const n = nodeFs.writeSync(fd, buffer, offset, length, position)
        if (fd === liveFd) onPublish()
        return n
      },
    }
    const writer = await openFileLogStore({ dir, chunkBytes: 100_000, flushIntervalMs: 1000, fs })
    const w = writer.createShape('s', { meta: enc.encode('s') })
    const log = await w.finish(enc.encode('{"headers":{"control":"snapshot-end"}}'))
    const ro = openReadOnlyLogStore({ dir, pollIntervalMs: 5 })
    const events: Array<{ durableLsn: bigint; advanced: readonly string[] }> = []
    ro.onFlush((r) => events.push(r))
    const roLog = ro.get('s')!
    expect(roLog.head().entryCount).toBe(1)

    // Control: with nobody else touching the store, the poller reports the advance.
    log.appendTransaction([{ offset: { tx: 10n, op: 0n }, json: enc.encode('{"v":1}') }])
    writer.advance(10n)
    await writer.flush()
    await sleep(100)
    expect(events.map((e) => e.durableLsn)).toContain(10n)

    // A request that reads (or asks for durableLsn) between two polls refreshes the
    // store's watermark; the poller then sees no change and long-poll waiters are never woken.
    let served = -1
    onPublish = () => {
      const r = roLog.read({ tx: 10n, op: 0n }) // another client's request, served the new entry
      served = r.entryCount
      r.release()
    }
    log.appendTransaction([{ offset: { tx: 20n, op: 0n }, json: enc.encode('{"v":2}') }])
    writer.advance(20n)
    await writer.flush()
    expect(served).toBe(1)
    await sleep(100)
    expect(events.map((e) => e.durableLsn), 'onFlush events').toContain(20n)
    expect(events.find((e) => e.durableLsn === 20n)?.advanced).toEqual(['s'])
    await ro.close()
    await writer.close()
  })
})
