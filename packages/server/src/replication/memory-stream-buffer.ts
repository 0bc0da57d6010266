import type { Change, StreamAbort, StreamedChange } from './change-sink.js'
import type { StreamBuffer } from './stream-buffer.js'

interface OpenStream {
  readonly changes: Change[]
  /** subxid → index of its first change: a subtransaction abort truncates there. */
  readonly subxactStart: Map<number, number>
}

/**
 * The reference `StreamBuffer`, in memory: the rules of stream-buffer.ts with
 * nothing else in the way, for tests and as the model `SpillStreamBuffer` is
 * checked against. It holds every open streamed transaction whole in memory,
 * which is exactly what a production buffer must not do.
 */
export class MemoryStreamBuffer implements StreamBuffer {
  private readonly open = new Map<number, OpenStream>()

  /** Top-level xids with buffered changes. */
  get openXids(): number[] {
    return [...this.open.keys()]
  }

  append(xid: number, changes: readonly StreamedChange[]): void {
    let stream = this.open.get(xid)
    if (stream === undefined) {
      stream = { changes: [], subxactStart: new Map() }
      this.open.set(xid, stream)
    }
    for (const { subxid, change } of changes) {
      if (!stream.subxactStart.has(subxid)) stream.subxactStart.set(subxid, stream.changes.length)
      stream.changes.push(change)
    }
  }

  abort(abort: StreamAbort): void {
    if (abort.subxid === abort.xid) {
      this.open.delete(abort.xid)
      return
    }
    const stream = this.open.get(abort.xid)
    const start = stream?.subxactStart.get(abort.subxid)
    if (stream === undefined || start === undefined) return
    stream.changes.length = start
    // Subtransactions that began after the aborted one were nested in it.
    for (const [subxid, first] of stream.subxactStart) if (first >= start) stream.subxactStart.delete(subxid)
  }

  /** The transaction's changes as one batch (none when nothing was buffered). */
  commit(xid: number): AsyncIterable<readonly Change[]> {
    const stream = this.open.get(xid)
    this.open.delete(xid)
    return batchesOf(stream?.changes)
  }
}

async function* batchesOf(changes: readonly Change[] | undefined): AsyncGenerator<readonly Change[], void, undefined> {
  if (changes !== undefined && changes.length > 0) yield changes
}
