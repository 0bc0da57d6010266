/**
 * A shape-log store on LMDB (lmdb-js): the second baseline of the storage
 * benchmark. Like the SQLite peer it honours the whole contract, so the
 * comparison is between two ways of doing the same job.
 *
 * Layout (one LMDB environment for the whole store):
 *
 *   entries  key   shape u32 BE | tx u64 BE | op u64 BE   (20 bytes, memcmp order =
 *                                                          (shape, tx, op) order)
 *            value the stored `json,` bytes
 *   chunks   key   shape u32 BE | chunk u32 BE
 *            value end tx u64 BE | end op u64 BE | end entry u64 BE
 *   root     ['shape', num] -> { id, meta, finished }, 'watermark' -> LSN text
 *
 * Snapshot rows are keyed `(0, row number)` (see log-book.ts). Every
 * `appendTransaction` is one `transactionSync` with one `putSync` per entry, so
 * an append has returned only once it is committed, as with the other engines.
 * A read is one `getRange` over `(lower, upper]`, each value a `bytes` span.
 * Reads go through a second handle on `entries` whose key decoder returns
 * nothing: a read needs only the values, and decoding each binary key into a
 * Buffer cost about a third of the read time here.
 *
 * Durability. By default the environment is opened with `noSync` (MDB_NOSYNC):
 * commits write pages without fsync, and `flush()` commits the watermark and
 * then forces `mdb_env_sync`, one sync for everything before it. With
 * `syncEveryCommit` every commit is synced before it returns (`noSync: false`,
 * `overlappingSync: false`: LMDB's own durable commit), and `flush()` only
 * publishes (as in the SQLite peer, a watermark write would be a second sync).
 *
 * Not implemented (the benchmark does not need them): reopening an existing
 * store and read-only mode.
 */
import { mkdirSync, readdirSync } from 'node:fs'
import { open } from 'lmdb'
import type { Database, RootDatabase } from 'lmdb'
import type { LogOffset } from '@sluice/protocol'
import { DEFAULT_CHUNK_BYTES, entriesFromLines } from '@sluice/storage'
import type {
  AppendOptions,
  LogEntryInput,
  LogHead,
  LogRead,
  ShapeLog,
  ShapeLogStore,
  SnapshotWriter,
  Span,
} from '@sluice/storage'
import type { Key, PlannedEntry } from './log-book.js'
import { LogBook, NO_KEY, PeerError, emptyRead } from './log-book.js'
import { PeerLogStore } from './peer-store.js'

export interface LmdbStoreOptions {
  readonly dir: string
  readonly chunkBytes?: number
  /** Sync every commit before it returns. Default: MDB_NOSYNC plus one forced sync per flush. */
  readonly syncEveryCommit?: boolean
}

// Address space only: LMDB maps the file lazily, and a fixed map avoids resizes mid-run.
const MAP_BYTES = 64 * 1024 * 1024 * 1024

const KEY_BYTES = 20

function entryKey(shape: number, key: Key): Buffer {
  const buf = Buffer.allocUnsafe(KEY_BYTES)
  buf.writeUInt32BE(shape, 0)
  buf.writeBigUInt64BE(key.tx, 4)
  buf.writeBigUInt64BE(key.op, 12)
  return buf
}

/** The smallest key above `(shape, key)`: the key followed by a zero byte. */
function keyAfter(shape: number, key: Key): Buffer {
  if (key.tx < 0n) {
    const prefix = Buffer.allocUnsafe(4)
    prefix.writeUInt32BE(shape, 0)
    return prefix
  }
  const buf = Buffer.alloc(KEY_BYTES + 1)
  entryKey(shape, key).copy(buf)
  return buf
}

function chunkKey(shape: number, chunk: number): Buffer {
  const buf = Buffer.allocUnsafe(8)
  buf.writeUInt32BE(shape, 0)
  buf.writeUInt32BE(chunk, 4)
  return buf
}

function chunkValue(e: PlannedEntry): Buffer {
  const buf = Buffer.allocUnsafe(24)
  buf.writeBigUInt64BE(e.key.tx, 0)
  buf.writeBigUInt64BE(e.key.op, 8)
  buf.writeBigUInt64BE(BigInt(e.ordinal), 16)
  return buf
}

/** Binary keys written as given and never decoded (lmdb-js's custom key encoder hook). */
const VALUES_ONLY_KEYS = {
  writeKey(key: Buffer, target: Uint8Array, start: number): number {
    target.set(key, start)
    return start + key.length
  },
  readKey(): Buffer {
    return EMPTY
  },
}
const EMPTY = Buffer.alloc(0)

interface ShapeRecord {
  id: string
  meta: Uint8Array
  finished: boolean
}

class LmdbShapeLog implements ShapeLog {
  readonly book: LogBook

  constructor(
    readonly id: string,
    readonly num: number,
    readonly meta: Uint8Array,
    chunkBytes: number,
    private readonly store: LmdbLogStore,
  ) {
    this.book = new LogBook(id, chunkBytes)
  }

  head(): LogHead {
    return this.book.head()
  }

  appendLines(tx: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options?: AppendOptions): number {
    return this.appendTransaction(entriesFromLines(tx, ops, jsons, count), options)
  }

  appendTransaction(entries: readonly LogEntryInput[], options?: AppendOptions): number {
    this.store.ensureOpen()
    const plan = this.book.planAppend(entries)
    if (plan.length === 0) return 0
    this.store.write(this.num, plan)
    this.book.apply(plan, false, options?.more ?? false)
    return plan.length
  }

  read(after: LogOffset): LogRead {
    const range = this.book.locate(after)
    if (!range) return emptyRead(after)
    const spans: Span[] = []
    let byteLength = 0
    const rows = this.store.values.getRange({
      start: keyAfter(this.num, range.lower.tx < 0n ? NO_KEY : range.lower),
      end: entryKey(this.num, range.upper),
      inclusiveEnd: true,
    })
    for (const { value } of rows) {
      spans.push({ kind: 'bytes', bytes: value })
      byteLength += value.length
    }
    return { spans, byteLength, entryCount: spans.length, nextOffset: range.nextOffset, reachedHead: range.reachedHead, release() {} }
  }
}

export class LmdbLogStore extends PeerLogStore<LmdbShapeLog> implements ShapeLogStore {
  readonly entries: Database<Buffer, Buffer>
  /** `entries` without key decoding, for reads. */
  readonly values: Database<Buffer, Buffer>
  private readonly chunks: Database<Buffer, Buffer>
  private nextNum = 1

  constructor(
    private readonly root: RootDatabase,
    private readonly chunkBytes: number,
    private readonly syncEveryCommit: boolean,
  ) {
    super('LMDB')
    this.entries = root.openDB<Buffer, Buffer>({ name: 'entries', keyEncoding: 'binary', encoding: 'binary' })
    // `keyEncoder` is honoured by openDB but typed only on the root options; pass it through a variable.
    const valuesOnly = { name: 'entries', encoding: 'binary' as const, keyEncoder: VALUES_ONLY_KEYS }
    this.values = root.openDB<Buffer, Buffer>(valuesOnly)
    this.chunks = root.openDB<Buffer, Buffer>({ name: 'chunks', keyEncoding: 'binary', encoding: 'binary' })
  }

  /** Writes a plan in one synchronous LMDB transaction. */
  write(num: number, plan: readonly PlannedEntry[]): void {
    this.root.transactionSync(() => this.putPlan(num, plan))
  }

  /** The puts of a plan; only inside a transaction. */
  private putPlan(num: number, plan: readonly PlannedEntry[]): void {
    for (const e of plan) {
      this.entries.putSync(entryKey(num, e.key), e.stored)
      if (e.closes) this.chunks.putSync(chunkKey(num, e.chunk), chunkValue(e))
    }
  }

  /** Commits `write` and makes it, and everything before it, durable. */
  private async durably(write: () => void): Promise<void> {
    this.root.transactionSync(write)
    if (!this.syncEveryCommit) await this.syncEnv()
  }

  private syncEnv(): Promise<void> {
    // `sync` (a forced mdb_env_sync on libuv's pool) is on the root database but not in lmdb-js's typings.
    const root = this.root as unknown as { sync(cb: (err?: Error) => void): void }
    return new Promise((resolve, reject) => root.sync((err) => (err ? reject(err) : resolve())))
  }

  createShape(id: string, options?: { meta?: Uint8Array }): SnapshotWriter {
    this.ensureOpen()
    if (id.length === 0) throw new PeerError('invalid_append', 'a shape id must not be empty')
    if (this.logs.has(id) || this.creating.has(id)) throw new PeerError('shape_exists', `shape ${id} already exists`)
    const meta = options?.meta ?? new Uint8Array()
    const num = this.nextNum++
    const record: ShapeRecord = { id, meta, finished: false }
    this.root.transactionSync(() => this.root.putSync(['shape', num], record))
    this.creating.add(id)
    const log = new LmdbShapeLog(id, num, meta, this.chunkBytes, this)
    let open = true
    // endSnapshot() keeps the line for finish(). The peers take no live entries through the writer before the
    // log exists: the storage benchmark never queues transactions behind a snapshot (that is the server's job).
    let pendingEnd: Uint8Array | undefined
    let finished: ShapeLog | undefined
    return {
      append: (rows) => {
        this.ensureOpen()
        if (!open) throw new PeerError('invalid_append', `snapshot of shape ${id} is closed`)
        const plan = log.book.planSnapshot(rows, false)
        this.write(num, plan)
        log.book.apply(plan, true)
      },
      endSnapshot: (snapshotEnd) => {
        if (!open || pendingEnd !== undefined) throw new PeerError('invalid_append', `snapshot of shape ${id} is closed`)
        pendingEnd = snapshotEnd
      },
      appendTransaction: (entries, options) => {
        if (finished === undefined) throw new PeerError('invalid_append', `shape ${id}: the benchmark peers take live entries once the log is finished`)
        return finished.appendTransaction(entries, options)
      },
      appendLines: (tx, ops, jsons, count, options) => {
        if (finished === undefined) throw new PeerError('invalid_append', `shape ${id}: the benchmark peers take live entries once the log is finished`)
        return finished.appendLines(tx, ops, jsons, count, options)
      },
      finish: async (end) => {
        this.ensureOpen()
        const snapshotEnd = end ?? pendingEnd
        if (!open || snapshotEnd === undefined || (end !== undefined && pendingEnd !== undefined)) {
          throw new PeerError('invalid_append', `snapshot of shape ${id} is closed`)
        }
        open = false
        const plan = log.book.planSnapshot([snapshotEnd], true)
        await this.durably(() => {
          this.putPlan(num, plan)
          this.root.putSync(['shape', num], { ...record, finished: true })
        })
        log.book.apply(plan, true)
        log.book.publishSnapshot()
        this.creating.delete(id)
        this.logs.set(id, log)
        finished = log
        return log
      },
      abort: async () => {
        open = false
        this.creating.delete(id)
        this.dropRows(num)
      },
    }
  }

  protected dropRows(num: number): void {
    const next = Buffer.allocUnsafe(4)
    next.writeUInt32BE(num + 1, 0)
    const prefix = keyAfter(num, NO_KEY)
    this.root.transactionSync(() => {
      for (const key of this.entries.getKeys({ start: prefix, end: next })) this.entries.removeSync(key)
      for (const key of this.chunks.getKeys({ start: prefix, end: next })) this.chunks.removeSync(key)
      this.root.removeSync(['shape', num])
    })
  }

  protected async persistWatermark(lsn: bigint): Promise<void> {
    if (!this.syncEveryCommit) await this.durably(() => this.root.putSync('watermark', String(lsn)))
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    await this.root.close()
  }
}

export async function openLmdbLogStore(options: LmdbStoreOptions): Promise<LmdbLogStore> {
  mkdirSync(options.dir, { recursive: true })
  if (readdirSync(options.dir).length > 0) throw new Error(`the LMDB peer opens empty directories only: ${options.dir}`)
  const syncEveryCommit = options.syncEveryCommit ?? false
  const root = open({
    path: options.dir,
    maxDbs: 4,
    mapSize: MAP_BYTES,
    noSync: !syncEveryCommit,
    overlappingSync: false,
  })
  return new LmdbLogStore(root, options.chunkBytes ?? DEFAULT_CHUNK_BYTES, syncEveryCommit)
}
