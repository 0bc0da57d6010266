/**
 * The fourth layer of a `FileShapeLog` (see file-log.ts): write-back, which
 * takes what a write-behind log holds in memory (log-tail.ts) into its files
 * through the store's writer (write-back.ts), when a log gathers
 * WRITE_BACK_BYTES, and for a checkpoint.
 *
 * One write-back runs at a time per log; meanwhile appends go on into memory.
 * A cut during the write wins: the write counts for nothing and the files are
 * cut to what is known good. A failed write loses nothing: the bytes stay in
 * memory and in the journal for the next try.
 */
import { StorageError, fromSystemError } from '../errors.js'
import { ENTRY_RECORD_BYTES, HEADER_BYTES } from '../format.js'
import { LogCut } from './log-cut.js'
import { NO_BYTES } from './log-tail.js'
import { NO_BLOCK } from './tail-arena.js'
import type { FileWrite, FileWriter } from './write-back.js'

/**
 * A log holding this much not yet in its files starts writing it back. Small
 * enough that a busy log's tail block stays small (at most twice this; the log
 * keeps its block while appends go on, so fewer fresh arena pages are
 * touched); large enough that a write-back is one write of many entries.
 */
export const WRITE_BACK_BYTES = 64 * 1024

/**
 * A log holding more than this not yet in its files is reported to its host
 * (`noteBacklog`), whose writer then waits for it to be written back before
 * appending more (FileLogStore.backlog). One transaction of millions
 * of rows into one shape otherwise appends faster than its write-backs land:
 * its tail doubled into ever larger blocks of its own (tens of MiB each, with
 * the smaller ones left on the arena's free lists), which also counted
 * against the tail budget and brought early checkpoints and pauses.
 */
export const BACKLOG_BYTES = 4 * 1024 * 1024

interface WriteBackPlan {
  /** The log's cut epoch when planned: a cut since makes the write void. */
  readonly epoch: number
  readonly dataFrom: number
  readonly data: Buffer
  readonly recordsFrom: number
  /** File position of the first record. */
  readonly recordsAt: number
  readonly recordCount: number
  readonly records: Buffer
}

export abstract class LogWriteBack extends LogCut {
  /** Writes what this log holds in memory into its files (the tail's bytes and the journaled records that describe them). */
  async writeBack(): Promise<void> {
    while (this.flight) await this.flight.catch(() => undefined)
    const plan = this.planWriteBack()
    if (plan === undefined) return
    const flight = this.host.writer.writeAll(this.writesOf(plan))
    this.flight = flight
    try {
      await flight
    } catch (err) {
      throw this.writeBackFailed(plan, err)
    } finally {
      this.endFlight()
    }
    this.landWriteBack(plan)
    // What came meanwhile may be a write-back's worth already: the next append is not to be waited for.
    this.startWriteBackIfDue()
  }

  /**
   * A checkpoint's `writeBackAll` for many logs, as one job list for the
   * writer (`writeJobs`): no promise or suspended async call per log. A
   * checkpoint of many logs writes back nearly all of them, and under load
   * each write-back can stay in flight for a second or more, so what each one
   * kept (its promise and the async state of four nested calls) would outlive
   * young-generation collections and be promoted. A log with a write-back of
   * its own in flight, or whose write a cut made void, takes the one-by-one
   * path after the batch. Rejects with the first failure of a log that still
   * exists, once every log is settled.
   */
  static async writeBackMany(logs: readonly LogWriteBack[], writer: FileWriter): Promise<void> {
    const planned: LogWriteBack[] = []
    const plans: WriteBackPlan[] = []
    const jobs: FileWrite[][] = []
    const later: LogWriteBack[] = []
    let landed!: () => void
    // What another write-back of these logs waits on meanwhile (`writeBack`).
    const flight = new Promise<void>((resolve) => (landed = resolve))
    let first: Error | undefined
    const fail = (log: LogWriteBack, err: unknown): void => {
      if (!log.deleted) first ??= err instanceof StorageError ? err : fromSystemError(err, `write back shape ${log.id}`)
    }
    let i = 0
    try {
      for (const log of logs) {
        if (log.flight) {
          later.push(log)
          continue
        }
        const plan = log.planWriteBack()
        if (plan === undefined) continue
        log.flight = flight
        planned.push(log)
        plans.push(plan)
        jobs.push(log.writesOf(plan))
      }
      let failures: readonly (Error | undefined)[]
      try {
        failures = await writer.writeJobs(jobs)
      } catch (err) {
        failures = jobs.map(() => err as Error)
      }
      for (; i < planned.length; i++) {
        const log = planned[i]!
        const plan = plans[i]!
        log.endFlight()
        const err = failures[i]
        if (err !== undefined) {
          fail(log, log.writeBackFailed(plan, err))
          continue
        }
        try {
          if (plan.epoch !== log.epoch) later.push(log)
          log.landWriteBack(plan)
          // Its index write may fail (a full disk): that log's failure, not the run's end.
          log.startWriteBackIfDue()
        } catch (err) {
          fail(log, err)
        }
      }
    } finally {
      // Whatever threw, no log keeps the run's flight: theirs would never end.
      for (; i < planned.length; i++) planned[i]!.endFlight()
      landed()
    }
    await Promise.all(
      later.map(async (log) => {
        try {
          await log.writeBackAll()
        } catch (err) {
          fail(log, err)
        }
      }),
    )
    if (first !== undefined) throw first
  }

  /** Both files in one job (the journal, not their order, is what recovery trusts). */
  private writesOf(plan: WriteBackPlan): FileWrite[] {
    const writes: FileWrite[] = []
    if (plan.data.length > 0) writes.push({ ref: this.data, bytes: plan.data, position: plan.dataFrom })
    if (plan.records.length > 0) writes.push({ ref: this.entries, bytes: plan.records, position: plan.recordsAt })
    return writes
  }

  /** The error of a failed write-back, after cutting the files if a cut came during it. */
  private writeBackFailed(plan: WriteBackPlan, err: unknown): StorageError {
    if (plan.epoch !== this.epoch) this.cutFiles()
    return fromSystemError(err, `write back shape ${this.id}`)
  }

  /** What a write-back writes: the tail's bytes and the journaled records not yet in the files. */
  private planWriteBack(): WriteBackPlan | undefined {
    if (this.deleted || !this.behind) return undefined
    if (this.pendingCut) this.cutTo(this.pendingCut)
    const recordsFrom = this.recordsOnDisk
    const recordCount = this.recordsJournaled - this.recordsOnDisk
    const records = Buffer.allocUnsafe(recordCount * ENTRY_RECORD_BYTES)
    this.staged.copyOut(0, recordCount, records, 0)
    return {
      epoch: this.epoch,
      dataFrom: this.dataOnDisk,
      data: this.pend === NO_BLOCK ? NO_BYTES : this.pendBuf.subarray(this.pendBase, this.pendBase + this.pendLen),
      recordsFrom,
      recordsAt: HEADER_BYTES + recordsFrom * ENTRY_RECORD_BYTES,
      recordCount,
      records,
    }
  }

  /** The plan's bytes are in the files: drop them from memory. */
  private landWriteBack(plan: WriteBackPlan): void {
    if (this.deleted) return
    if (plan.epoch !== this.epoch) {
      // A cut came during the write: the write counts for nothing, the files are cut to what is known good.
      this.cutFiles()
      return
    }
    this.dataOnDisk = plan.dataFrom + plan.data.length
    const rest = this.pendLen - plan.data.length
    // What came meanwhile moves to the front (readers copy what they take from
    // the tail); an idle log gives its block back.
    if (rest > 0) this.pendBuf.copyWithin(this.pendBase, this.pendBase + plan.data.length, this.pendBase + this.pendLen)
    else this.dropPend()
    this.pendLen = rest
    this.recordsOnDisk = plan.recordsFrom + plan.recordCount
    this.staged.dropFront(plan.recordCount)
  }

  /** More than BACKLOG_BYTES of this log are not in its files yet. */
  get backlogged(): boolean {
    return this.pendLen > BACKLOG_BYTES && !this.deleted
  }

  /**
   * Waits for the write-back in flight to land (the one after it starts as it
   * lands, so the thread writes while the writer appends again), or starts
   * one; false when that write-back failed (its bytes stay in memory and the
   * journal, and the failure is reported as any write-back's is).
   */
  async catchUpWriteBack(): Promise<boolean> {
    if (this.deleted) return true
    const flight = this.flight
    if (flight !== undefined) return flight.then(
      () => true,
      () => false,
    )
    try {
      this.writeIndex()
      await this.writeBack()
      return true
    } catch (err) {
      this.host.writeBackFailed(this, fromSystemError(err, `write back shape ${this.id}`))
      return false
    }
  }

  /** Starts a background write-back once the tail holds WRITE_BACK_BYTES and none is in flight. */
  protected startWriteBackIfDue(): void {
    if (this.pendLen > BACKLOG_BYTES && this.journal && !this.deleted) this.host.noteBacklog(this)
    if (this.pendLen < WRITE_BACK_BYTES || this.flight || this.deleted || !this.journal) return
    // Journaled first: a write-back writes only records the journal holds.
    this.writeIndex()
    this.writeBack().catch((err: unknown) => this.host.writeBackFailed(this, fromSystemError(err, `write back shape ${this.id}`)))
  }

  /** Write-back until what the journal held at the call is in the files (a checkpoint needs that). */
  async writeBackAll(): Promise<void> {
    const data = this.dataOnDisk + this.pendLen
    const records = this.recordsJournaled
    for (let tries = 0; !this.deleted && (this.dataOnDisk < Math.min(data, this.appendedDataEnd) || this.recordsOnDisk < Math.min(records, this.recordsJournaled)); tries++) {
      if (tries === 8) throw new StorageError('io_error', `shape ${this.id}: write-back kept racing cuts`)
      await this.writeBack()
    }
  }
}
