/**
 * One read of a shape's new entries for every live request that wants the
 * same range in one wake burst (docs/architecture.md §5, "Fan-out").
 *
 * A flush that publishes a write resolves every waiter of the shape in one
 * synchronous step (`LiveWaiters`); their continuations, and the live requests
 * that arrive in the same turn of the event loop, then each ask for the range
 * after their offset. Most ask for the same one. The first asker reads it; the
 * others get the same object:
 *
 *   key = handle · start offset · published head
 *
 * The head in the key makes an entry answer only for exactly the published
 * state it was read from, so a range is never served past a later publish nor
 * with unpublished bytes (the store's `read` only ever covers published
 * entries). Handles are never reused, so a rotated or deleted shape's entries
 * cannot answer for its successor.
 *
 * Lifetime: entries are forgotten at the end of the turn that made them (one
 * `setImmediate`), when the burst is over; requests already holding a range
 * keep it until their responses are written. Size: at most `maxBytes` of
 * ranges per turn; a range that does not fit is read by each request for
 * itself, as without sharing.
 *
 * What is shared:
 *  - memory ranges: the stored bytes, copied once into a buffer of their own
 *    (the store's read held until the copy is done: a large one is read on
 *    the thread pool); each distinct body (`[`, the bytes, the up-to-date
 *    line, `]`) and the SSE events (with and without each distinct
 *    up-to-date event after them) are built once from them;
 *  - file ranges for sendfile (`fileRangeMinBytes`): the one `LogRead`, held by
 *    every response that sends from it and released by the last.
 */
import type { LogOffset } from '@sluice/protocol'
import type { LogRead, ShapeLog } from '@sluice/storage'
import { readSpansInto, readSpansIntoAsync } from '@sluice/storage'
import { frameEntries, frameEvent, MalformedEntriesError } from './split-entries.js'

/** Ranges read in one turn, together, past which further ones are not shared: a few large chunks. */
export const DEFAULT_SHARED_READ_BYTES = 64 * 1024 * 1024
/** Ranges above this are read on the thread pool (as `log-body.ts` does), so one large read does not stall the loop. */
const ASYNC_READ_BYTES = 256 * 1024

const OPEN = 0x5b
const CLOSE = 0x5d

export interface SharedReadsOptions {
  /** Counts each read of a log range (the `sluice_http_log_reads_total` metric). */
  readonly onRead?: (() => void) | undefined
  /** Bytes of ranges read per turn beyond which ranges are not shared; default 64 MiB. */
  readonly maxBytes?: number
  /** File-backed bytes from which a range is kept as a file range for sendfile instead of being read; default never. */
  readonly fileRangeMinBytes?: number
}

/** One range of a log, read once, for every request of the burst that wants it. */
export class SharedRange {
  readonly entryCount: number
  readonly byteLength: number
  readonly nextOffset: LogOffset
  readonly reachedHead: boolean
  private stored: Promise<Buffer> | undefined
  private readonly bodies = new Map<string, Promise<Buffer>>()
  private events: Promise<Buffer> | undefined
  /** The `LogRead` of a file range, with the holds on it (the cache's own included). */
  private file: { read: LogRead; holds: number } | undefined

  constructor(read: LogRead, keepFile: boolean) {
    this.entryCount = read.entryCount
    this.byteLength = read.byteLength
    this.nextOffset = read.nextOffset
    this.reachedHead = read.reachedHead
    if (keepFile) {
      this.file = { read, holds: 1 }
      return
    }
    // Released once copied: a large range is read on the thread pool after this returns, from the descriptor
    // number the read holds, which a release now would let the store close and the next open take.
    let copied: Promise<Buffer>
    try {
      copied = copyOut(read)
    } catch (error) {
      read.release()
      throw error
    }
    this.stored = copied.finally(() => read.release())
    // Rejections are the askers' to see; this keeps one that nobody awaited from being reported as unhandled.
    this.stored.catch(() => {})
  }

  /** Whether this range is kept as a file range (for sendfile) rather than read into memory. */
  get isFile(): boolean {
    return this.file !== undefined
  }

  /**
   * A hold on the file range, for one sendfile response: a `LogRead` whose
   * `release` drops this hold (the last one releases the store's read). Only
   * for file ranges, and only until the burst ends (then `undefined`).
   */
  holdFile(): LogRead | undefined {
    const file = this.file
    if (file === undefined || file.holds === 0) return undefined
    file.holds++
    let released = false
    const read = file.read
    return {
      spans: read.spans,
      byteLength: read.byteLength,
      entryCount: read.entryCount,
      nextOffset: read.nextOffset,
      reachedHead: read.reachedHead,
      release: () => {
        if (released) return
        released = true
        this.dropHold()
      },
    }
  }

  /** The stored bytes (`json,` per entry). */
  bytes(): Promise<Buffer> {
    if (this.stored !== undefined) return this.stored
    // A file range some request cannot sendfile (a TLS socket, SSE): read once, for all of them.
    const hold = this.holdFile()
    if (hold === undefined) return Promise.reject(new Error('a shared file range was asked for its bytes after its burst ended'))
    this.stored = copyOut(hold).finally(() => hold.release())
    this.stored.catch(() => {})
    return this.stored
  }

  /** The response body: `[` + entries + `tail` + `]`, or without the last `,` and no tail. One buffer per distinct tail. */
  body(tail: string | undefined): Promise<Buffer> {
    const key = tail ?? ''
    let body = this.bodies.get(key)
    if (body === undefined) {
      body = this.bytes().then((stored) => framedBody(stored, tail))
      body.catch(() => {})
      this.bodies.set(key, body)
    }
    return body
  }

  /**
   * The entries as SSE events followed by `upToDate` as one more event, in one
   * buffer per distinct line: every stream woken by the write sends the same
   * bytes with one socket write.
   */
  sseEventsThen(upToDate: string): Promise<Buffer> {
    const key = `sse ${upToDate}`
    let framed = this.bodies.get(key)
    if (framed === undefined) {
      framed = this.sseEvents().then((events) => Buffer.concat([events, frameEvent(upToDate)]))
      framed.catch(() => {})
      this.bodies.set(key, framed)
    }
    return framed
  }

  /** The entries as SSE events, one `data:` event each. */
  sseEvents(): Promise<Buffer> {
    if (this.events === undefined) {
      this.events = this.bytes().then((stored) => {
        const { events, entryCount } = frameEntries(stored)
        if (entryCount !== this.entryCount) {
          throw new MalformedEntriesError(`stored range has ${entryCount} entries by scan, ${this.entryCount} by the store`)
        }
        return events
      })
      this.events.catch(() => {})
    }
    return this.events
  }

  /** The cache's own hold, dropped when the burst ends. */
  endBurst(): void {
    if (this.file !== undefined && this.file.holds > 0) this.dropHold()
  }

  private dropHold(): void {
    const file = this.file!
    if (--file.holds === 0) file.read.release()
  }
}

export class SharedReads {
  private readonly entries = new Map<string, SharedRange>()
  private readonly onRead: () => void
  private readonly maxBytes: number
  private readonly fileRangeMinBytes: number
  private bytes = 0
  private clearing = false

  constructor(options: SharedReadsOptions = {}) {
    this.onRead = options.onRead ?? (() => {})
    this.maxBytes = options.maxBytes ?? DEFAULT_SHARED_READ_BYTES
    this.fileRangeMinBytes = options.fileRangeMinBytes ?? Number.POSITIVE_INFINITY
  }

  /**
   * The range of `log` after `after`: the one read in this turn for the same
   * head, or a new read, shared. When the turn's budget has no room for it,
   * the store's `LogRead` itself, for the caller alone (and to release).
   */
  read(log: ShapeLog, after: LogOffset): SharedRange | LogRead {
    const head = log.head().lastOffset
    const key = `${log.id} ${after.tx}_${after.op} ${head.tx}_${head.op}`
    const found = this.entries.get(key)
    if (found !== undefined) return found
    const read = log.read(after)
    this.onRead()
    const keepFile = fileBytes(read) >= this.fileRangeMinBytes
    const cost = keepFile ? 0 : read.byteLength
    if (this.bytes + cost > this.maxBytes) return read
    this.bytes += cost
    const range = new SharedRange(read, keepFile)
    this.entries.set(key, range)
    this.ended.push(range)
    if (!this.clearing) {
      this.clearing = true
      setImmediate(() => this.endBurst())
    }
    return range
  }

  /** Ranges currently kept (for tests). */
  get size(): number {
    return this.entries.size
  }

  /** Ranges of this turn, whose holds end with it. */
  private readonly ended: SharedRange[] = []

  private endBurst(): void {
    this.clearing = false
    this.entries.clear()
    this.bytes = 0
    for (const range of this.ended.splice(0)) range.endBurst()
  }
}

function fileBytes(read: LogRead): number {
  let n = 0
  for (const span of read.spans) if (span.kind === 'file') n += span.length
  return n
}

/** The read's bytes in a buffer of their own; the read must stay unreleased until the promise settles. */
function copyOut(read: LogRead): Promise<Buffer> {
  const out = Buffer.allocUnsafeSlow(read.byteLength)
  if (read.byteLength <= ASYNC_READ_BYTES) {
    readSpansInto(read, out)
    return Promise.resolve(out)
  }
  return readSpansIntoAsync(read, out).then(() => out)
}

/** As `logBody` lays a body out (log-body.ts), from bytes already read. */
function framedBody(stored: Buffer, tail: string | undefined): Buffer {
  const tailBytes = tail === undefined ? 0 : Buffer.byteLength(tail)
  const keep = tail === undefined && stored.length > 0 ? stored.length - 1 : stored.length
  const body = Buffer.allocUnsafeSlow(keep + tailBytes + 2)
  body[0] = OPEN
  stored.copy(body, 1, 0, keep)
  let end = 1 + keep
  if (tail !== undefined) end += body.write(tail, end, 'utf8')
  body[end] = CLOSE
  return body
}
