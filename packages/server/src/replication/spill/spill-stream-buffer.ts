import { setImmediate as turn } from 'node:timers/promises'
import { type FsPort, writeFullyAsync } from '@sluice/storage'
import type { Change, StreamAbort, StreamedChange } from '../change-sink.js'
import type { Relation } from '../pgoutput-messages.js'
import type { StreamBuffer } from '../stream-buffer.js'
import { SpillError, spillError } from './errors.js'
import { ByteSink, RECORD_PREFIX_BYTES, SPILL_HEADER_BYTES, checkHeader, decodeChange, encodeChange } from './format.js'
import { SpillDir, type SpillFile, readFully } from './spill-dir.js'

export const DEFAULT_SPILL_MEMORY_BYTES = 1024 * 1024
export const DEFAULT_SPILL_BATCH_CHANGES = 1000
export const DEFAULT_SPILL_BATCH_BYTES = 4 * 1024 * 1024
export const DEFAULT_SPILL_READ_BYTES = 1024 * 1024

export interface SpillStreamBufferOptions {
  /**
   * Encoded bytes of one transaction kept in memory before they are written to
   * its spill file; 0 writes every append through. Default 1 MiB.
   */
  readonly memoryBytes?: number
  /** At most this many changes per batch of `commit`. Default 1000. */
  readonly batchChanges?: number
  /** A batch of `commit` stops once its encoded bytes reach this (one bigger change is a batch of its own). Default 4 MiB. */
  readonly batchBytes?: number
  /** Size of the buffer a commit reads its file through (grown for a bigger record). Default 1 MiB. */
  readonly readBytes?: number
  /** Filesystem port (tests inject faults through it); ignored when a SpillDir is given. */
  readonly fs?: FsPort
}

interface XidState {
  readonly xid: number
  /** The relation table: records store an index into it. */
  readonly relations: Relation[]
  readonly relationIndex: Map<Relation, number>
  /** subxid → logical position (bytes of records before it) of its first change. */
  readonly subxactStart: Map<number, number>
  /** Encoded records not yet written: logical positions [fileLength, fileLength + tail.len). */
  tail: ByteSink | undefined
  /** Bytes of records in the file (after the header). */
  fileLength: number
  /** Physical size of the file, header included; 0 without a file. */
  diskBytes: number
  file: SpillFile | undefined
  /** Set when a write failed: the transaction is incomplete and can only be dropped. */
  failed: SpillError | undefined
  discarded: boolean
  /** Every operation on this xid runs after the previous one settled. */
  chain: Promise<void>
}

interface ReadCursor {
  buf: Buffer
  /** Next unread byte in `buf`. */
  start: number
  /** End of the valid bytes in `buf`. */
  end: number
  /** File position of the byte after `buf[end - 1]`. */
  filePos: number
}

const INITIAL_TAIL_BYTES = 4096
const noop = (): void => {}

/**
 * The disk-backed twin of `MemoryStreamBuffer` (see the rules on
 * `StreamBuffer`): buffers the changes of streamed transactions per
 * top-level xid, keeps at most `memoryBytes` of each in memory and appends the
 * rest to one spill file per xid, cuts a subtransaction out on its abort, and
 * hands a committed transaction back in bounded batches, never whole.
 *
 * Operations on one xid are applied in call order even when the caller does
 * not await them; different xids proceed independently. A failed write
 * (ENOSPC, EIO) rejects with a `SpillError`, deletes that xid's file and marks
 * the xid failed: its appends and its commit then reject with
 * `spill_transaction_failed` until it is dropped with `abort`, and every other
 * xid keeps working. Nothing is fsynced: spill files are scratch.
 */
export class SpillStreamBuffer implements StreamBuffer {
  private readonly open = new Map<number, XidState>()
  /** Committed transactions whose read-back has not finished (and so whose file still exists). */
  private readonly committing = new Set<XidState>()
  /** Files that could not be deleted; retried on close (and wiped by the next SpillDir.open). */
  private readonly orphans: string[] = []
  private readonly fs: FsPort
  private readonly memoryBytes: number
  private readonly batchChanges: number
  private readonly batchBytes: number
  private readonly readBytes: number
  private readonly shrinkAbove: number
  private closed = false
  private closing: Promise<void> | undefined

  private constructor(
    readonly dir: SpillDir,
    options: SpillStreamBufferOptions,
  ) {
    this.fs = dir.fs
    this.memoryBytes = count('memoryBytes', options.memoryBytes ?? DEFAULT_SPILL_MEMORY_BYTES, 0)
    this.batchChanges = count('batchChanges', options.batchChanges ?? DEFAULT_SPILL_BATCH_CHANGES, 1)
    this.batchBytes = count('batchBytes', options.batchBytes ?? DEFAULT_SPILL_BATCH_BYTES, 1)
    this.readBytes = count('readBytes', options.readBytes ?? DEFAULT_SPILL_READ_BYTES, RECORD_PREFIX_BYTES)
    this.shrinkAbove = Math.max(2 * this.memoryBytes, 64 * 1024)
  }

  /**
   * A buffer spilling into `dir`. A path is opened with `SpillDir.open`
   * (created if missing, stale spill files deleted); pass a SpillDir to share
   * one directory with other spill users.
   */
  static async open(dir: string | SpillDir, options: SpillStreamBufferOptions = {}): Promise<SpillStreamBuffer> {
    const spillDir = typeof dir === 'string' ? await SpillDir.open(dir, { fs: options.fs }) : dir
    return new SpillStreamBuffer(spillDir, options)
  }

  /**
   * Encoded bytes of changes held in memory, over all open and committing
   * transactions: at most `memoryBytes` per xid between calls. (The buffer
   * holding them may be up to twice that, and one `append` briefly holds its
   * whole batch encoded before writing it.)
   */
  get bytesInMemory(): number {
    let total = 0
    for (const state of this.open.values()) total += state.tail?.len ?? 0
    for (const state of this.committing) total += state.tail?.len ?? 0
    return total
  }

  /** Size of the spill files that exist now, headers included. */
  get bytesOnDisk(): number {
    let total = 0
    for (const state of this.open.values()) total += state.diskBytes
    for (const state of this.committing) total += state.diskBytes
    return total
  }

  /** Top-level xids with buffered changes (neither committed nor dropped yet). */
  get openTransactions(): number {
    return this.open.size
  }

  /** The open top-level xids. */
  get openXids(): number[] {
    return [...this.open.keys()]
  }

  /** Buffers the next changes of `xid`, in order. */
  append(xid: number, changes: readonly StreamedChange[]): Promise<void> {
    if (this.closed) return Promise.reject(closedError())
    let state = this.open.get(xid)
    if (state === undefined) {
      state = newState(xid)
      this.open.set(xid, state)
    }
    const target = state
    return run(target, () => this.appendNow(target, changes))
  }

  /**
   * A subtransaction abort (`reason === 'aborted'`, `subxid !== xid`) cuts the
   * transaction back to that subtransaction's first change (if it has one);
   * anything else (the whole transaction aborted, already durable, or the
   * connection lost) drops every change of `xid` and deletes its file.
   */
  abort(abort: StreamAbort): Promise<void> {
    if (this.closed) return Promise.reject(closedError())
    const state = this.open.get(abort.xid)
    if (state === undefined) return Promise.resolve()
    if (abort.subxid === abort.xid || abort.reason !== 'aborted') {
      this.open.delete(abort.xid)
      return run(state, () => this.discard(state))
    }
    return run(state, () => this.cutSubtransaction(state, abort.subxid))
  }

  /**
   * The committed transaction's changes, in order, in batches of at most
   * `batchChanges` changes (and about `batchBytes` encoded bytes). The xid is
   * closed at once (a later `append` of the same xid starts a new transaction);
   * its file is deleted when the iteration ends, fails or is abandoned with
   * `break`, or at `close()` when it is never iterated. Iterate it once. An xid
   * with nothing buffered yields nothing.
   */
  commit(xid: number): AsyncIterableIterator<readonly Change[]> {
    const state = this.open.get(xid)
    if (state !== undefined) {
      this.open.delete(xid)
      this.committing.add(state)
    }
    return this.readBack(state)
  }

  /** Drops every transaction and deletes every spill file; later calls reject with `spill_closed`. */
  close(): Promise<void> {
    this.closing ??= this.closeNow()
    return this.closing
  }

  private async closeNow(): Promise<void> {
    this.closed = true
    const states = [...this.open.values(), ...this.committing]
    this.open.clear()
    await Promise.all(states.map((state) => run(state, () => this.discard(state))))
    this.committing.clear()
    for (const path of this.orphans.splice(0)) {
      try {
        this.fs.unlinkSync(path)
      } catch {
        // Still there: the next SpillDir.open wipes it.
      }
    }
  }

  private async appendNow(state: XidState, changes: readonly StreamedChange[]): Promise<void> {
    if (state.failed !== undefined) throw failedError(state)
    if (state.discarded) throw closedError()
    const tail = (state.tail ??= new ByteSink(INITIAL_TAIL_BYTES))
    const mark = tail.len
    const added: number[] = []
    try {
      for (const { subxid, change } of changes) {
        if (!state.subxactStart.has(subxid)) {
          state.subxactStart.set(subxid, state.fileLength + tail.len)
          added.push(subxid)
        }
        encodeChange(tail, change, (relation) => relationIndexOf(state, relation))
      }
    } catch (err) {
      // Nothing of this batch stays: the xid is as it was before the call.
      tail.len = mark
      for (const subxid of added) state.subxactStart.delete(subxid)
      throw new SpillError('spill_invalid_item', `xid ${state.xid}: a change cannot be spilled: ${(err as Error).message}`, { cause: err })
    }
    if (tail.len > this.memoryBytes) await this.writeTail(state, tail)
  }

  /** Appends the in-memory records to the xid's file (created on first use). */
  private async writeTail(state: XidState, tail: ByteSink): Promise<void> {
    try {
      if (state.file === undefined) {
        state.file = await this.dir.createFile(`stream-${state.xid}`, 'stream')
        state.diskBytes = SPILL_HEADER_BYTES
      }
      await writeFullyAsync(this.fs, state.file.fd, tail.buf, tail.len, SPILL_HEADER_BYTES + state.fileLength)
    } catch (err) {
      const error = spillError('spill_write_failed', `spilling ${tail.len} bytes of xid ${state.xid}`, err)
      await this.fail(state, error)
      throw error
    }
    state.fileLength += tail.len
    state.diskBytes = Math.max(state.diskBytes, SPILL_HEADER_BYTES + state.fileLength)
    tail.reset(this.shrinkAbove, INITIAL_TAIL_BYTES)
  }

  private async cutSubtransaction(state: XidState, subxid: number): Promise<void> {
    if (state.failed !== undefined || state.discarded) return
    const start = state.subxactStart.get(subxid)
    if (start === undefined) return
    // Subtransactions that began after the aborted one were nested in it.
    for (const [other, first] of state.subxactStart) if (first >= start) state.subxactStart.delete(other)
    if (start >= state.fileLength) {
      state.tail!.len = start - state.fileLength
      return
    }
    state.tail?.reset(this.shrinkAbove, INITIAL_TAIL_BYTES)
    state.fileLength = start
    if (state.file === undefined) return
    try {
      this.fs.ftruncateSync(state.file.fd, SPILL_HEADER_BYTES + start)
      state.diskBytes = SPILL_HEADER_BYTES + start
    } catch {
      // Truncation only gives the space back: reads stop at the tracked length
      // and later appends overwrite the stale bytes, so the transaction is intact.
    }
  }

  private async *readBack(state: XidState | undefined): AsyncGenerator<readonly Change[], void, undefined> {
    if (state === undefined) {
      if (this.closed) throw closedError()
      return
    }
    try {
      await state.chain
      this.checkOpen()
      if (state.failed !== undefined) throw failedError(state)
      const file = state.file
      if (file !== undefined && state.fileLength > 0) {
        const cursor: ReadCursor = {
          buf: Buffer.allocUnsafe(Math.min(this.readBytes, SPILL_HEADER_BYTES + state.fileLength)),
          start: 0,
          end: 0,
          filePos: 0,
        }
        await run(state, () => this.readHeader(state, file, cursor))
        // One batch read ahead, after a turn of the event loop: reads do not
        // wait for I/O (see readNow), and without the turn a whole transaction
        // would be read back and routed in one run of microtasks, with no
        // flush, write-back or request served until its end.
        const read = async (): Promise<Change[]> => {
          await turn()
          return this.readFileBatch(state, file, cursor)
        }
        let next = run(state, read)
        for (;;) {
          const batch = await next
          if (batch.length === 0) break
          next = run(state, read)
          // Settled through the chain if the consumer stops early (its failure is then nobody's).
          next.catch(noop)
          yield batch
        }
      }
      const tail = state.tail
      let pos = 0
      while (tail !== undefined && pos < tail.len) {
        this.checkOpen()
        const batch: Change[] = []
        let bytes = 0
        while (pos < tail.len && batch.length < this.batchChanges && bytes < this.batchBytes) {
          const n = tail.buf.readUInt32LE(pos)
          batch.push(decodeChange(tail.buf, pos + RECORD_PREFIX_BYTES, pos + RECORD_PREFIX_BYTES + n, state.relations))
          pos += RECORD_PREFIX_BYTES + n
          bytes += RECORD_PREFIX_BYTES + n
        }
        yield batch
      }
    } finally {
      await run(state, () => this.discard(state))
      this.committing.delete(state)
    }
  }

  private async readHeader(state: XidState, file: SpillFile, cursor: ReadCursor): Promise<void> {
    this.checkOpen()
    const header = Buffer.allocUnsafe(SPILL_HEADER_BYTES)
    let got: number
    try {
      got = await readFully(this.fs, file.fd, header, 0, SPILL_HEADER_BYTES, 0)
    } catch (err) {
      throw spillError('spill_read_failed', `reading back xid ${state.xid}`, err)
    }
    checkHeader('stream', header.subarray(0, got))
    cursor.filePos = SPILL_HEADER_BYTES
  }

  private async readFileBatch(state: XidState, file: SpillFile, cursor: ReadCursor): Promise<Change[]> {
    this.checkOpen()
    const limit = SPILL_HEADER_BYTES + state.fileLength
    const out: Change[] = []
    let bytes = 0
    while (out.length < this.batchChanges && bytes < this.batchBytes) {
      if (cursor.end - cursor.start < RECORD_PREFIX_BYTES && !(await this.refill(state, file, cursor, RECORD_PREFIX_BYTES, limit))) break
      const size = RECORD_PREFIX_BYTES + cursor.buf.readUInt32LE(cursor.start)
      if (cursor.end - cursor.start < size) await this.refill(state, file, cursor, size, limit)
      out.push(decodeChange(cursor.buf, cursor.start + RECORD_PREFIX_BYTES, cursor.start + size, state.relations))
      cursor.start += size
      bytes += size
    }
    return out
  }

  /**
   * Makes at least `need` unread bytes available in the cursor. False when the
   * file is exhausted with nothing left over; `spill_corrupt` when it ends
   * inside a record.
   */
  private async refill(state: XidState, file: SpillFile, cursor: ReadCursor, need: number, limit: number): Promise<boolean> {
    while (cursor.end - cursor.start < need) {
      const left = cursor.end - cursor.start
      if (cursor.filePos >= limit) {
        if (left === 0) return false
        throw new SpillError('spill_corrupt', `stream spill file of xid ${state.xid} ends inside a record`)
      }
      if (need > cursor.buf.length) {
        const bigger = Buffer.allocUnsafe(Math.max(need, this.readBytes))
        cursor.buf.copy(bigger, 0, cursor.start, cursor.end)
        cursor.buf = bigger
      } else {
        cursor.buf.copyWithin(0, cursor.start, cursor.end)
      }
      cursor.start = 0
      cursor.end = left
      const want = Math.min(cursor.buf.length - left, limit - cursor.filePos)
      let got: number
      try {
        got = this.readNow(file.fd, cursor.buf, left, want, cursor.filePos)
      } catch (err) {
        throw spillError('spill_read_failed', `reading back xid ${state.xid}`, err)
      }
      if (got < want) throw new SpillError('spill_read_failed', `spill file of xid ${state.xid} is shorter than written (${cursor.filePos + got} < ${limit} bytes)`)
      cursor.end += got
      cursor.filePos += got
    }
    return true
  }

  /**
   * A read-back's read, on the event loop: the file was written moments ago
   * and sits in the page cache, so a read is a copy of well under a
   * millisecond, while one through the thread pool waited its turn behind the
   * store's syncs and, on a busy machine, for a CPU, each time; routing a huge
   * transaction spent about as long waiting for its next batch as routing it.
   */
  private readNow(fd: number, buf: Buffer, offset: number, length: number, position: number): number {
    let done = 0
    while (done < length) {
      const n = this.fs.readSync(fd, buf, offset + done, length - done, position + done)
      if (n === 0) break
      done += n
    }
    return done
  }

  /** Marks the xid failed and frees its memory and file. */
  private async fail(state: XidState, error: SpillError): Promise<void> {
    state.failed = error
    await this.release(state)
  }

  /** Forgets the xid for good: memory and file. Idempotent. */
  private async discard(state: XidState): Promise<void> {
    if (state.discarded) return
    state.discarded = true
    await this.release(state)
  }

  private async release(state: XidState): Promise<void> {
    state.tail = undefined
    state.subxactStart.clear()
    const file = state.file
    state.file = undefined
    state.fileLength = 0
    state.diskBytes = 0
    if (file !== undefined && !(await this.dir.removeFile(file))) this.orphans.push(file.path)
  }

  private checkOpen(): void {
    if (this.closed) throw closedError()
  }
}

function newState(xid: number): XidState {
  return {
    xid,
    relations: [],
    relationIndex: new Map(),
    subxactStart: new Map(),
    tail: undefined,
    fileLength: 0,
    diskBytes: 0,
    file: undefined,
    failed: undefined,
    discarded: false,
    chain: Promise.resolve(),
  }
}

function run<T>(state: XidState, fn: () => T | Promise<T>): Promise<T> {
  const result = state.chain.then(fn)
  state.chain = result.then(noop, noop)
  return result
}

function relationIndexOf(state: XidState, relation: Relation): number {
  let index = state.relationIndex.get(relation)
  if (index === undefined) {
    if (typeof relation !== 'object' || relation === null) throw new TypeError('a change without a relation')
    index = state.relations.length
    state.relations.push(relation)
    state.relationIndex.set(relation, index)
  }
  return index
}

function failedError(state: XidState): SpillError {
  return new SpillError(
    'spill_transaction_failed',
    `xid ${state.xid} lost changes to a failed spill write (${state.failed?.message}); drop it with abort`,
    { cause: state.failed },
  )
}

function closedError(): SpillError {
  return new SpillError('spill_closed', 'the spill stream buffer is closed')
}

function count(name: string, value: number, min: number): number {
  if (!Number.isSafeInteger(value) || value < min) throw new RangeError(`${name} must be an integer ≥ ${min}, got ${value}`)
  return value
}
