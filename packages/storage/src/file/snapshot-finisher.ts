/**
 * New logs becoming shapes: the snapshots whose `finish()` was called wait
 * here for a flush, which syncs each (everything appended so far, live
 * transactions included), renames it from tmp/ into its bucket of shapes/
 * (shape-dirs.ts) and registers it,
 * publishing the snapshot and the complete transactions that the sync covered
 * and the watermark covers.
 *
 * Invariant: no record at or below a published watermark is ever unsynced in
 * shapes/ (recovery and read-only followers rely on it). A new log's
 * transactions may lie at or below the watermark, so its rename waits for a
 * later flush while one of those is open or arrived after the sync, and from
 * the rename on the log refuses new ones (`FileShapeLog.floor`).
 */
import { randomBytes } from 'node:crypto'
import { StorageError, fromSystemError } from '../errors.js'
import type { FsPort } from '../fs-port.js'
import { forEachConcurrently } from '../concurrently.js'
import type { FdCache, FileRef } from './fd-cache.js'
import type { FileShapeLog } from './file-log.js'
import { syncConcurrency, syncLog } from './log-sync.js'
import { bucketDir, placeLog, shapeDir } from './shape-dirs.js'
import { syncDirectory } from './watermark.js'

export interface FinishingSnapshot {
  readonly log: FileShapeLog
  readonly meta: FileRef
  readonly tmpDir: string
  /** meta.bin and the tmp directory are synced (a snapshot carried to a later flush needs only its log synced again). */
  prepared: boolean
  /** `abort()` was called after `finish()`. */
  aborted: boolean
  /** Appends up to this sequence number were covered by the last sync of the log. */
  syncSeq: number
  /** File sizes that sync covered: what the log took after it must go into the journal once registered. */
  syncedEnds: { data: number; entries: number; chunks: number } | undefined
  /** Renamed into shapes/; from here on the log refuses transactions at or below `log.floor`. */
  renamed(): void
  resolve(log: FileShapeLog): void
  /** Drops the snapshot (its files, its place in the store) and rejects `finish`. */
  reject(err: unknown): void
  /** Rejects `finish` for a log already registered (an abort came too late; `abort()` deletes it). */
  abandon(err: unknown): void
}

/** What finishing needs from the group commit whose flush runs it. */
export interface FinisherHost {
  readonly fs: FsPort
  readonly fds: FdCache
  readonly root: string
  /** Whether the store keeps a journal (a registered log's later writes go into it). */
  readonly journaled: boolean
  /** The store's append sequence number now. */
  readonly appendSeq: number
  /** The published watermark. */
  readonly durableLsn: bigint
  /** An append to the log failed and holds the watermark back. */
  hasFault(log: FileShapeLog): boolean
  /** The journal does not cover the log's files: the next flush syncs them as a whole. */
  syncWhole(log: FileShapeLog): void
  listUnpublished(log: FileShapeLog): void
  listDirty(log: FileShapeLog): void
  scheduleFlush(): void
  /**
   * Awaited before new logs are renamed into shapes/: while a heads file that
   * names an earlier log under a new log's id is being removed
   * (heads-snapshots.ts), the new log must not become durable.
   */
  beforePlace(): Promise<void> | undefined
}

export class SnapshotFinisher {
  private queue: FinishingSnapshot[] = []

  constructor(private readonly host: FinisherHost) {}

  /** Snapshots waiting for a flush. */
  get pending(): number {
    return this.queue.length
  }

  add(s: FinishingSnapshot): void {
    this.queue.push(s)
  }

  /** Takes `s` out of the queue if no flush has it yet; returns whether it did. */
  withdraw(s: FinishingSnapshot): boolean {
    const queued = this.queue.indexOf(s)
    if (queued < 0) return false
    this.queue.splice(queued, 1)
    return true
  }

  /** Everything queued, for a flush to finish. */
  take(): FinishingSnapshot[] {
    const snapshots = this.queue
    this.queue = []
    return snapshots
  }

  /** Snapshots a flush left for a later one, kept ahead of those finished meanwhile. */
  putBack(waiting: FinishingSnapshot[]): void {
    this.queue = [...waiting, ...this.queue]
  }

  rejectAll(err: unknown): void {
    for (const s of this.queue) s.reject(err)
  }

  /**
   * Syncs finished snapshots, renames into place those whose every transaction
   * at or below `target` is complete and covered by the sync, and registers
   * them. Returns the snapshots that became logs and those left for a later
   * flush.
   */
  async finish(snapshots: FinishingSnapshot[], target: bigint): Promise<{ created: FinishingSnapshot[]; waiting: FinishingSnapshot[] }> {
    if (snapshots.length === 0) return { created: [], waiting: [] }
    const host = this.host
    const { fs, fds, root } = host
    const ready: FinishingSnapshot[] = []
    await forEachConcurrently(snapshots, syncConcurrency(fds), async (s) => {
      try {
        // Carried over with nothing appended since: already synced.
        if (!s.prepared || s.log.lastSeq() > s.syncSeq) {
          // syncLog writes the staged index before its first await, so every
          // append up to here is in what the sync covers.
          s.syncSeq = host.appendSeq
          const synced = syncLog(fs, fds, s.log)
          s.syncedEnds = s.log.fileEnds()
          await synced
        }
        if (!s.prepared) {
          await fds.useAsync(s.meta, (fd) => fs.fdatasync(fd))
          fds.retire(s.meta)
          await syncDirectory(fs, s.tmpDir)
          s.prepared = true
        }
        ready.push(s)
      } catch (err) {
        fds.retire(s.meta)
        s.reject(fromSystemError(err, `finish snapshot of shape ${s.log.id}`))
      }
    })
    try {
      await host.beforePlace()
    } catch (err) {
      for (const s of ready) s.reject(fromSystemError(err, `finish snapshot of shape ${s.log.id}`))
      return { created: [], waiting: [] }
    }
    const moved: FinishingSnapshot[] = []
    const waiting: FinishingSnapshot[] = []
    const buckets = new Set<string>()
    let madeBucket = false
    // No await from each check to its rename: nothing can be appended in between.
    for (const s of ready) {
      if (s.log.deleted) continue // dropped by a failed append during the sync
      if (s.aborted) {
        s.reject(new StorageError('shape_deleted', `snapshot of shape ${s.log.id} was aborted`))
        continue
      }
      if (s.log.unsettledAtOrBelow(target, s.syncSeq) || host.hasFault(s.log)) {
        waiting.push(s)
        continue
      }
      const dir = shapeDir(root, s.log.id)
      try {
        if (placeLog(fs, root, s.log.id, s.tmpDir) !== undefined) madeBucket = true
        buckets.add(bucketDir(root, s.log.id))
      } catch (err) {
        s.reject(fromSystemError(err, `publish snapshot of shape ${s.log.id}`))
        continue
      }
      s.log.moveTo(dir)
      s.log.floor = target
      s.renamed()
      moved.push(s)
    }
    if (moved.length === 0) return { created: [], waiting }
    try {
      // Each bucket's new entries, then shapes/ for the buckets made: a log
      // must not become durable in a bucket whose own entry may vanish. The
      // descriptors are opened now, in the renames' turn, before any deletion
      // can remove a bucket.
      const syncs = [...buckets].map((b) => syncDirectory(fs, b))
      if (madeBucket) syncs.push(syncDirectory(fs, `${root}/shapes`))
      await Promise.all(syncs)
    } catch (err) {
      // The renames may not survive a crash; do not hand out logs that could vanish.
      for (const s of moved) {
        const back = `${root}/trash/${s.log.id}.${Date.now()}.${randomBytes(3).toString('hex')}`
        try {
          fs.renameSync(s.log.dir, back)
        } catch {
          // Left in shapes/: it is complete and synced, so reopening finds a valid log.
        }
        s.log.moveTo(back)
        s.reject(fromSystemError(err, `publish snapshot of shape ${s.log.id}`))
      }
      return { created: [], waiting }
    }
    // Registered (flushed and published from now on), but served by `get` only
    // once this flush is done with it (the store's `reveal`).
    for (const s of moved) {
      const log = s.log
      log.registered = true
      if (host.journaled && s.syncedEnds) {
        try {
          log.journalSince(s.syncedEnds)
        } catch {
          // Then the next flush syncs its files as a whole.
          host.syncWhole(log)
        }
      }
      log.publishSnapshot()
      // Already durable: synced in the directory, covered by a published watermark.
      log.publish(host.durableLsn, s.syncSeq)
      if (log.hasUnpublished()) host.listUnpublished(log)
      if (log.lastSeq() > s.syncSeq) {
        // Appended after the sync (above the target, or it would have waited):
        // synced and published by later flushes like any dirty log's.
        host.listDirty(log)
        host.scheduleFlush()
      }
    }
    return { created: moved, waiting }
  }
}
