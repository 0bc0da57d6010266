import type { LogOffset } from '@sluice/protocol'
import { BEFORE_ALL, compareOffsets } from '@sluice/protocol'
import type { LogEntryInput, ShapeLog, ShapeLogStore } from '@sluice/storage'
import { readSpans, readSpansAsync } from '@sluice/storage'
import { splitEntries } from '../../http/live/split-entries.js'
import { ChangeMerger, rowOf } from './merge-changes.js'
import type { TeeTarget } from './tee-target.js'

/*
 * One log's compaction, the storage half: the old log's prefix up to `until`
 * read twice (the merge, then its snapshot chunks again to keep the rows no
 * change superseded), written as a new log under `newId` whose snapshot
 * chunks keep their numbers and whose live region holds one message per
 * changed key at the offset of its last change (merge-changes.ts); then the
 * parts the tee held, and `finish`. The old log is only read: appends and
 * reads of it go on meanwhile. Memory: one chunk read at a time, plus the
 * merger's map (one entry per key changed since the snapshot, with the
 * values its changes carried).
 */

export interface CompactedLog {
  readonly log: ShapeLog
  /** Bytes of the old log's prefix and of what replaced it. */
  readonly bytesBefore: number
  readonly bytesAfter: number
  /** Keys the merge held at most. */
  readonly keys: number
  readonly changes: number
}

/** Chunks up to this size are read synchronously, as HTTP reads small ranges (http/log-body.ts): a thread-pool round trip per small chunk, queued behind the group commit's fdatasyncs, made a compaction crawl. */
const SYNC_READ_BYTES = 256 * 1024
/** Work between two yields to the event loop, so routing and requests take turns with a compaction. */
const YIELD_EVERY_BYTES = 256 * 1024

/** Counts work done in one step of the event loop; `due` once a step has done enough, `rest` gives the loop its turn. */
class Pace {
  private done = 0
  constructor(private readonly check: () => void) {}

  due(bytes: number): boolean {
    this.done += bytes
    return this.done >= YIELD_EVERY_BYTES
  }

  async rest(): Promise<void> {
    this.done = 0
    await new Promise((resolve) => setImmediate(resolve))
    this.check()
  }
}

/** Calls `each` with every chunk's bytes from the start to the chunk holding `until` (or the head); stops when it returns false. */
async function eachChunk(log: ShapeLog, until: LogOffset, check: () => void, each: (bytes: Buffer, end: LogOffset) => Promise<boolean>): Promise<void> {
  let at: LogOffset = BEFORE_ALL
  for (;;) {
    check()
    const read = log.read(at)
    if (read.entryCount === 0) {
      read.release()
      return
    }
    let bytes: Buffer
    try {
      bytes = read.byteLength > SYNC_READ_BYTES ? await readSpansAsync(read) : readSpans(read)
    } finally {
      read.release()
    }
    at = read.nextOffset
    if (!(await each(bytes, at))) return
    if (compareOffsets(at, until) >= 0) return
  }
}

/** Builds the compacted log; `tee` then feeds it every later part. On failure the new log is dropped and the error thrown. */
export async function compactLog(
  store: ShapeLogStore,
  old: ShapeLog,
  until: LogOffset,
  newId: string,
  tee: TeeTarget,
  signal?: AbortSignal,
  maxMergeBytes = Number.POSITIVE_INFINITY,
  wanted: () => boolean = () => true,
): Promise<CompactedLog> {
  // Stopped (the server stops), the tee gave up (more changes held than it may keep), or the shape went
  // (invalidated, deleted, evicted): a new log finished for a shape that is gone could outlive it after a crash.
  const check = (): void => {
    signal?.throwIfAborted()
    if (tee.failed !== undefined) throw tee.failed
    if (!wanted()) throw new Error(`the shape of ${old.id} went while its log was compacted`)
  }
  // Entries are parsed one by one, the event loop getting its turn every YIELD_EVERY_BYTES (a chunk may be 10 MiB).
  const pace = new Pace(check)
  const merger = new ChangeMerger()
  let bytesBefore = 0
  await eachChunk(old, until, check, async (bytes, end) => {
    bytesBefore += bytes.length
    for (const e of splitEntries(bytes)) {
      if (end.tx === 0n) merger.snapshotRow(e, end.op)
      else if (!merger.change(e, until)) return false
      if (merger.heldBytes > maxMergeBytes) throw new Error(`compaction gave up: merging ${old.id} needs more than ${maxMergeBytes} bytes (--memory-budget / 4)`)
      if (pace.due(e.length)) await pace.rest()
    }
    return true
  })
  if (merger.snapshotEnd === undefined) throw new Error(`log ${old.id} has no snapshot-end line`)

  const writer = store.createShape(newId, { meta: old.meta })
  let bytesAfter = 0
  try {
    // The snapshot chunks again: rows no change superseded stay at their 0_n.
    // A chunk left empty keeps its last row (superseded later in the log, so
    // harmless) rather than vanish, which would renumber the chunks after it.
    await eachChunk(old, until, check, async (bytes, end) => {
      if (end.tx !== 0n) return false
      const kept: Buffer[] = []
      let last: Buffer | undefined
      let holdsEnd = false
      for (const e of splitEntries(bytes)) {
        const { key, value } = rowOf(e)
        if (key === undefined) {
          holdsEnd = true
          continue
        }
        last = e
        if (merger.isUntouched(key)) kept.push(e)
        else if (merger.needsBase(key)) merger.base(key, value ?? {})
        if (pace.due(e.length)) await pace.rest()
      }
      for (const e of kept) bytesAfter += e.length + 1
      if (holdsEnd) {
        if (kept.length > 0) writer.append(kept)
        writer.endSnapshot(merger.snapshotEnd!)
        bytesAfter += merger.snapshotEnd!.length + 1
        return false
      }
      if (kept.length === 0 && last !== undefined) {
        kept.push(last)
        bytesAfter += last.length + 1
      }
      if (kept.length > 0) writer.append(kept, { closeChunk: true })
      return true
    })

    let group: LogEntryInput[] = []
    for (const entry of merger.merged()) {
      bytesAfter += entry.json.length + 1
      if (group.length > 0 && group[0]!.offset.tx !== entry.offset.tx) {
        writer.appendTransaction(group)
        group = []
      }
      group.push(entry)
      if (pace.due(entry.json.length)) await pace.rest()
    }
    if (group.length > 0) writer.appendTransaction(group)
    // One synchronous step: no part falls between the held ones and the later ones.
    check()
    tee.drainInto(writer)
    if (tee.failed !== undefined) throw tee.failed
    const log = await writer.finish()
    return { log, bytesBefore, bytesAfter, keys: merger.size, changes: merger.changes }
  } catch (error) {
    await writer.abort().catch(() => {})
    throw error
  }
}
