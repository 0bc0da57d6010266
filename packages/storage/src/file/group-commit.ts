// Kept in one file past 500 lines: the flush pass below is one sequence whose
// steps share its in-flight state (target watermark, append sequence, the logs it
// covers); the pieces that stand alone are journal.ts, write-back.ts,
// snapshot-finisher.ts, flush-lists.ts and watermark.ts.
/**
 * Group commit: what the file store does between appends and the durable
 * watermark. With the journal, an append records its bytes and entry records
 * in the journal's group being built and keeps them in memory (the log's
 * tail); without it, appends write to the page cache and mark their log
 * dirty. A flush, driven by an interval and by a dirty-byte threshold (or
 * called directly), runs one pass:
 *
 *   1. note the target watermark (the caller's `advance`, capped below any
 *      transaction whose append failed) and the append sequence number;
 *   2. write the chunk records of logs that closed a chunk (and, without the
 *      journal, every dirty log's staged entry records) and commit the journal
 *      with the target watermark in the same group (`journal.ts`: one write
 *      and one fdatasync for all of them and the watermark; with `journal:
 *      false`, fdatasync every dirty log's files in one concurrent pass
 *      instead), and finish pending snapshots (snapshot-finisher.ts);
 *   3. with the journal, overwrite `watermark.live` for followers (the
 *      watermark file itself moves at checkpoints); without it, publish the
 *      watermark file atomically;
 *   4. move each log's published head to its last transaction covered by the
 *      watermark and appended before step 1, and tell listeners. Lazily
 *      unless a listener or the caller of `flush()` asks which logs moved:
 *      the flush then only records its watermark and sequence number, and
 *      each log catches up when it is next read or appended to.
 *
 * A failed sync loses nothing acknowledged: the watermark stays, the failed
 * logs drop their unpublished entries (the kernel may have dropped those pages,
 * so their bytes can no longer be trusted), `advance` falls back to the
 * watermark, and the caller replays from there; replays are idempotent.
 *
 * This object is also every log's `LogHost`: the append path calls it
 * directly (`nextSeq`, `markDirty`, `markUnpublished`, the fault marks).
 */
import type { FlushListenerOptions, FlushResult } from '../contract.js'
import { FlushError, StorageError, fromSystemError } from '../errors.js'
import type { FsPort } from '../fs-port.js'
import { forEachConcurrently } from '../concurrently.js'
import type { FdCache } from './fd-cache.js'
import type { FileShapeLog } from './file-log.js'
import type { Journal } from './journal.js'
import { JournalCommitError } from './journal.js'
import type { BackloggedLog, LogHost } from './log-host.js'
import { syncConcurrency, syncFiles, syncLog } from './log-sync.js'
import { FlushLists } from './flush-lists.js'
import type { FinisherHost, FinishingSnapshot } from './snapshot-finisher.js'
import { SnapshotFinisher } from './snapshot-finisher.js'
import type { TailArena } from './tail-arena.js'
import { LiveWatermark, publishWatermark } from './watermark.js'
import type { FileWriter } from './write-back.js'

// Longest wait between retries of a failing timed flush.
const MAX_RETRY_MS = 250

/** The store-wide pieces a group commit works with (the store makes them at open). */
export interface CommitEnv {
  readonly fs: FsPort
  readonly root: string
  readonly fds: FdCache
  readonly arena: TailArena
  readonly chunkBytes: number
  readonly journal: Journal<FileShapeLog> | undefined
  readonly writer: FileWriter
  readonly flushIntervalMs: number
  readonly flushBytes: number
  readonly flushWhenIdle: boolean
}

/** What a flush needs from the rest of the store. */
export interface CommitHost {
  emitError(err: StorageError): void
  /** After each journal commit, failed or not: checkpoints and the tail budget (checkpointer.ts). */
  maintainJournal(): void
  /** A new log this flush registered may now be served by `get`. */
  reveal(log: FileShapeLog): void
  /** What new logs wait for before they are renamed into shapes/ (FinisherHost.beforePlace). */
  beforePlace(): Promise<void> | undefined
}

export class GroupCommit extends FlushLists implements LogHost, FinisherHost {
  readonly fs: FsPort
  readonly root: string
  readonly fds: FdCache
  readonly arena: TailArena
  readonly chunkBytes: number
  readonly journal: Journal<FileShapeLog> | undefined
  readonly writer: FileWriter
  readonly journaled: boolean
  readonly snapshots: SnapshotFinisher
  private readonly flushIntervalMs: number
  private readonly flushBytes: number
  private readonly flushWhenIdle: boolean
  private dirtyBytes = 0
  private seq = 0
  private advanced: bigint
  private durable: bigint
  private sequence: bigint
  private timer: NodeJS.Timeout | undefined
  /**
   * `timedFlush`, bound once: an arrow written inside `schedule` would make
   * every call of it (one per routed transaction, through `advance`) allocate
   * a context for `this`, used or not.
   */
  private readonly onTimer = (): void => this.timedFlush()
  private readonly onImmediate = (): void => {
    this.immediate = undefined
    this.idleRun = true
    this.timedFlush()
  }
  /** The flush starting now is an idle store's (`flushNow`): its journal commit may sync inline (Journal.commit). */
  private idleRun = false
  private flushing: Promise<FlushResult> | undefined
  /** A flush queued for this turn of the event loop: an idle store's (see `schedule`). */
  private immediate: NodeJS.Immediate | undefined
  /** When `advance` last moved the target (performance.now()): a store not advanced for an interval is idle. */
  private lastAdvance = Number.NEGATIVE_INFINITY
  /** An idle change arrived while a flush ran: the next flush starts as that one ends. */
  private flushFollows = false
  private readonly listeners = new Set<(r: FlushResult) => void>()
  /** Logs that reported a write-back backlog at an append (`noteBacklog`), until it is gone. */
  private readonly backlogged = new Set<BackloggedLog>()
  /** Listeners that read `FlushResult.advanced`: while there are none, timed flushes publish lazily (see `publish`). */
  private advancedListeners = 0
  /**
   * The last successful flush's watermark and append sequence number: a log
   * publishes every transaction end appended no later than the latter at or
   * below the former (FileShapeLog.catchUp), whether or not a flush has
   * visited it since.
   */
  private lastPublishedLsn: bigint
  private lastPublishedSeq = 0
  /** Timed flushes failed in a row; spaces out the retries. */
  private failedFlushes = 0
  /** No more timed flushes: the store is closing. */
  private stopped = false
  /** Followers' notice of the watermark (journal mode only). */
  readonly live: LiveWatermark | undefined
  /**
   * A journal group may hold a watermark this store did not keep (its commit
   * or a sync beside it failed): the next group must publish the real one,
   * since replay takes the last (journal-format.ts).
   */
  private republish = false
  /** The last flush error, cleared by the next successful flush. */
  lastError: StorageError | undefined

  constructor(
    env: CommitEnv,
    watermark: { lsn: bigint; sequence: bigint },
    private readonly host: CommitHost,
  ) {
    super()
    this.fs = env.fs
    this.root = env.root
    this.fds = env.fds
    this.arena = env.arena
    this.chunkBytes = env.chunkBytes
    this.journal = env.journal
    this.writer = env.writer
    this.journaled = env.journal !== undefined
    this.flushIntervalMs = env.flushIntervalMs
    this.flushBytes = env.flushBytes
    this.flushWhenIdle = env.flushWhenIdle
    this.live = env.journal ? new LiveWatermark(env.fs, env.root, (err) => host.emitError(err)) : undefined
    this.snapshots = new SnapshotFinisher(this)
    this.durable = watermark.lsn
    this.lastPublishedLsn = watermark.lsn
    this.advanced = watermark.lsn
    this.sequence = watermark.sequence
  }

  get durableLsn(): bigint {
    return this.durable
  }

  /**
   * Starts from the watermark the journal's replay found, for a store built
   * before it held the lock (`FileLogStore.prepare`) with the one it could
   * read then. Nothing was appended or flushed before.
   */
  resume(watermark: { lsn: bigint; sequence: bigint }): void {
    this.durable = watermark.lsn
    this.lastPublishedLsn = watermark.lsn
    this.advanced = watermark.lsn
    this.sequence = watermark.sequence
  }

  get appendSeq(): number {
    return this.seq
  }

  advance(lsn: bigint): void {
    if (lsn <= this.advanced) return
    this.advanced = lsn
    if (!this.flushWhenIdle) return this.schedule(false)
    const now = performance.now()
    const idle = now - this.lastAdvance >= this.flushIntervalMs
    this.lastAdvance = now
    // Idle: nothing would share the wait for the interval, so the change is
    // made durable (and sent) at once, after the rest of this turn's appends.
    // Under load advances come closer together than the interval: changes
    // wait for the interval and share one fdatasync. An idle change that finds
    // a flush running (a slow fdatasync, a snapshot's flush) has nothing to
    // share the interval with either: the next flush follows that one at once.
    // (An interval timer the appends set is replaced; a failing store's backoff is not.)
    if (idle && !this.immediate && !this.stopped && this.failedFlushes === 0) {
      if (this.flushing) {
        this.schedule(false)
        this.flushFollows = true
      } else this.flushNow()
    } else this.schedule(false)
  }

  /** The next flush in this turn of the event loop, in place of a waiting interval timer. */
  private flushNow(): void {
    const keepAlive = this.timer?.hasRef() ?? false
    if (this.timer) clearTimeout(this.timer)
    this.timer = undefined
    this.immediate = setImmediate(this.onImmediate)
    if (!keepAlive) this.immediate.unref()
  }

  onFlush(listener: (result: FlushResult) => void, options?: FlushListenerOptions): () => void {
    // Wrapped, so the same function added twice is two listeners to count and remove.
    const entry = (result: FlushResult): void => listener(result)
    const counts = options?.advanced !== false
    this.listeners.add(entry)
    if (counts) this.advancedListeners++
    let on = true
    return () => {
      if (!on) return
      on = false
      this.listeners.delete(entry)
      if (counts) this.advancedListeners--
    }
  }

  /** Queues a finished snapshot for the next flush, which runs at once. */
  finishSnapshot(s: FinishingSnapshot): void {
    this.snapshots.add(s)
    this.schedule(true)
  }

  /**
   * `named`: the caller reads the result's `advanced` (a `flush()` call): the
   * flush finds the logs that moved even without listeners for them. `timed`:
   * the store's own flush (interval, threshold, idle), whose followers' notice
   * is synced at the next turn (LiveWatermark.write); a caller's flush has
   * that sync under way when it resolves, as before.
   */
  async flush(named = false, timed = false): Promise<FlushResult> {
    // A flush already running may have started before the caller's appends:
    // wait for it, then run one of our own.
    while (this.flushing) await this.flushing.catch(() => undefined)
    const run = this.runFlush(named)
    this.flushing = run
    let succeeded = false
    try {
      const result = await run
      succeeded = true
      if (!timed) this.live?.syncNow()
      return result
    } finally {
      this.flushing = undefined
      if (this.flushFollows) {
        this.flushFollows = false
        // A failed flush leaves the retry to timedFlush's backoff.
        if (succeeded && !this.immediate && !this.stopped && this.failedFlushes === 0 && this.cappedTarget() > this.durable) this.flushNow()
      }
    }
  }

  /**
   * Before the caller delivers again everything above the durable watermark
   * (after a failed flush): every log in `logs` is cut back to what was
   * published, so the replay appends onto published state. A failed flush
   * rolls back only the logs of its group; entries appended after it (a
   * transaction whose routing was under way) would otherwise stay, and the
   * replay, which skips what a log already holds, would not write the earlier
   * part of that transaction again. Waits for a flush under way first (one that
   * started before the failure might be publishing). Returns how many logs
   * were cut.
   */
  async rollbackToDurable(logs: Iterable<FileShapeLog>): Promise<number> {
    while (this.flushing) await this.flushing.catch(() => undefined)
    let cut = 0
    for (const log of logs) {
      if (!log.registered || log.deleted || !log.rollbackIfAhead()) continue
      this.faults.delete(log)
      this.dropUnpublished(log)
      cut++
    }
    this.advanced = this.durable
    return cut
  }

  /** Ends timed flushes (the store is closing; its last flush has run). */
  stop(): void {
    this.stopped = true
    if (this.timer) clearTimeout(this.timer)
    if (this.immediate) clearImmediate(this.immediate)
  }

  private async runFlush(named: boolean): Promise<FlushResult> {
    const started = performance.now()
    const idle = this.idleRun
    this.idleRun = false
    if (this.timer) {
      clearTimeout(this.timer)
      this.timer = undefined
    }
    if (this.immediate) {
      clearImmediate(this.immediate)
      this.immediate = undefined
    }
    const target = this.cappedTarget()
    const seq = this.seq
    const dirty = this.dirty
    const dirtyCount = this.dirtyCount
    this.dirty = this.dirtySpare
    this.dirtySpare = dirty
    this.dirtyCount = 0
    const journal = this.journal
    const failed: FileShapeLog[] = []
    let firstError: StorageError | undefined
    // Logs forgotten since they were listed are not in it any more. With the
    // journal each log's index records go in as it is taken off the list: one
    // visit per dirty log, not a second pass (with many logs, by the time a
    // second pass came back to a log it would have left the cache).
    const logs: FileShapeLog[] = []
    for (let i = 0; i < dirtyCount; i++) {
      const log = dirty[i]!
      dirty[i] = undefined
      if (!log.registered) continue
      log.dirtyMark = false
      if (journal === undefined) logs.push(log)
      else if (!log.deleted) {
        try {
          log.writeIndex()
        } catch (err) {
          failed.push(log)
          firstError ??= fromSystemError(err, `write the index of shape ${log.id}`)
        }
      }
    }
    this.dirtyBytes = 0
    const snapshots = this.snapshots.take()

    let journalFailed = false
    if (journal) {
      const whole = [...this.syncNext]
      this.syncNext.clear()
      try {
        // Logs the journal does not cover are synced first: the group below
        // publishes a watermark that covers them too.
        if (whole.length > 0) await forEachConcurrently(whole, syncConcurrency(this.fds), (log) => syncFiles(this.fs, this.fds, log))
        // A failed group may still reach the disk with its watermark: the next group says the real one again,
        // even when it publishes nothing new itself (a log failed in it too), or replay would end at the failed one.
        const advances = failed.length === 0 && target > this.durable
        const publishes = advances || this.republish
        await journal.commit(publishes ? { lsn: advances ? target : this.durable, sequence: this.sequence + 1n } : undefined, idle && whole.length === 0)
        if (publishes) this.republish = false
      } catch (err) {
        journalFailed = true
        this.republish = true
        const owners = err instanceof JournalCommitError ? (err.owners as readonly FileShapeLog[]) : whole
        for (const log of owners) if (!log.deleted && !failed.includes(log)) failed.push(log)
        for (const log of whole) if (!log.deleted && !failed.includes(log)) failed.push(log)
        firstError ??= fromSystemError(err instanceof JournalCommitError ? err.cause : err, 'commit the journal')
      }
      // After a failed commit too: a writer held back appends nothing, so no later commit would come to do it.
      this.host.maintainJournal()
    } else {
      await forEachConcurrently(logs, syncConcurrency(this.fds), async (log) => {
        try {
          await syncLog(this.fs, this.fds, log)
        } catch (err) {
          // A log deleted while this flush ran has nothing left to make durable.
          if (log.deleted) return
          failed.push(log)
          firstError ??= fromSystemError(err, `sync shape ${log.id}`)
        }
      })
    }
    // After a failed journal commit a tombstone may not be durable: a log
    // re-created under its id must not go live yet. After a failed log the
    // group published no watermark: a snapshot finished now would take
    // `target` as its floor, above what the rollback keeps.
    const { created, waiting } = journalFailed || failed.length > 0 ? { created: [], waiting: snapshots } : await this.snapshots.finish(snapshots, target)
    if (waiting.length > 0) {
      // Kept ahead of snapshots finished meanwhile; the timer keeps a process
      // whose only work is awaiting `finish` alive.
      this.snapshots.putBack(waiting)
      this.schedule(false, true)
    }
    try {
      return await this.publish(target, seq, failed, journalFailed, firstError, created, started, named)
    } finally {
      // Resolved last, so whoever awaited a snapshot also sees everything this
      // flush published (the snapshot itself is durable whatever happened since).
      for (const c of created) {
        this.host.reveal(c.log)
        if (c.aborted) c.abandon(new StorageError('shape_deleted', `snapshot of shape ${c.log.id} was aborted`))
        else c.resolve(c.log)
      }
    }
  }

  private async publish(
    target: bigint,
    seq: number,
    failed: FileShapeLog[],
    journalFailed: boolean,
    firstError: StorageError | undefined,
    created: FinishingSnapshot[],
    started: number,
    named: boolean,
  ): Promise<FlushResult> {
    // A failed group with no log in it still failed to publish its watermark.
    if (failed.length > 0 || journalFailed) {
      for (const log of failed) {
        log.rollbackToPublished()
        this.faults.delete(log)
        this.dropUnpublished(log)
      }
      this.advanced = this.durable
      const err = new FlushError(firstError!, this.durable, failed.map((l) => l.id))
      this.lastError = err
      throw err
    }

    if (target > this.durable) {
      // With the journal, the group just committed published it.
      if (!this.journal) {
        try {
          await publishWatermark(this.fs, this.root, { lsn: target, sequence: this.sequence + 1n })
        } catch (err) {
          const e = new FlushError(fromSystemError(err, 'publish the watermark'), this.durable, [])
          this.lastError = e
          throw e
        }
      }
      this.sequence++
      this.durable = target
      this.live?.write({ lsn: target, sequence: this.sequence })
    }

    const lastLsn = this.lastPublishedLsn
    const lastSeq = this.lastPublishedSeq
    this.lastPublishedLsn = this.durable
    this.lastPublishedSeq = seq
    const advanced: string[] = []
    for (const c of created) {
      // Their later appends count from their own sync, which came after `seq`.
      if (!c.log.deleted) c.log.publish(this.durable, c.syncSeq)
      // Listeners may look the new log up.
      this.host.reveal(c.log)
      advanced.push(c.log.id)
    }
    this.lastError = undefined
    // Lazily: nobody asks which logs moved, so none is visited. Each log
    // publishes what this flush made durable when it is next read or appended
    // to (FileShapeLog.catchUp), and stays in the list for the next flush that
    // is asked. With many logs this pass would be a cache miss per log
    // appended since the last flush.
    if (this.advancedListeners === 0 && !named) return this.tell({ durableLsn: this.durable, advanced, durationMs: performance.now() - started })
    this.publishListed(lastLsn, lastSeq, this.durable, seq, created, advanced)
    return this.tell({ durableLsn: this.durable, advanced, durationMs: performance.now() - started })
  }

  private tell(result: FlushResult): FlushResult {
    for (const listener of this.listeners) listener(result)
    return result
  }

  // ---- LogHost: the append path --------------------------------------------

  nextSeq(): number {
    return ++this.seq
  }

  get publishedLsn(): bigint {
    return this.lastPublishedLsn
  }

  get publishedSeq(): number {
    return this.lastPublishedSeq
  }

  markDirty(log: FileShapeLog, bytes: number): void {
    if (!log.dirtyMark) {
      // A log being built is synced by the flush that finishes it, not by one before.
      if (!log.registered) return
      // With the journal a log's first append in a group journals its entry records at once
      // (LogTail.journalRecords): the flush visits only logs with records left to write.
      if (this.journal === undefined || log.indexDue) this.listDirty(log)
    }
    this.dirtyBytes += bytes
    if (this.dirtyBytes >= this.flushBytes) this.schedule(true)
    else if (!this.timer) this.schedule(false)
  }

  noteBacklog(log: BackloggedLog): void {
    this.backlogged.add(log)
  }

  /**
   * Undefined when nothing the store makes durable has fallen behind the
   * appends; else a promise that resolves once it has caught up (or failed):
   * a log whose tail holds more than BACKLOG_BYTES not yet written back
   * (`noteBacklog`), or a flush under way (a slow fdatasync) while the next
   * journal group has gathered twice `flushBytes` and would grow with
   * everything appended meanwhile.
   */
  backlog(): Promise<void> | undefined {
    for (const log of this.backlogged) if (!log.backlogged) this.backlogged.delete(log)
    const flushing = this.flushing !== undefined && this.dirtyBytes >= 2 * this.flushBytes ? this.flushing : undefined
    if (this.backlogged.size === 0 && flushing === undefined) return undefined
    return this.drainBacklog(flushing)
  }

  private async drainBacklog(flushing: Promise<FlushResult> | undefined): Promise<void> {
    // A failed flush is the flush's caller's to report; the writer only waits for it to end.
    if (flushing !== undefined) await flushing.catch(() => undefined)
    while (this.backlogged.size > 0) {
      const logs = [...this.backlogged]
      const caughtUp = await Promise.all(logs.map((log) => log.catchUpWriteBack()))
      for (let i = 0; i < logs.length; i++) if (!caughtUp[i] || !logs[i]!.backlogged) this.backlogged.delete(logs[i]!)
    }
  }

  writeBackFailed(log: { readonly deleted: boolean }, err: StorageError): void {
    // Nothing is lost: the bytes stay in memory and in the journal, and the next write-back or checkpoint tries again.
    if (!log.deleted) this.host.emitError(err)
  }

  markUnpublished(log: FileShapeLog): void {
    // Membership follows boundaries, not dirtiness: a `more` append dirties a log
    // without giving it anything to publish, and the publish pass drops such logs.
    // A log being built is published when it is registered.
    if (log.registered) this.listUnpublished(log)
  }

  // ---- FinisherHost (the lists are FlushLists') --------------------------------

  scheduleFlush(): void {
    this.schedule(false)
  }

  beforePlace(): Promise<void> | undefined {
    return this.host.beforePlace()
  }

  // ---- timing ----------------------------------------------------------------

  private cappedTarget(): bigint {
    let target = this.advanced
    for (const tx of this.faults.values()) if (tx - 1n < target) target = tx - 1n
    return target < this.durable ? this.durable : target
  }

  /** `keepAlive`: someone awaits this flush (a snapshot carried over), though it need not run at once. */
  private schedule(now: boolean, keepAlive = false): void {
    if (this.stopped) return
    if (this.immediate) {
      // A flush runs this turn anyway; whoever waits on it keeps the process alive.
      if (now || keepAlive) this.immediate.ref()
      return
    }
    if (now) {
      // Someone waits on this flush (a snapshot) or the threshold was hit: keep
      // the process alive for it.
      if (this.timer) clearTimeout(this.timer)
      this.timer = setTimeout(this.onTimer, 0)
    } else if (!this.timer) {
      // The interval alone must not keep a process alive; close() flushes.
      this.timer = setTimeout(this.onTimer, this.flushIntervalMs)
      if (!keepAlive) this.timer.unref()
    } else if (keepAlive) {
      this.timer.ref()
    }
  }

  private timedFlush(): void {
    this.timer = undefined
    if (this.stopped) return
    this.flush(false, true)
      .then(() => {
        this.failedFlushes = 0
      })
      .catch((err: unknown) => {
        this.failedFlushes++
        this.host.emitError(err instanceof StorageError ? err : fromSystemError(err, 'flush'))
      })
      .finally(() => {
        // Keep retrying while there is work; a cleared fault then resumes by itself.
        // Failures back off, so a full disk reports an error a few times a second, not a hundred.
        if (this.stopped || this.timer || this.immediate) return
        if (!(this.dirtyCount > 0 || this.dirtyBytes > 0 || this.snapshots.pending > 0 || this.cappedTarget() > this.durable)) return
        if (this.failedFlushes === 0) return this.schedule(false)
        const delay = Math.min(MAX_RETRY_MS, this.flushIntervalMs * 2 ** Math.min(this.failedFlushes, 16))
        this.timer = setTimeout(this.onTimer, delay)
        this.timer.unref()
      })
  }
}
