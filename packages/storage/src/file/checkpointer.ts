/**
 * Checkpoints and the tail budget. A checkpoint takes the journal's closed
 * segments (all of them on close): every log they name writes back what it
 * keeps in memory (write-behind), then one syncfs makes the whole store
 * durable where the port and system allow it (tried at the first checkpoint),
 * else each log fdatasyncs its own files; the segments are then deleted. With
 * many logs syncfs is one call instead of two or three per log, each of which
 * costs a filesystem journal commit.
 *
 * Back-pressure. Write-behind tails leave memory only through a checkpoint,
 * which covers closed segments only: past half the tail budget the current
 * segment is closed early; past all of it the writer is asked to hold back
 * (`onPressure`) until a checkpoint has brought them under half. Unbounded, a
 * stream to many logs that checkpoints could not keep up with would grow them
 * without limit, each page touched for the first time slowing the appends
 * that starve the checkpoint of the event loop further.
 */
import { StorageError, fromSystemError } from '../errors.js'
import type { Watermark } from '../format.js'
import type { FsPort } from '../fs-port.js'
import { forEachConcurrently } from '../concurrently.js'
import type { FdCache } from './fd-cache.js'
import { FileShapeLog } from './file-log.js'
import type { Journal } from './journal.js'
import { syncConcurrency, syncOwnFiles, unlessDeleted } from './log-sync.js'
import type { CheckpointStats } from './store-options.js'
import type { TailArena } from './tail-arena.js'
import { publishWatermark } from './watermark.js'
import type { FileWriter } from './write-back.js'

// While the writer is held back and a checkpoint failed: when to try again.
const PRESSURE_RETRY_MS = 1000
// Logs a checkpoint writes back as one job list (`FileShapeLog.writeBackMany`): a batch's worth for the write-back thread.
const CHECKPOINT_RUN = 256

const NO_CHECKPOINT: Readonly<CheckpointStats> = Object.freeze({ running: false, logs: 0, writtenBack: 0, writeBackMs: 0, syncMs: 0, totalMs: 0, syncfs: false })

/** The store-wide pieces a checkpoint works with. */
export interface CheckpointEnv {
  readonly fs: FsPort
  readonly root: string
  readonly fds: FdCache
  readonly arena: TailArena
  readonly journal: Journal<FileShapeLog> | undefined
  readonly writer: FileWriter
  readonly tailBudget: number
  /** Background failures (a checkpoint, a pressure listener). */
  emitError(err: StorageError): void
}

export class Checkpointer {
  private readonly pressureListeners = new Set<(held: boolean) => void>()
  /** The writer is asked to hold back (see `onPressure`). */
  private pressured = false
  /** Times the writer was asked to hold back since open. */
  private pressureCount = 0
  private pressureRetry: NodeJS.Timeout | undefined
  /** A background checkpoint runs (`startCheckpoint`). */
  private checkpointing = false
  /** Checkpoints sync with one syncfs: unknown until the first, false where the port or system cannot. */
  private wholeSync: boolean | undefined
  /** Set by a failed checkpoint sync: no checkpoint runs again (see `breakSync`). */
  private syncBroken: StorageError | undefined
  private lastCheckpoint: CheckpointStats = NO_CHECKPOINT
  /** The store is closing: no background checkpoint starts any more. */
  private stopped = false

  constructor(private readonly env: CheckpointEnv) {}

  /** The checkpoint running now, or else the last one. */
  get stats(): Readonly<CheckpointStats> {
    return this.lastCheckpoint
  }

  /** Whether the writer is asked to hold back now (see `onPressure`). */
  get underPressure(): boolean {
    return this.pressured
  }

  /** Times the writer was asked to hold back since open. */
  get pressures(): number {
    return this.pressureCount
  }

  /**
   * Called with true when the write-behind tails pass the tail budget: the
   * writer should stop appending (a replication stream pauses) while a
   * checkpoint writes them back, and with false once they are under half of
   * it. Appends are still taken meanwhile; this is advice, not a refusal.
   */
  onPressure(listener: (held: boolean) => void): () => void {
    this.pressureListeners.add(listener)
    return () => this.pressureListeners.delete(listener)
  }

  /** No more background checkpoints, and nobody held back (the store is closing; it runs the last checkpoint itself). */
  stop(): void {
    this.stopped = true
    this.setPressure(false)
  }

  /**
   * A checkpoint of the closed segments, or of every segment (`all`: the
   * store is closing, so this is its last chance to make the logs durable
   * without a replay).
   */
  checkpoint(all: boolean): Promise<void> {
    if (this.syncBroken) return Promise.reject(this.syncBroken)
    const { fs, writer } = this.env
    // Decided now: callers start a checkpoint only when none runs (the journal would queue it).
    const whole = this.wholeSync !== false && fs.syncFilesystem !== undefined
    const stats: CheckpointStats = { ...NO_CHECKPOINT, running: true, syncfs: whole }
    const started = performance.now()

    let synced = started
    return this.env.journal!.checkpoint(all, {
      start: (logs) => {
        stats.logs = logs
        this.lastCheckpoint = stats
      },
      sync: async (log) => {
        await this.checkpointLog(log, !whole)
        stats.writtenBack++
      },
      // With one syncfs to follow, logs only need their bytes in the files: in runs, each one job list for the writer.
      syncBatch: whole
        ? async (logs) => {
            await FileShapeLog.writeBackMany(logs, writer)
            stats.writtenBack += logs.length
          }
        : undefined,
      batch: CHECKPOINT_RUN,
      // Write-backs and per-file syncs wait on other threads: many at once.
      concurrency: whole ? Math.max(1, Math.ceil(writer.concurrency / CHECKPOINT_RUN)) : syncConcurrency(this.env.fds),
      syncAll: whole
        ? async (logs) => {
            synced = performance.now()
            stats.writeBackMs = synced - started
            stats.syncfs = await this.syncWholeStore(logs, all)
            stats.syncMs = performance.now() - synced
          }
        : undefined,
      keep: this.keepWatermark,
    }).finally(() => {
      stats.running = false
      stats.totalMs = performance.now() - started
      // Per-file syncs are part of each log's step: no separate write-back time.
      if (!whole) stats.syncMs = stats.totalMs
    })
  }

  /**
   * One log's part of a checkpoint: its tail into its files (through the
   * store's writer, write-back.ts), and without syncfs its files synced. A
   * failed write loses nothing: the bytes stay in memory for the next try.
   */
  private async checkpointLog(log: FileShapeLog, sync: boolean): Promise<void> {
    await unlessDeleted(
      log,
      () => log.writeBackAll(),
      (err) => fromSystemError(err, `write back shape ${log.id}`),
    )
    if (sync) await this.checkpointSync(log)
  }

  private checkpointSync(log: FileShapeLog): Promise<void> {
    return unlessDeleted(
      log,
      () => syncOwnFiles(this.env.fs, this.env.fds, log),
      (err) => this.breakSync(err, `sync shape ${log.id}`),
    )
  }

  /**
   * `all`: the store is closing, so this checkpoint is its last chance to make
   * the logs durable without a replay. Resolves true when one syncfs did it,
   * false when the files were synced one by one.
   */
  private async syncWholeStore(logs: readonly FileShapeLog[], all: boolean): Promise<boolean> {
    // The syncfs covers every chunk index changed before it starts: no later per-file sync needs to redo them.
    const chunks = logs.filter((log) => log.chunksDirty)
    for (const log of chunks) log.chunksDirty = false
    try {
      await this.env.fs.syncFilesystem!(this.env.root)
      this.wholeSync = true
      return true
    } catch (err) {
      for (const log of chunks) log.chunksDirty = true
      const code = (err as NodeJS.ErrnoException).code
      if (code === 'ENOTSUP' && this.wholeSync === undefined) {
        // Not on this system: this checkpoint and every later one sync file by file.
        this.wholeSync = false
      } else if (code !== 'EIO' && !all) {
        // The sync never ran (the child could not start: EAGAIN, ENOMEM under
        // memory pressure): nothing was reported, try again next time.
        throw fromSystemError(err, 'sync the store')
      }
      // EIO: syncfs reports a failed write of any file on the filesystem, another
      // program's included. Each file's own fdatasync tells whether it was ours.
      // A close whose sync could not start has no next time: a close failed by a
      // fork would leave the whole journal to replay, so its files sync one by one.
    }
    await forEachConcurrently(logs, syncConcurrency(this.env.fds), (log) => this.checkpointSync(log))
    return false
  }

  /**
   * After a failed sync the kernel may have dropped the pages it could not
   * write, and it reports that only once: a retry would succeed over files
   * that lack them. So the journal, which holds every byte, is kept from then
   * on (no more checkpoints) and the next open replays it over the files.
   */
  private breakSync(err: unknown, what: string): StorageError {
    const e = fromSystemError(err, what)
    this.syncBroken ??= new StorageError(
      e.code,
      `${e.message}; the store keeps its journal from now on and replays it over the logs' files at the next open (restart the server)`,
      { cause: e },
    )
    return this.syncBroken
  }

  /** A checkpoint is about to delete the segments that published `w`. */
  private readonly keepWatermark = (w: Watermark): Promise<void> => publishWatermark(this.env.fs, this.env.root, w)

  /**
   * After each journal commit and each checkpoint: checkpoints closed
   * segments, and keeps the write-behind tails within the budget (see the
   * module comment).
   */
  maintain(): void {
    const journal = this.env.journal
    if (journal === undefined || this.stopped) return
    const inUse = this.env.arena.bytesInUse
    const budget = this.env.tailBudget
    // After a failed sync no checkpoint runs again: holding the writer back would stop it for good.
    if (this.syncBroken !== undefined || inUse <= budget / 2) this.setPressure(false)
    else if (inUse > budget) this.setPressure(true)
    if (this.checkpointing) return
    if (this.syncBroken === undefined && inUse > budget / 2) {
      // With the segments closed already, so one checkpoint covers every tail.
      const sealed = journal.seal()
      // Nothing a checkpoint could free (no log has records in the journal): not tails, so do not hold the writer for them.
      if (!sealed && journal.closedSegments === 0 && !journal.committing) this.setPressure(false)
    }
    if (journal.closedSegments > 0) this.startCheckpoint()
    else if (this.pressured) this.retryMaintenance()
  }

  /** Held back with no checkpoint under way (a commit was in flight, or failed): look again in a while. */
  private retryMaintenance(): void {
    if (this.stopped) return
    clearTimeout(this.pressureRetry)
    this.pressureRetry = setTimeout(() => this.maintain(), PRESSURE_RETRY_MS)
    this.pressureRetry.unref()
  }

  private setPressure(held: boolean): void {
    if (this.pressured === held) return
    this.pressured = held
    if (held) this.pressureCount++
    else clearTimeout(this.pressureRetry)
    for (const listener of this.pressureListeners) {
      try {
        listener(held)
      } catch (err) {
        // A listener's bug must not fail the flush or checkpoint that noticed the change.
        this.env.emitError(fromSystemError(err, 'notify a pressure listener'))
      }
    }
  }

  /** Checkpoints closed journal segments in the background; a failure leaves them for the next try. */
  private startCheckpoint(): void {
    if (this.syncBroken) return
    this.checkpointing = true
    this.checkpoint(false).then(
      () => {
        this.checkpointing = false
        // The checkpoint wrote the tails back: what a burst grew the arena by is free now.
        this.env.arena.trim()
        this.maintain()
      },
      (err: unknown) => {
        this.checkpointing = false
        this.env.emitError(fromSystemError(err, 'checkpoint the journal'))
        // A held-back writer appends nothing, so no commit would try again.
        if (this.pressured) this.retryMaintenance()
      },
    )
  }
}
