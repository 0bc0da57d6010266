/**
 * The reference implementation: plain arrays, written to be obviously right
 * rather than fast. The file engine must agree with it on every read; the
 * shared contract suite and the property tests hold them to that.
 *
 * `restart()` models a process restart: everything not yet published is lost,
 * as the file engine's recovery cuts it.
 *
 * A new log is finished by a flush, as in the file engine: `finish` schedules
 * one (or an explicit `flush()` does it first). That flush registers the log
 * and publishes its snapshot and the complete transactions appended so far
 * that the watermark covers; it leaves the log for a later flush while a
 * transaction at or below the watermark is open. Flushes here are atomic, so
 * nothing is ever appended "after the sync" of a finishing log.
 */
import type { LogOffset } from '@sluice/protocol'
import { BEFORE_ALL, compareOffsets } from '@sluice/protocol'
import type { FlushResult, LogEntryInput, LogHead, LogRead, ShapeLog, ShapeLogStore, SnapshotWriter } from '../contract.js'
import { StorageError } from '../errors.js'
import { DEFAULT_CHUNK_BYTES, checkShapeId } from '../defaults.js'
import { entriesFromLines } from '../entries-from-lines.js'
import { SEPARATOR } from '../format.js'

interface Entry {
  readonly offset: LogOffset
  readonly bytes: Uint8Array // json + ','
}

interface Chunk {
  readonly end: LogOffset
  readonly endEntry: number
}

interface Cut {
  readonly entries: number
  readonly chunks: number
  readonly tx: bigint
}

function stored(json: Uint8Array): Uint8Array {
  const bytes = new Uint8Array(json.length + 1)
  bytes.set(json)
  bytes[json.length] = SEPARATOR
  return bytes
}

class MemoryShapeLog implements ShapeLog {
  readonly entries: Entry[] = []
  readonly chunks: Chunk[] = []
  private fill = 0
  snapshotChunks = 0
  published: Cut = { entries: 0, chunks: 0, tx: 0n }
  pending: Cut[] = []
  /** The last append said `more`. */
  open = false
  /** New transactions at or below this are refused (the watermark the log was published with). */
  floor = 0n

  constructor(
    readonly id: string,
    readonly meta: Uint8Array,
    private readonly chunkBytes: number,
  ) {}

  private get last(): LogOffset {
    return this.entries.at(-1)?.offset ?? BEFORE_ALL
  }

  push(offset: LogOffset, json: Uint8Array, closeAfter: boolean): void {
    const bytes = stored(json)
    this.entries.push({ offset, bytes })
    this.fill += bytes.length
    if (this.fill >= this.chunkBytes || closeAfter) {
      this.chunks.push({ end: offset, endEntry: this.entries.length })
      this.fill = 0
    }
  }

  pushSnapshotRow(json: Uint8Array, isEnd: boolean): void {
    const chunkNo = BigInt(this.chunks.length)
    const before = this.chunks.length
    this.push({ tx: 0n, op: chunkNo }, json, isEnd)
    if (this.chunks.length > before) this.snapshotChunks++
  }

  head(): LogHead {
    const { entries, chunks } = this.published
    return {
      lastOffset: entries > 0 ? this.entries[entries - 1]!.offset : BEFORE_ALL,
      entryCount: entries,
      closedChunks: chunks,
      snapshotChunks: Math.min(this.snapshotChunks, chunks),
    }
  }

  appendTransaction(input: readonly LogEntryInput[], options?: { more?: boolean }): number {
    const fresh = input.filter((e) => compareOffsets(e.offset, this.last) > 0)
    if (fresh.length === 0) return 0
    const tx = fresh[0]!.offset.tx
    if (tx <= 0n) throw new StorageError('invalid_append', `shape ${this.id}: live entries need a commit LSN above 0`)
    if (tx <= this.floor) {
      throw new StorageError('invalid_append', `shape ${this.id}: transaction ${tx} is at or below ${this.floor}, the watermark the log was published with`)
    }
    let prev = this.last
    for (const e of fresh) {
      if (e.offset.tx !== tx) throw new StorageError('invalid_append', `shape ${this.id}: one append holds one transaction`)
      if (compareOffsets(e.offset, prev) <= 0) throw new StorageError('invalid_append', `shape ${this.id}: offsets must increase`)
      prev = e.offset
    }
    for (const e of fresh) this.push(e.offset, e.json, false)
    this.open = options?.more === true
    if (!this.open) this.pending.push({ entries: this.entries.length, chunks: this.chunks.length, tx })
    return fresh.length
  }

  appendLines(tx: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options?: { more?: boolean }): number {
    return this.appendTransaction(entriesFromLines(tx, ops, jsons, count), options)
  }

  /** A transaction at or below `lsn` is still open. */
  openAtOrBelow(lsn: bigint): boolean {
    return this.open && this.last.tx <= lsn
  }

  publish(lsn: bigint): boolean {
    let moved = false
    while (this.pending.length > 0 && this.pending[0]!.tx <= lsn) {
      this.published = this.pending.shift()!
      moved = true
    }
    return moved
  }

  /** Drops everything unpublished. */
  cutToPublished(): void {
    this.pending = []
    this.open = false
    this.entries.length = this.published.entries
    this.chunks.length = this.published.chunks
    const start = this.chunks.at(-1)?.endEntry ?? 0
    this.fill = this.entries.slice(start).reduce((n, e) => n + e.bytes.length, 0)
  }

  read(after: LogOffset): LogRead {
    const { entries: count, chunks: closed } = this.published
    let first = 0
    while (first < count && compareOffsets(this.entries[first]!.offset, after) <= 0) first++
    if (first >= count) {
      return { spans: [], byteLength: 0, entryCount: 0, nextOffset: after, reachedHead: true, release() {} }
    }
    let end = count
    for (let c = 0; c < closed; c++) {
      if (this.chunks[c]!.endEntry > first) {
        end = this.chunks[c]!.endEntry
        break
      }
    }
    const spans = this.entries.slice(first, end).map((e) => ({ kind: 'bytes' as const, bytes: e.bytes }))
    return {
      spans,
      byteLength: spans.reduce((n, s) => n + s.bytes.length, 0),
      entryCount: end - first,
      nextOffset: this.entries[end - 1]!.offset,
      reachedHead: end === count,
      release() {},
    }
  }
}

export interface MemoryStoreOptions {
  readonly chunkBytes?: number
  /** Wait before retrying a finish that had to wait for an open transaction. */
  readonly flushIntervalMs?: number
}

interface Finishing {
  readonly log: MemoryShapeLog
  /** The log's cut right after the snapshot-end line. */
  readonly snapshot: Cut
  resolve(log: MemoryShapeLog): void
  reject(err: unknown): void
}

export class MemoryLogStore implements ShapeLogStore {
  readonly readOnly = false
  private readonly logs = new Map<string, MemoryShapeLog>()
  private readonly creating = new Set<string>()
  private finishing: Finishing[] = []
  private readonly listeners = new Set<(r: FlushResult) => void>()
  private readonly chunkBytes: number
  private readonly flushIntervalMs: number
  private timer: NodeJS.Timeout | undefined
  private advanced = 0n
  private durable = 0n
  private closed = false

  constructor(options: MemoryStoreOptions = {}) {
    this.chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES
    this.flushIntervalMs = options.flushIntervalMs ?? 10
  }

  get durableLsn(): bigint {
    return this.durable
  }

  createShape(id: string, options?: { meta?: Uint8Array }): SnapshotWriter {
    this.ensureOpen()
    checkShapeId(id)
    if (this.logs.has(id) || this.creating.has(id)) throw new StorageError('shape_exists', `shape ${id} already exists`)
    this.creating.add(id)
    const log = new MemoryShapeLog(id, options?.meta ?? new Uint8Array(), this.chunkBytes)
    let state: 'open' | 'ended' | 'finishing' | 'resolved' | 'dropped' = 'open'
    let finishing: Finishing | undefined
    // Where the snapshot region ends: live entries appended after endSnapshot are not part of it.
    let snapshotMark: Finishing['snapshot'] | undefined
    const endRegion = (snapshotEnd: Uint8Array): void => {
      log.pushSnapshotRow(snapshotEnd, true)
      snapshotMark = { entries: log.entries.length, chunks: log.chunks.length, tx: 0n }
    }
    /** Live entries go in once the snapshot has ended, until it is dropped. */
    const checkLive = (): void => {
      if (state === 'open') throw new StorageError('invalid_append', `shape ${id}: live entries follow the snapshot; call endSnapshot() or finish() first`)
      if (state === 'dropped') throw new StorageError('invalid_append', `snapshot of shape ${id} was aborted or failed`)
    }
    return {
      append: (rows, options) => {
        if (state !== 'open') throw new StorageError('invalid_append', `snapshot of shape ${id} is ${state}`)
        if (options?.closeChunk === true && rows.length === 0) throw new StorageError('invalid_append', `shape ${id}: closeChunk needs a row`)
        for (let i = 0; i < rows.length; i++) log.pushSnapshotRow(rows[i]!, options?.closeChunk === true && i === rows.length - 1)
      },
      endSnapshot: (snapshotEnd) => {
        if (state !== 'open') throw new StorageError('invalid_append', `snapshot of shape ${id} is ${state}`)
        endRegion(snapshotEnd)
        state = 'ended'
      },
      finish: (snapshotEnd) => {
        if (state === 'open' && snapshotEnd !== undefined) endRegion(snapshotEnd)
        else if (state !== 'ended' || snapshotEnd !== undefined) {
          const why = state === 'open' ? 'finish() needs the snapshot-end line' : `snapshot of shape ${id} is ${state}`
          return Promise.reject(new StorageError('invalid_append', why))
        }
        state = 'finishing'
        return new Promise<MemoryShapeLog>((resolve, reject) => {
          finishing = {
            log,
            snapshot: snapshotMark!,
            resolve: (l) => {
              state = 'resolved'
              resolve(l)
            },
            reject: (err) => {
              state = 'dropped'
              this.creating.delete(id)
              reject(err)
            },
          }
          this.finishing.push(finishing)
          this.schedule(0)
        })
      },
      appendTransaction: (entries, options) => {
        checkLive()
        return log.appendTransaction(entries, options)
      },
      appendLines: (tx, ops, jsons, count, options) => {
        checkLive()
        return log.appendLines(tx, ops, jsons, count, options)
      },
      abort: async () => {
        if (state === 'open' || state === 'ended') {
          state = 'dropped'
          this.creating.delete(id)
        } else if (state === 'finishing') {
          this.finishing = this.finishing.filter((f) => f !== finishing)
          finishing!.reject(new StorageError('shape_deleted', `snapshot of shape ${id} was aborted`))
        }
      },
    }
  }

  get(id: string): ShapeLog | undefined {
    return this.logs.get(id)
  }

  ids(): string[] {
    return [...this.logs.keys()]
  }

  finishedLogs(): Iterable<ShapeLog> {
    return this.logs.values()
  }

  async deleteShape(id: string): Promise<boolean> {
    return this.logs.delete(id)
  }

  advance(lsn: bigint): void {
    if (lsn > this.advanced) this.advanced = lsn
  }

  async flush(): Promise<FlushResult> {
    this.ensureOpen()
    return this.flushNow()
  }

  private flushNow(): FlushResult {
    if (this.timer) clearTimeout(this.timer)
    this.timer = undefined
    this.durable = this.advanced > this.durable ? this.advanced : this.durable
    const created: Finishing[] = []
    const waiting: Finishing[] = []
    for (const f of this.finishing) {
      if (f.log.openAtOrBelow(this.durable)) {
        waiting.push(f)
        continue
      }
      this.creating.delete(f.log.id)
      this.logs.set(f.log.id, f.log)
      f.log.published = f.snapshot
      f.log.floor = this.durable
      f.log.publish(this.durable)
      created.push(f)
    }
    this.finishing = waiting
    if (waiting.length > 0) this.schedule(this.flushIntervalMs)
    const advanced = created.map((f) => f.log.id)
    for (const log of this.logs.values()) {
      if (log.publish(this.durable) && !created.some((f) => f.log === log)) advanced.push(log.id)
    }
    // Memory flushes are instant; the field is there for the contract's listeners.
    const result = { durableLsn: this.durable, advanced, durationMs: 0 }
    for (const l of this.listeners) l(result)
    for (const f of created) f.resolve(f.log)
    return result
  }

  /** A flush for the snapshots waiting to finish (the file engine's group commit does this). */
  private schedule(ms: number): void {
    if (this.closed) return
    if (this.timer) {
      // A new finish does not wait for the retry of one that had to wait.
      if (ms > 0) return
      clearTimeout(this.timer)
    }
    this.timer = setTimeout(() => {
      this.timer = undefined
      if (!this.closed) this.flushNow()
    }, ms)
  }

  onFlush(listener: (result: FlushResult) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  /** Models a crash and restart: unpublished entries and unfinished logs are gone. */
  restart(): void {
    for (const log of this.logs.values()) log.cutToPublished()
    this.advanced = this.durable
    this.dropFinishing(new StorageError('store_closed', 'the store restarted before the snapshot was finished'))
  }

  private dropFinishing(err: StorageError): void {
    const dropped = this.finishing
    this.finishing = []
    if (this.timer) clearTimeout(this.timer)
    this.timer = undefined
    for (const f of dropped) f.reject(err)
  }

  private ensureOpen(): void {
    if (this.closed) throw new StorageError('store_closed')
  }

  async close(): Promise<void> {
    if (this.closed) return
    // As the file engine does: what can be finished and published is.
    this.flushNow()
    this.closed = true
    this.dropFinishing(new StorageError('store_closed'))
  }
}
