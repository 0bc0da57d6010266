/**
 * The lists a flush works through, the base of `GroupCommit`
 * (group-commit.ts): the logs appended to since the last flush (dirty), the
 * registered logs with a transaction end waiting to be published, the logs
 * whose last append failed (faults), and the logs whose files the journal does
 * not cover. A base class rather than an object of its own: the append path
 * adds to these lists on every append, straight through the group commit.
 *
 * Lists, not Sets. A Set emptied and refilled every flush grows new hash
 * tables as it refills; they outlive a scavenge (a flush awaits its
 * fdatasync), so they are promoted and left for a full collection of the
 * whole heap to find dead. Each list is a reused array with a mark on each
 * member (`dirtyMark`, `unpublishedSlot`), so it holds each log once.
 */
import type { FileShapeLog } from './file-log.js'

export abstract class FlushLists {
  /** Two dirty lists take turns, so appends during a flush never touch the list it works through. */
  protected dirty: Array<FileShapeLog | undefined> = []
  protected dirtySpare: Array<FileShapeLog | undefined> = []
  protected dirtyCount = 0
  /**
   * Registered logs with a transaction end waiting to be published
   * (`FileShapeLog.unpublishedSlot` is its index; holes where one was taken
   * out). Its length only grows (`unpublishedCount` are in use): cutting
   * `length` after each publish would trim the array's store, and the appends
   * before the next flush would grow it again, a new young copy at every step.
   */
  private readonly unpublished: Array<FileShapeLog | undefined> = []
  private unpublishedCount = 0
  /** Per log, the lowest transaction whose append failed: the watermark stays below it. */
  protected readonly faults = new Map<FileShapeLog, bigint>()
  /** Logs whose files the journal does not fully cover: the next flush syncs them as a whole. */
  protected readonly syncNext = new Set<FileShapeLog>()

  listDirty(log: FileShapeLog): void {
    if (log.dirtyMark) return
    log.dirtyMark = true
    this.dirty[this.dirtyCount++] = log
  }

  listUnpublished(log: FileShapeLog): void {
    if (log.unpublishedSlot >= 0) return
    const slot = this.unpublishedCount++
    log.unpublishedSlot = slot
    if (slot < this.unpublished.length) this.unpublished[slot] = log
    else this.unpublished.push(log)
  }

  protected dropUnpublished(log: FileShapeLog): void {
    const slot = log.unpublishedSlot
    if (slot < 0) return
    this.unpublished[slot] = undefined
    log.unpublishedSlot = -1
  }

  /**
   * Publishes every listed log: first what earlier flushes made durable
   * without visiting it (`lastLsn`, `lastSeq`: not this flush's news), then
   * this flush's `lsn` and `seq`, adding the ids of logs that moved (other
   * than the `created` ones, listed already) to `advanced`. Logs with ends
   * left to publish stay listed, packed to the front.
   */
  protected publishListed(lastLsn: bigint, lastSeq: number, lsn: bigint, seq: number, created: readonly { readonly log: FileShapeLog }[], advanced: string[]): void {
    const waiting = this.unpublished
    const count = this.unpublishedCount
    let kept = 0
    for (let i = 0; i < count; i++) {
      const log = waiting[i]
      if (log === undefined) continue
      log.publish(lastLsn, lastSeq)
      if (log.publish(lsn, seq) && !isCreated(created, log)) advanced.push(log.id)
      if (log.hasUnpublished()) {
        waiting[kept] = log
        log.unpublishedSlot = kept++
      } else {
        log.unpublishedSlot = -1
      }
    }
    for (let i = kept; i < count; i++) waiting[i] = undefined
    this.unpublishedCount = kept
  }

  /** Takes a log out of the flush bookkeeping (deleted, or a snapshot dropped). */
  forget(log: FileShapeLog): void {
    log.registered = false
    // Its entry in the dirty list stays behind and is skipped (registered is false).
    log.dirtyMark = false
    this.dropUnpublished(log)
    this.faults.delete(log)
  }

  /** An append of transaction `tx` failed: the watermark must stay below it. */
  noteFault(log: FileShapeLog, tx: bigint): void {
    const prev = this.faults.get(log)
    if (prev === undefined || tx < prev) this.faults.set(log, tx)
  }

  /** An append at or above the faulted transaction succeeded. */
  clearFault(log: FileShapeLog, tx: bigint): void {
    const prev = this.faults.get(log)
    if (prev !== undefined && tx >= prev) this.faults.delete(log)
  }

  hasFault(log: FileShapeLog): boolean {
    return this.faults.has(log)
  }

  /** The journal does not cover the log's files: the next flush syncs them as a whole. */
  syncWhole(log: FileShapeLog): void {
    this.syncNext.add(log)
  }
}

/**
 * Whether `log` is one of the logs this flush created (they are in `advanced`
 * already). A plain loop: a closure passed to `some` would capture `log` and
 * allocate a context for every log of every flush.
 */
function isCreated(created: readonly { readonly log: FileShapeLog }[], log: FileShapeLog): boolean {
  for (let i = 0; i < created.length; i++) if (created[i]!.log === log) return true
  return false
}
