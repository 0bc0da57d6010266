import type { AppendOptions, ShapeLog } from '@sluice/storage'
import type { SpillQueue } from '../replication/index.js'
import type { SnapshotStitch } from './definition/index.js'
import { MORE_PARTS, type ShapeTarget, type TransactionPart } from './route-contracts.js'
import { type PgSnapshot, isVisibleInSnapshot } from './snapshot/index.js'

/*
 * The targets the shape manager gives the router besides a bare log: a queue
 * while a shape's snapshot runs, and the stitching filter in front of it that
 * drops what the snapshot already holds.
 */

/**
 * A restored shape's target. Its snapshot may hold transactions above the
 * durable watermark: the snapshot saw them committed before the router reached
 * them, the router dropped them for this shape (stitching), and the process
 * died before the watermark covered them. Postgres sends them again after the
 * restart, so until the stream passes the snapshot's insert LSN the shape keeps
 * dropping the ones its snapshot holds.
 */
export function restoredTarget(log: ShapeLog, stitch: SnapshotStitch | undefined, durableLsn: bigint): ShapeTarget {
  if (stitch === undefined || durableLsn >= stitch.insertLsn) return log
  const target = new StitchingTarget(log)
  target.setSnapshot(stitch.snapshot, stitch.insertLsn)
  target.goLive(log)
  return target
}

/**
 * A queue target that, like the storage engine, skips entries at or below the
 * last one it took: after a failed flush the replication stream replays from
 * the durable watermark and the same parts arrive again.
 */
export class QueueTarget implements ShapeTarget {
  /** The last entry taken: its transaction and op. */
  private lastTx = -1n
  private lastOp = -1
  constructor(
    private readonly queue: SpillQueue<TransactionPart>,
    private readonly onPush: () => void,
  ) {}

  appendLines(lsn: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options: AppendOptions | undefined, xid: number): void {
    // Ops increase within a part, so what was taken already is a prefix.
    let from = 0
    if (lsn < this.lastTx) from = count
    else if (lsn === this.lastTx) while (from < count && ops[from]! <= this.lastOp) from++
    if (from === count && count > 0) return
    if (from < count) {
      this.lastTx = lsn
      this.lastOp = ops[count - 1]!
    }
    // The arrays are the router's to reuse once this returns (see ShapeTarget): keep copies.
    const kept = new Array<Uint8Array>(count - from)
    for (let i = from; i < count; i++) kept[i - from] = Buffer.from(jsons[i]!)
    this.queue.push({ lsn, xid, ops: ops.slice(from, count), jsons: kept, count: count - from, more: options?.more === true })
    this.onPush()
  }
}

/**
 * Drops the transactions a snapshot already contains (docs/protocol.md §9
 * stitching). Until the snapshot is known everything passes to the inner
 * target (the queue). Afterwards a part is dropped when its transaction is
 * visible in the snapshot; a commit at or above the snapshot's WAL insert
 * position cannot be, so only commits below it are looked up. The check is
 * not switched off once the stream has passed that position: after a failed
 * flush the stream is replayed from the durable watermark, and a transaction
 * below it arrives again.
 */
export class StitchingTarget implements ShapeTarget {
  private snapshot: PgSnapshot | undefined
  private insertLsn = 0n
  /** Parts go through the filter only once the queue is drained; before that they queue unfiltered, in order. */
  private live = false

  constructor(private inner: ShapeTarget) {}

  setSnapshot(snapshot: PgSnapshot, insertLsn: bigint): void {
    this.snapshot = snapshot
    this.insertLsn = insertLsn
  }

  /** From now on parts go, filtered, straight to `target`. */
  goLive(target: ShapeTarget): void {
    this.inner = target
    this.live = true
  }

  appendLines(lsn: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options: AppendOptions | undefined, xid: number): void {
    if (this.live && this.inSnapshot(lsn, xid)) return
    this.inner.appendLines(lsn, ops, jsons, count, options, xid)
  }

  /** Sends a queued part to `target` unless the snapshot holds its transaction. */
  deliver(target: ShapeTarget, part: TransactionPart): void {
    if (this.inSnapshot(part.lsn, part.xid)) return
    target.appendLines(part.lsn, part.ops, part.jsons, part.count, part.more ? MORE_PARTS : undefined, part.xid)
  }

  private inSnapshot(lsn: bigint, xid: number): boolean {
    return this.snapshot !== undefined && lsn < this.insertLsn && isVisibleInSnapshot(this.snapshot, xid)
  }
}
