import { type FsPort, writeFullyAsync } from '@sluice/storage'
import { SpillError, spillError } from './errors.js'
import { RECORD_PREFIX_BYTES, SPILL_HEADER_BYTES } from './format.js'
import { SpillDir, type SpillFile, readFully } from './spill-dir.js'

/** How a SpillQueue turns its items into bytes and back. */
export interface QueueCodec<T> {
  /** The item's bytes. The queue keeps the returned array until it is written: do not reuse it. */
  encode(item: T): Uint8Array
  /**
   * The item back from its bytes. `bytes` is a view the queue reuses after the
   * call returns: copy whatever the item keeps.
   */
  decode(bytes: Uint8Array): T
  /** Memory the item holds while queued in memory, for accounting; must not change while it is queued. */
  size(item: T): number
}

export const DEFAULT_QUEUE_FLUSH_BYTES = 256 * 1024
export const DEFAULT_QUEUE_READ_BYTES = 256 * 1024
/** Once drained, a file bigger than this is truncated back to its header. */
const TRUNCATE_DRAINED_ABOVE = 1024 * 1024
/** Upper bound of one write: a large spill() goes out in pieces of about this size. */
const MAX_WRITE_BYTES = 4 * 1024 * 1024

export interface SpillQueueOptions {
  /** Once spilled, encoded items buffered in memory up to this many bytes before the queue writes them out. Default 256 KiB. */
  readonly flushBytes?: number
  /** Bytes per read when shifting items back from the file (grown for a bigger item). Default 256 KiB. */
  readonly readBytes?: number
  /** Filesystem port when `dir` is a path; ignored when a SpillDir is given. */
  readonly fs?: FsPort
}

const noop = (): void => {}

/**
 * A FIFO queue of items for one consumer: in memory until `spill()`, then in a
 * file in the spill directory (format.ts, "queue file"), with pushes after the
 * spill buffered in memory up to `flushBytes` and written by the queue itself.
 *
 * `push` is synchronous and never loses an item: an item whose write fails
 * stays in memory (in order) and the failure is reported, as a `SpillError`,
 * by the next `shift()` or `spill()`; the write is retried by the next flush.
 * While the disk keeps failing, pushed items therefore accumulate in memory.
 *
 * Order is exact across the memory/file switch and under concurrency: pushes
 * may happen while a `spill()` or `shift()` is awaiting I/O; all I/O runs one
 * operation at a time, and file items always precede buffered ones.
 */
export class SpillQueue<T> {
  readonly dir: SpillDir
  private readonly fs: FsPort
  private readonly flushBytes: number
  private readonly readBytes: number

  /** Unspilled: the items. */
  private memory: T[] = []
  private memoryHead = 0
  private memorySize = 0

  private isSpilled = false
  /** Spilled: encoded items not yet written, in order after the file's items. */
  private pending: (Uint8Array | undefined)[] = []
  private pendingHead = 0
  private pendingBytes = 0

  private file: SpillFile | undefined
  /** Logical positions (after the header) of the unread items in the file. */
  private readPos = 0
  private fileEnd = 0
  private fileItems = 0
  private diskBytes = 0

  /** All file I/O runs on this chain, one operation at a time. */
  private io: Promise<void> = Promise.resolve()
  private flushQueued = false
  /** A background flush failure not reported yet. */
  private deferred: SpillError | undefined
  private disposed = false

  constructor(
    dir: string | SpillDir,
    readonly name: string,
    private readonly codec: QueueCodec<T>,
    options: SpillQueueOptions = {},
  ) {
    this.dir = typeof dir === 'string' ? SpillDir.at(dir, { fs: options.fs }) : dir
    this.fs = this.dir.fs
    this.flushBytes = nonNegative('flushBytes', options.flushBytes ?? DEFAULT_QUEUE_FLUSH_BYTES)
    this.readBytes = Math.max(RECORD_PREFIX_BYTES, nonNegative('readBytes', options.readBytes ?? DEFAULT_QUEUE_READ_BYTES))
  }

  /** Items queued (in memory and on disk). */
  get length(): number {
    return this.memory.length - this.memoryHead + this.pending.length - this.pendingHead + this.fileItems
  }

  /** Bytes the queued items hold in memory: `codec.size` before the spill, encoded bytes not yet written after. */
  get memoryBytes(): number {
    return this.isSpilled ? this.pendingBytes : this.memorySize
  }

  /** Size of the queue's file, header included; 0 before the spill. */
  get bytesOnDisk(): number {
    return this.diskBytes
  }

  get spilled(): boolean {
    return this.isSpilled
  }

  /**
   * Appends an item: to memory, or once spilled to the write buffer (flushed
   * by the queue). Once spilled the item is encoded here, so a codec failure
   * throws `spill_invalid_item` and the item is not queued.
   */
  push(item: T): void {
    if (this.disposed) throw disposedError(this.name)
    if (!this.isSpilled) {
      const size = this.codec.size(item)
      this.memory.push(item)
      this.memorySize += size
      return
    }
    const bytes = this.encode(item)
    this.pending.push(bytes)
    this.pendingBytes += bytes.byteLength
    if (this.pendingBytes >= this.flushBytes) this.scheduleFlush()
  }

  /**
   * Moves the in-memory items to the file; later pushes go to the file too.
   * Once spilled, flushes whatever is buffered. Rejects with a SpillError when
   * a write fails (this one's or an earlier background one's); the items stay
   * queued, and a later `spill()` or flush retries.
   */
  async spill(): Promise<void> {
    if (this.disposed) throw disposedError(this.name)
    if (!this.isSpilled) {
      // Encode everything first: a codec failure leaves the queue untouched.
      const encoded: Uint8Array[] = []
      let bytes = 0
      for (let i = this.memoryHead; i < this.memory.length; i++) {
        const item = this.encode(this.memory[i] as T)
        encoded.push(item)
        bytes += item.byteLength
      }
      this.isSpilled = true
      this.pending = encoded
      this.pendingHead = 0
      this.pendingBytes = bytes
      this.memory = []
      this.memoryHead = 0
      this.memorySize = 0
    }
    const deferred = this.takeDeferred()
    if (deferred !== undefined) throw deferred
    await this.locked(() => this.flush())
  }

  /** The next items in FIFO order, at most `max` (fewer only when the queue holds fewer). */
  async shift(max: number): Promise<T[]> {
    if (this.disposed) throw disposedError(this.name)
    if (!(max >= 0) || (!Number.isInteger(max) && max !== Number.POSITIVE_INFINITY)) {
      throw new RangeError(`shift: max must be a non-negative integer, got ${max}`)
    }
    if (!this.isSpilled) return this.shiftMemory(max)
    return this.locked(() => this.shiftSpilled(max))
  }

  /** Drops every item and deletes the file; later calls throw `spill_closed`. */
  async dispose(): Promise<void> {
    if (this.disposed) return
    this.disposed = true
    this.memory = []
    this.memoryHead = 0
    this.memorySize = 0
    await this.locked(async () => {
      this.pending = []
      this.pendingHead = 0
      this.pendingBytes = 0
      this.fileItems = 0
      this.readPos = 0
      this.fileEnd = 0
      this.diskBytes = 0
      const file = this.file
      this.file = undefined
      if (file !== undefined && !(await this.dir.removeFile(file))) {
        throw new SpillError('spill_open_failed', `could not delete spill file ${file.path}`)
      }
    })
  }

  private shiftMemory(max: number): T[] {
    const end = Math.min(this.memory.length, this.memoryHead + max)
    const out = this.memory.slice(this.memoryHead, end)
    for (const item of out) this.memorySize -= this.codec.size(item)
    this.memoryHead = end
    if (this.memoryHead === this.memory.length) {
      this.memory = []
      this.memoryHead = 0
      this.memorySize = 0
    } else if (this.memoryHead > 1024 && this.memoryHead * 2 > this.memory.length) {
      this.memory = this.memory.slice(this.memoryHead)
      this.memoryHead = 0
    }
    return out
  }

  private async shiftSpilled(max: number): Promise<T[]> {
    const deferred = this.takeDeferred()
    if (deferred !== undefined) throw deferred
    if (this.disposed) throw disposedError(this.name)
    // Read and decode everything first, then consume: a failure leaves every item queued.
    const fromFile = this.fileItems > 0 && max > 0 ? await this.readFile(max) : { items: [] as T[], end: this.readPos }
    const fileCount = fromFile.items.length
    const out = fromFile.items
    let head = this.pendingHead
    let bytes = 0
    while (out.length < max && head < this.pending.length) {
      const encoded = this.pending[head]!
      out.push(this.decode(encoded))
      bytes += encoded.byteLength
      head++
    }
    this.readPos = fromFile.end
    this.fileItems -= fileCount
    for (let i = this.pendingHead; i < head; i++) this.pending[i] = undefined
    this.pendingHead = head
    this.pendingBytes -= bytes
    this.compactPending()
    if (this.fileItems === 0 && this.fileEnd > 0) await this.resetDrainedFile()
    return out
  }

  /** Reads up to `max` items from the file at `readPos`; returns them and the position after them. */
  private async readFile(max: number): Promise<{ items: T[]; end: number }> {
    const file = this.file!
    const items: T[] = []
    let pos = this.readPos
    let buf = Buffer.allocUnsafe(Math.min(this.readBytes, this.fileEnd - pos))
    while (items.length < max && pos < this.fileEnd) {
      const length = Math.min(buf.length, this.fileEnd - pos)
      await this.readAt(file, buf, length, pos)
      let off = 0
      while (items.length < max && off + RECORD_PREFIX_BYTES <= length) {
        const size = RECORD_PREFIX_BYTES + buf.readUInt32LE(off)
        if (off + size > length) break
        items.push(this.decode(buf.subarray(off + RECORD_PREFIX_BYTES, off + size)))
        off += size
      }
      if (off === 0) {
        // An item bigger than the buffer: read it whole.
        if (length < RECORD_PREFIX_BYTES) throw corrupt(this.name, 'the file ends inside an item')
        const size = RECORD_PREFIX_BYTES + buf.readUInt32LE(0)
        if (pos + size > this.fileEnd) throw corrupt(this.name, 'an item runs past the end of the file')
        buf = Buffer.allocUnsafe(size)
        await this.readAt(file, buf, size, pos)
        items.push(this.decode(buf.subarray(RECORD_PREFIX_BYTES, size)))
        off = size
      }
      pos += off
    }
    return { items, end: pos }
  }

  private async readAt(file: SpillFile, buf: Buffer, length: number, pos: number): Promise<void> {
    let got: number
    try {
      got = await readFully(this.fs, file.fd, buf, 0, length, SPILL_HEADER_BYTES + pos)
    } catch (err) {
      throw spillError('spill_read_failed', `reading spilled queue ${this.name}`, err)
    }
    if (got < length) throw new SpillError('spill_read_failed', `spilled queue ${this.name}: the file is shorter than written`)
  }

  /** Every item has been read back: start the file over (and give the space back when it is big). */
  private async resetDrainedFile(): Promise<void> {
    this.readPos = 0
    this.fileEnd = 0
    if (this.file === undefined || this.diskBytes <= TRUNCATE_DRAINED_ABOVE) return
    try {
      this.fs.ftruncateSync(this.file.fd, SPILL_HEADER_BYTES)
      this.diskBytes = SPILL_HEADER_BYTES
    } catch {
      // Only space: writes go at the tracked end and overwrite the stale bytes.
    }
  }

  /**
   * Writes the items buffered when it starts (later pushes wait for the next
   * flush), in pieces. An item leaves `pending` only once its piece is written,
   * so a failure keeps every unwritten item, in order.
   */
  private async flush(): Promise<void> {
    if (this.disposed) return
    const stop = this.pending.length
    while (this.pendingHead < stop) {
      if (this.file === undefined) {
        this.file = await this.dir.createFile(`queue-${this.name}`, 'queue')
        this.diskBytes = SPILL_HEADER_BYTES
      }
      let end = this.pendingHead
      let size = 0
      while (end < stop && (end === this.pendingHead || size + RECORD_PREFIX_BYTES + this.pending[end]!.byteLength <= MAX_WRITE_BYTES)) {
        size += RECORD_PREFIX_BYTES + this.pending[end]!.byteLength
        end++
      }
      const out = Buffer.allocUnsafe(size)
      let off = 0
      let bytes = 0
      for (let i = this.pendingHead; i < end; i++) {
        const item = this.pending[i]!
        out.writeUInt32LE(item.byteLength, off)
        out.set(item, off + RECORD_PREFIX_BYTES)
        off += RECORD_PREFIX_BYTES + item.byteLength
        bytes += item.byteLength
      }
      try {
        await writeFullyAsync(this.fs, this.file.fd, out, size, SPILL_HEADER_BYTES + this.fileEnd)
      } catch (err) {
        throw spillError('spill_write_failed', `spilling queue ${this.name}`, err)
      }
      if (this.disposed) return
      for (let i = this.pendingHead; i < end; i++) this.pending[i] = undefined
      this.fileItems += end - this.pendingHead
      this.pendingHead = end
      this.pendingBytes -= bytes
      this.fileEnd += size
      this.diskBytes = Math.max(this.diskBytes, SPILL_HEADER_BYTES + this.fileEnd)
    }
    this.compactPending()
  }

  private scheduleFlush(): void {
    if (this.flushQueued || this.deferred !== undefined) return
    this.flushQueued = true
    this.locked(() => {
      this.flushQueued = false
      return this.flush()
    }).catch((err: unknown) => {
      this.deferred ??= spillError('spill_write_failed', `spilling queue ${this.name}`, err)
    })
  }

  private compactPending(): void {
    if (this.pendingHead === this.pending.length) {
      this.pending = []
      this.pendingHead = 0
    } else if (this.pendingHead > 1024 && this.pendingHead * 2 > this.pending.length) {
      this.pending = this.pending.slice(this.pendingHead)
      this.pendingHead = 0
    }
  }

  private takeDeferred(): SpillError | undefined {
    const deferred = this.deferred
    this.deferred = undefined
    return deferred
  }

  private locked<R>(fn: () => R | Promise<R>): Promise<R> {
    const result = this.io.then(fn)
    this.io = result.then(noop, noop)
    return result
  }

  private encode(item: T): Uint8Array {
    try {
      return this.codec.encode(item)
    } catch (err) {
      throw new SpillError('spill_invalid_item', `queue ${this.name}: an item cannot be encoded: ${(err as Error).message}`, { cause: err })
    }
  }

  private decode(bytes: Uint8Array): T {
    try {
      return this.codec.decode(bytes)
    } catch (err) {
      throw new SpillError('spill_corrupt', `queue ${this.name}: an item does not decode: ${(err as Error).message}`, { cause: err })
    }
  }
}

function disposedError(name: string): SpillError {
  return new SpillError('spill_closed', `spill queue ${name} is disposed`)
}

function corrupt(name: string, detail: string): SpillError {
  return new SpillError('spill_corrupt', `spilled queue ${name}: ${detail}`)
}

function nonNegative(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${name} must be a non-negative integer, got ${value}`)
  return value
}
