/**
 * The four engines behind one small interface, so every workload runs the same
 * code against each: the file engine ("ours"), the SQLite and LMDB peers (all
 * three through the `ShapeLogStore` contract), and the raw-file ceiling.
 */
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import type { LogOffset } from '@sluice/protocol'
import { openFileLogStore, readSpans, readSpansAsync } from '@sluice/storage'
import type { LogEntryInput, LogRead, ShapeLog, ShapeLogStore } from '@sluice/storage'
import type { ReadBuffer } from './materialise.js'
import { copySpans, copySpansAsync } from './materialise.js'
import { openLmdbLogStore } from './peers/lmdb-store.js'
import { openSqliteLogStore } from './peers/sqlite-store.js'
import { RawLog } from './raw-log.js'

export type EngineName = 'ours' | 'sqlite' | 'lmdb' | 'raw'
export const ENGINES: readonly EngineName[] = ['ours', 'sqlite', 'lmdb', 'raw']

// Timers cannot wait longer than 2^31-1 ms; this one never fires during a run.
const NEVER_MS = 2 ** 31 - 1

export interface BenchLog {
  readonly engine: EngineName
  /** Appends one transaction. Nothing is synced (the buffered workloads). */
  append(entries: readonly LogEntryInput[]): void
  /** Appends one transaction and returns once it is durable. Only on logs opened `durable`. */
  appendDurable(entries: readonly LogEntryInput[]): Promise<void>
  /** Makes everything appended up to `lsn` durable and readable (setup, untimed). */
  publish(lsn: bigint): Promise<void>
  /**
   * Reads from `start` to the end of its chunk, then `chunks` more whole chunks,
   * following `nextOffset` and materialising each range into one buffer (`into`,
   * see materialise.ts), as a server answering one request per chunk would.
   * Returns the bytes read; `sink` (checks only) sees each range.
   */
  readChunks(start: LogOffset, chunks: number, into: ReadBuffer, sink?: (range: Buffer) => void): number
  /** The same with the file I/O on libuv's thread pool, so many readers can overlap. */
  readChunksAsync(start: LogOffset, chunks: number, into: ReadBuffer): Promise<number>
  close(): Promise<void>
}

export interface OpenOptions {
  readonly dir: string
  readonly chunkBytes: number
  /** Each append is made durable before it returns (the durable-append workload). */
  readonly durable: boolean
  /** The raw log keeps its in-memory index only for the read log. */
  readonly forReads: boolean
  /** Materialise each range into a fresh buffer (`readSpans`) instead of the reader's reusable one. */
  readonly freshBuffers?: boolean
}

const SNAPSHOT_END = new TextEncoder().encode('{"headers":{"control":"snapshot-end","xmin":"1","xmax":"1","xip_list":[]}}')

export async function openBenchLog(engine: EngineName, options: OpenOptions): Promise<BenchLog> {
  mkdirSync(options.dir, { recursive: true })
  const fresh = options.freshBuffers ?? false
  switch (engine) {
    case 'ours':
      return contractLog(
        engine,
        await openFileLogStore({
          dir: options.dir,
          chunkBytes: options.chunkBytes,
          // No background group commit during the timed appends: every engine appends without syncing.
          flushIntervalMs: NEVER_MS,
          flushBytes: Number.MAX_SAFE_INTEGER,
        }),
        fresh,
      )
    case 'sqlite':
      return contractLog(engine, await openSqliteLogStore({ dir: options.dir, chunkBytes: options.chunkBytes, syncEveryCommit: options.durable }), fresh)
    case 'lmdb':
      return contractLog(engine, await openLmdbLogStore({ dir: options.dir, chunkBytes: options.chunkBytes, syncEveryCommit: options.durable }), fresh)
    case 'raw':
      return rawLog(new RawLog(join(options.dir, 'raw.log'), options.chunkBytes, options.forReads), fresh)
  }
}

/** A log in a contract store, holding one shape with an empty snapshot, so the live region starts at a fresh chunk. */
async function contractLog(engine: EngineName, store: ShapeLogStore, fresh: boolean): Promise<BenchLog> {
  const materialise = fresh ? (r: LogRead) => readSpans(r) : copySpans
  const materialiseAsync = fresh ? (r: LogRead) => readSpansAsync(r) : copySpansAsync
  // The file engine finishes a snapshot in its next group commit, so flush while waiting.
  const finishing = store.createShape('bench').finish(SNAPSHOT_END)
  await store.flush()
  const log: ShapeLog = await finishing
  return {
    engine,
    append(entries) {
      log.appendTransaction(entries)
    },
    async appendDurable(entries) {
      log.appendTransaction(entries)
      // The file engine makes an append durable the only way it can: advance and
      // a group commit. For the peers (opened with syncEveryCommit) the commit was
      // already synced and this only publishes.
      store.advance(entries[0]!.offset.tx)
      await store.flush()
    },
    async publish(lsn) {
      store.advance(lsn)
      await store.flush()
    },
    readChunks(start, chunks, into, sink) {
      let offset = start
      let bytes = 0
      for (let i = 0; i <= chunks; i++) {
        const r = log.read(offset)
        try {
          const range = materialise(r, into)
          bytes += range.length
          sink?.(range)
        } finally {
          r.release()
        }
        offset = r.nextOffset
      }
      return bytes
    },
    async readChunksAsync(start, chunks, into) {
      let offset = start
      let bytes = 0
      for (let i = 0; i <= chunks; i++) {
        const r = log.read(offset)
        try {
          bytes += (await materialiseAsync(r, into)).length
        } finally {
          r.release()
        }
        offset = r.nextOffset
      }
      return bytes
    },
    close: () => store.close(),
  }
}

function rawLog(raw: RawLog, fresh: boolean): BenchLog {
  const range = (offset: LogOffset) => {
    const r = raw.locate(offset)
    if (!r) throw new Error(`raw log: nothing after ${offset.tx}_${offset.op}`)
    return r
  }
  return {
    engine: 'raw',
    append(entries) {
      raw.append(entries)
    },
    appendDurable: (entries) => raw.appendDurable(entries),
    async publish() {
      raw.sync()
    },
    readChunks(start, chunks, into, sink) {
      let offset = start
      let bytes = 0
      for (let i = 0; i <= chunks; i++) {
        const r = range(offset)
        const buf = raw.readSync(r, fresh ? undefined : into)
        bytes += buf.length
        sink?.(buf)
        offset = r.nextOffset
      }
      return bytes
    },
    async readChunksAsync(start, chunks, into) {
      let offset = start
      let bytes = 0
      for (let i = 0; i <= chunks; i++) {
        const r = range(offset)
        bytes += (await raw.read(r, fresh ? undefined : into)).length
        offset = r.nextOffset
      }
      return bytes
    },
    async close() {
      raw.close()
    },
  }
}
