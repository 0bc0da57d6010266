import type { AppendOptions } from '@sluice/storage'
import { MORE_PARTS, type ShapeTarget, type TransactionPart } from '../route-contracts.js'

/** Where the tee's second copy goes: a compacted log being built (its writer), or built. */
export interface SecondTarget {
  appendLines(tx: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options?: AppendOptions): number
}

/**
 * A shape's router target while its log is compacted: every part goes to the
 * log the shape reads (`first`, whose failures reach the router as before),
 * and a copy to the compacted log. While the compacted log is still being
 * written from the old one's prefix the copies wait in memory (`pending`, in
 * order); `drainInto` hands them over in one synchronous step, and the
 * compacted log's skip of offsets it already holds drops the ones the prefix
 * covered. A failure of the second copy never reaches the router: it fails the
 * compaction (`failed`), and the old log stays the shape's.
 */
/**
 * Copies held while the compacted log is written, at most: past this the
 * compaction gives up (the old log stays the shape's, and the next check tries
 * again), so a compaction that cannot keep up with a burst of writes costs a
 * bounded amount of memory instead of growing with the burst.
 */
export const MAX_PENDING_BYTES = 64 * 1024 * 1024

export class TeeTarget implements ShapeTarget {
  pending: TransactionPart[] | undefined = []
  /** Bytes of the copies held while the compacted log was being written (its memory). */
  pendingBytes = 0
  failed: unknown = undefined
  private second: SecondTarget | undefined

  /**
   * `heldThrough`: the LSN of the last transaction the log already holds when
   * the tee starts. A part at or below it is a replay after a restart (the
   * log skips it, and so would the compacted log, whose prefix holds it): it
   * is not kept, so a restart's catch-up does not fill the held copies.
   */
  constructor(
    public first: ShapeTarget,
    private readonly heldThrough = 0n,
    private readonly maxPendingBytes = MAX_PENDING_BYTES,
  ) {}

  appendLines(lsn: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options: AppendOptions | undefined, xid: number): void {
    this.first.appendLines(lsn, ops, jsons, count, options, xid)
    if (this.failed !== undefined) return
    if (this.pending !== undefined) {
      if (lsn <= this.heldThrough) return
      // The router reuses its arrays once this returns: keep copies.
      const kept = new Array<Uint8Array>(count)
      for (let i = 0; i < count; i++) {
        kept[i] = Buffer.from(jsons[i]!)
        this.pendingBytes += jsons[i]!.length
      }
      this.pending.push({ lsn, xid, ops: ops.slice(0, count), jsons: kept, count, more: options?.more === true })
      if (this.pendingBytes > this.maxPendingBytes) {
        this.failed = new Error(`compaction gave up: more than ${this.maxPendingBytes} bytes of changes arrived while the compacted log was written`)
        this.pending = []
      }
      return
    }
    try {
      this.second!.appendLines(lsn, ops, jsons, count, options)
    } catch (error) {
      this.failed = error
    }
  }

  /** Sends the pending copies, then every later part, to `second`. */
  drainInto(second: SecondTarget): void {
    const pending = this.pending ?? []
    this.pending = undefined
    this.second = second
    if (this.failed !== undefined) return
    try {
      for (const p of pending) second.appendLines(p.lsn, p.ops, p.jsons, p.count, p.more ? MORE_PARTS : undefined)
    } catch (error) {
      this.failed = error
    }
  }

  /** The compacted log is the shape's now: it takes the parts first, the old log a copy while readers may hold it. */
  swap(first: ShapeTarget, second: SecondTarget): void {
    this.first = first
    this.second = second
    this.failed = undefined
  }
}
