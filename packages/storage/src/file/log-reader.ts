/**
 * Offset resolution for a file log: `read(after)` to one contiguous range of
 * log.dat, touching no JSON: a file span, or (for the writer's write-behind
 * tail, see file-log.ts) a bytes span, or a file span and then a bytes span.
 *
 *   1. Binary search the in-memory chunk list (the sparse index) for the first
 *      closed chunk whose end offset is above `after`; none means the open chunk.
 *   2. If `after` is exactly the previous chunk's end (every client that follows
 *      `nextOffset` lands here) the range starts at the chunk start. Otherwise
 *      search that chunk's fixed-width records in entries.idx for the first
 *      entry above `after` (a live reader's last head, a made-up or mid-chunk
 *      offset): galloping back from the chunk's end, then binary.
 *   3. The span runs from that entry's start to the chunk end, or to the
 *      published head when the chunk is still open.
 */
import type { LogOffset } from '@sluice/protocol'
import { compareOffsets } from '@sluice/protocol'
import type { LogRead, Span } from '../contract.js'
import type { FdCache, FileRef } from './fd-cache.js'
import { ENTRY_RECORD_BYTES, HEADER_BYTES, readEntryRecord } from '../format.js'
import type { EntryRecord } from '../format.js'
import type { FsPort } from '../fs-port.js'
import { readFully } from '../fs-port.js'
import { StorageError, fromSystemError } from '../errors.js'
import type { ChunkInfo, HeadState } from './log-state.js'
import { openChunkStart } from './log-state.js'

/**
 * The part of a log not yet in its files (the writer's write-behind, see
 * file-log.ts): log.dat bytes from `dataStart` on, and entry records from
 * `recordsStart` on.
 */
export interface MemoryTail {
  readonly dataStart: number
  /** Valid from 0 to the head's dataEnd - dataStart, until the writer's next append or write-back: copy what is kept. */
  readonly data: Buffer
  readonly recordsStart: number
  record(index: number): EntryRecord
}

export interface ReadContext {
  readonly id: string
  readonly fs: FsPort
  readonly fds: FdCache
  readonly data: FileRef
  readonly entries: FileRef
  readonly chunks: readonly ChunkInfo[]
  readonly head: HeadState
  readonly memory?: MemoryTail | undefined
}

const recordBuf = Buffer.alloc(ENTRY_RECORD_BYTES)

function loadRecord(ctx: ReadContext, index: number): EntryRecord {
  if (ctx.memory && index >= ctx.memory.recordsStart) return ctx.memory.record(index)
  const record = ctx.fds.use(ctx.entries, (fd) => {
    try {
      const n = readFully(ctx.fs, fd, recordBuf, 0, ENTRY_RECORD_BYTES, HEADER_BYTES + index * ENTRY_RECORD_BYTES)
      return n === ENTRY_RECORD_BYTES ? readEntryRecord(recordBuf, 0) : undefined
    } catch (err) {
      throw fromSystemError(err, `read entry record ${index} of shape ${ctx.id}`)
    }
  })
  // A published record always passed its check when it was written or recovered.
  if (!record) throw new StorageError('corrupt_log', `shape ${ctx.id}: entry record ${index} is damaged`)
  return record
}

function emptyRead(after: LogOffset, reachedHead: boolean): LogRead {
  return { spans: [], byteLength: 0, entryCount: 0, nextOffset: after, reachedHead, release() {} }
}

export function readRange(ctx: ReadContext, after: LogOffset): LogRead {
  const { head, chunks } = ctx
  if (head.entries === 0 || compareOffsets(after, head.last) >= 0) return emptyRead(after, true)

  // 1. First closed chunk ending above `after`.
  let lo = 0
  let hi = head.closedChunks
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (compareOffsets(chunks[mid]!.end, after) > 0) hi = mid
    else lo = mid + 1
  }
  const chunkIndex = lo
  const start = openChunkStart(chunks, chunkIndex)
  const closed = chunkIndex < head.closedChunks ? chunks[chunkIndex]! : undefined
  const endEntry = closed ? closed.endEntry : head.entries
  const endPos = closed ? closed.endPos : head.dataEnd
  const nextOffset = closed ? closed.end : head.last

  // 2. First entry above `after` inside the chunk.
  let first = start.entry
  let firstPos = start.pos
  const prev = chunkIndex > 0 ? chunks[chunkIndex - 1] : undefined
  const aligned = prev ? compareOffsets(prev.end, after) === 0 : after.tx < 0n
  if (!aligned) {
    lo = start.entry
    hi = endEntry
    // The last record found at or below `after`, always the one just before the answer (lo moves
    // past it and nothing else moves lo): its end is where the range starts.
    let below: EntryRecord | undefined
    // Galloping back from the end first: a live reader's offset is the head it was last sent, a few
    // records from the end of a chunk that may hold thousands, each probe a read of entries.idx.
    for (let step = 1; hi - step > lo; step *= 2) {
      const probe = hi - step
      const r = loadRecord(ctx, probe)
      if (compareOffsets(r, after) > 0) {
        hi = probe
      } else {
        lo = probe + 1
        below = r
        break
      }
    }
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      const r = loadRecord(ctx, mid)
      if (compareOffsets(r, after) > 0) hi = mid
      else {
        lo = mid + 1
        below = r
      }
    }
    first = lo
    if (below !== undefined) firstPos = below.end
  }
  if (first >= endEntry) return emptyRead(after, endEntry === head.entries)

  // Bytes past the files' end (the writer's write-behind tail) come from memory,
  // copied: the tail's memory is reused once it is written back. A range across
  // the files' end takes both.
  const mem = ctx.memory
  const split = mem && endPos > mem.dataStart ? Math.max(firstPos, mem.dataStart) : endPos
  const spans: Span[] = []
  const fd = split > firstPos ? ctx.fds.acquire(ctx.data) : undefined
  if (fd !== undefined) spans.push({ kind: 'file', fd, position: firstPos, length: split - firstPos })
  if (mem && split < endPos) spans.push({ kind: 'bytes', bytes: Buffer.from(mem.data.subarray(split - mem.dataStart, endPos - mem.dataStart)) })
  return new FileRead(spans, endPos - firstPos, endEntry - first, nextOffset, endEntry === head.entries, fd === undefined ? undefined : ctx)
}

/** A read holding the data file's descriptor until released: a class rather than a closure per read, as reads are per request. */
class FileRead implements LogRead {
  constructor(
    readonly spans: readonly Span[],
    readonly byteLength: number,
    readonly entryCount: number,
    readonly nextOffset: LogOffset,
    readonly reachedHead: boolean,
    /** Where the descriptor goes back to; undefined once released (or when none was taken). */
    private holder: ReadContext | undefined,
  ) {}

  release(): void {
    const ctx = this.holder
    if (ctx === undefined) return
    this.holder = undefined
    ctx.fds.release(ctx.data)
  }
}
