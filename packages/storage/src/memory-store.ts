/**
 * The reference implementation: plain arrays, written to be obviously right
 * rather than fast. The file engine must agree with it on every read; the
 * shared contract suite and the property tests hold them to that.
 *
 * `restart()` models a process restart: everything not yet published is lost,
 * as the file engine's recovery cuts it.
 */
import type { LogOffset } from '@sluice/protocol'
import { BEFORE_ALL, compareOffsets } from '@sluice/protocol'
import type { FlushResult, LogEntryInput, LogHead, LogRead, ShapeLog, ShapeLogStore, SnapshotWriter } from './contract.js'
import { StorageError } from './errors.js'
import { DEFAULT_CHUNK_BYTES, checkShapeId } from './defaults.js'
import { SEPARATOR } from './format.js'

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
    let prev = this.last
    for (const e of fresh) {
      if (e.offset.tx !== tx) throw new StorageError('invalid_append', `shape ${this.id}: one append holds one transaction`)
      if (compareOffsets(e.offset, prev) <= 0) throw new StorageError('invalid_append', `shape ${this.id}: offsets must increase`)
      prev = e.offset
    }
    for (const e of fresh) this.push(e.offset, e.json, false)
    if (!options?.more) this.pending.push({ entries: this.entries.length, chunks: this.chunks.length, tx })
    return fresh.length
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
}

export class MemoryLogStore implements ShapeLogStore {
  readonly readOnly = false
  private readonly logs = new Map<string, MemoryShapeLog>()
  private readonly creating = new Set<string>()
  private readonly listeners = new Set<(r: FlushResult) => void>()
  private readonly chunkBytes: number
  private advanced = 0n
  private durable = 0n
  private closed = false

  constructor(options: MemoryStoreOptions = {}) {
    this.chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES
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
    let open = true
    return {
      append: (rows) => {
        if (!open) throw new StorageError('invalid_append', `snapshot of shape ${id} is closed`)
        for (const row of rows) log.pushSnapshotRow(row, false)
      },
      finish: async (snapshotEnd) => {
        if (!open) throw new StorageError('invalid_append', `snapshot of shape ${id} is closed`)
        open = false
        log.pushSnapshotRow(snapshotEnd, true)
        log.published = { entries: log.entries.length, chunks: log.chunks.length, tx: 0n }
        this.creating.delete(id)
        this.logs.set(id, log)
        // As in the file engine, a snapshot becomes durable through a flush, which
        // publishes whatever else was waiting.
        await this.flushWith([id])
        return log
      },
      abort: async () => {
        open = false
        this.creating.delete(id)
      },
    }
  }

  get(id: string): ShapeLog | undefined {
    return this.logs.get(id)
  }

  ids(): string[] {
    return [...this.logs.keys()]
  }

  async deleteShape(id: string): Promise<boolean> {
    return this.logs.delete(id)
  }

  advance(lsn: bigint): void {
    if (lsn > this.advanced) this.advanced = lsn
  }

  async flush(): Promise<FlushResult> {
    this.ensureOpen()
    return this.flushWith([])
  }

  private async flushWith(created: string[]): Promise<FlushResult> {
    this.durable = this.advanced > this.durable ? this.advanced : this.durable
    const advanced: string[] = [...created]
    for (const log of this.logs.values()) if (log.publish(this.durable)) advanced.push(log.id)
    const result = { durableLsn: this.durable, advanced }
    for (const l of this.listeners) l(result)
    return result
  }

  onFlush(listener: (result: FlushResult) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  /** Models a crash and restart: unpublished entries are gone. */
  restart(): void {
    for (const log of this.logs.values()) log.cutToPublished()
    this.advanced = this.durable
  }

  private ensureOpen(): void {
    if (this.closed) throw new StorageError('store_closed')
  }

  async close(): Promise<void> {
    this.closed = true
  }
}
