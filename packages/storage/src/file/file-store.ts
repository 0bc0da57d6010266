/**
 * The file engine's store: the registry of logs and the store's life (open,
 * create, delete, close). It composes the parts that do the work:
 *
 *   GroupCommit       group-commit.ts       appends to durable watermark: flush, publish, listeners
 *   SnapshotFinisher  snapshot-finisher.ts  new logs synced and renamed into shapes/ by a flush
 *   Checkpointer      checkpointer.ts       journal checkpoints and tail-budget back-pressure
 *   store-directory.ts                      opening every log at open (from the heads file, or by scanning)
 *   HeadsSnapshots    heads-snapshots.ts    the heads file, while running and at close
 *   snapshot-writer.ts                      a shape being built in tmp/
 *
 * Layout and byte formats: `format.ts`. The logs themselves: `file-log.ts`.
 */
import { randomBytes } from 'node:crypto'
import type { FlushListenerOptions, FlushResult, ShapeLogStore, SnapshotWriter } from '../contract.js'
import {
  DEFAULT_CHUNK_BYTES,
  DEFAULT_FLUSH_BYTES,
  DEFAULT_FLUSH_INTERVAL_MS,
  DEFAULT_HEADS_INTERVAL_MS,
  DEFAULT_JOURNAL_SEGMENT_AGE_MS,
  DEFAULT_JOURNAL_SEGMENT_BYTES,
  DEFAULT_MAX_OPEN_FILES,
  DEFAULT_TAIL_BUDGET_BYTES,
  checkShapeId,
} from '../defaults.js'
import { StorageError, fromSystemError } from '../errors.js'
import type { FsPort } from '../fs-port.js'
import { nodeFs } from '../fs-port.js'
import { Checkpointer } from './checkpointer.js'
import { FdCache } from './fd-cache.js'
import type { FileShapeLog } from './file-log.js'
import { GroupCommit } from './group-commit.js'
import { type PeekedHeads, headsVersion, peekHeads, readHeads, sameHeadsLineage, sameHeadsVersion, tidyHeads } from './heads-file.js'
import { HeadsSnapshots } from './heads-snapshots.js'
import { DEFAULT_IDLE_SYNC_INLINE_MAX_MS, Journal } from './journal.js'
import { replayJournal } from './journal-replay.js'
import { makeShapeDir, snapshotWriter } from './snapshot-writer.js'
import type { SnapshotHost } from './snapshot-writer.js'
import { type StoreLockOptions, acquireStoreLock } from './store-lock.js'
import { EarlyStats, type HeadsPlan, type PreparedLogs, loadLogs, planHeads, prepareLogs } from './store-directory.js'
import type { StatParts } from './stat-files.js'
import type { CheckpointStats, FileStoreOptions, FileStoreStats } from './store-options.js'
import { DEFAULT_ARENA_RESERVE_BYTES, TailArena } from './tail-arena.js'
import { publishWatermark, readWatermark, watermarkVersion } from './watermark.js'
import { BUCKETED_STORE_VERSION } from '../format.js'
import { PortWriter, writeBackThread } from './write-back.js'
import type { FileWriter } from './write-back.js'
import { Trash } from './trash.js'
import { dropBucketIfEmpty, migrateFlatLayout } from './shape-dirs.js'

// The default reserve follows the budget up to here; a bigger budget grows the arena in slabs past it.
const MAX_TAIL_RESERVE_BYTES = 1024 * 1024 * 1024
/** What `prefaultTails` touches per log (see there). */
const PREFAULT_PER_LOG_BYTES = 1280

export class FileLogStore implements ShapeLogStore {
  readonly readOnly = false
  readonly fds: FdCache
  readonly writer: FileWriter
  readonly chunkBytes: number
  readonly arena: TailArena
  readonly journal: Journal<FileShapeLog> | undefined
  private readonly commit: GroupCommit
  private readonly checkpointer: Checkpointer
  private readonly heads: HeadsSnapshots
  private logs = new Map<string, FileShapeLog>()
  /** Ids of shapes being built (in tmp/): taken, but not served by `get` yet. */
  private readonly creating = new Set<string>()
  private readonly errorListeners = new Set<(err: StorageError) => void>()
  private readonly snapshotHost: SnapshotHost
  private closed = false
  private closing: Promise<void> | undefined
  /** Releases the writer lock; undefined while the store is prepared (`prepare`), not yet promoted. */
  private unlock: (() => void) | undefined
  /** A prepared store whose logs come from the heads file (false: a store without a usable watermark yet, left to `promote`). */
  private preparing = false
  /** The heads file the prepared logs were built from, its plan, and the log of each of the plan's entries. */
  private preparedFrom: PeekedHeads | undefined
  private preparedPlan: { readonly plan: HeadsPlan; readonly aligned: readonly FileShapeLog[] } | undefined
  private tmpCounter = 0
  private readonly trash: Trash
  /** Logs opened from the heads file without scanning their files. */
  cleanOpened = 0
  /** Ids of logs that failed to open and were moved to quarantine/. */
  readonly quarantined: string[] = []

  private constructor(
    readonly fs: FsPort,
    readonly root: string,
    private readonly options: FileStoreOptions,
    watermark: { lsn: bigint; sequence: bigint },
  ) {
    this.journal =
      options.journal === false
        ? undefined
        : new Journal(fs, root, 0, {
            segmentBytes: options.journalSegmentBytes ?? DEFAULT_JOURNAL_SEGMENT_BYTES,
            segmentAgeMs: options.journalSegmentAgeMs ?? DEFAULT_JOURNAL_SEGMENT_AGE_MS,
            inlineSyncMaxMs: options.idleSyncInlineMaxMs ?? (fs === nodeFs ? DEFAULT_IDLE_SYNC_INLINE_MAX_MS : 0),
          })
    this.fds = new FdCache(fs, options.maxOpenFiles ?? DEFAULT_MAX_OPEN_FILES)
    this.writer = (options.writeBackThread ?? fs === nodeFs) ? writeBackThread() : new PortWriter(fs, this.fds)
    const tailBudget = options.tailBudgetBytes ?? DEFAULT_TAIL_BUDGET_BYTES
    // Without the journal nothing waits for a write-back: only staged records use the arena.
    this.arena = new TailArena(options.tailReserveBytes ?? (this.journal ? Math.min(Math.max(DEFAULT_ARENA_RESERVE_BYTES, tailBudget), MAX_TAIL_RESERVE_BYTES) : 0))
    this.chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES
    if (options.onError !== undefined) this.errorListeners.add(options.onError)
    const emitError = (err: StorageError): void => this.emitError(err)
    this.trash = new Trash(fs, `${root}/trash`, emitError)
    const env = { fs, root, fds: this.fds, arena: this.arena, journal: this.journal, writer: this.writer }
    this.checkpointer = new Checkpointer({ ...env, tailBudget, emitError })
    this.commit = new GroupCommit(
      {
        ...env,
        chunkBytes: this.chunkBytes,
        flushIntervalMs: options.flushIntervalMs ?? DEFAULT_FLUSH_INTERVAL_MS,
        flushBytes: options.flushBytes ?? DEFAULT_FLUSH_BYTES,
        flushWhenIdle: options.flushWhenIdle ?? true,
      },
      watermark,
      { emitError, maintainJournal: () => this.checkpointer.maintain(), reveal: (log) => this.reveal(log), beforePlace: () => this.heads.beforePlace() },
    )
    this.snapshotHost = {
      fs,
      commit: this.commit,
      dropped: (log) => {
        this.creating.delete(log.id)
        this.commit.forget(log)
      },
      isRegistered: (log) => this.logs.get(log.id) === log,
      deleteShape: (id) => this.deleteShape(id),
    }
    const store = this
    this.heads = new HeadsSnapshots(
      {
        fs,
        root,
        logs: () => store.logs.values(),
        get logCount() {
          return store.logs.size
        },
        get durableLsn() {
          return store.commit.durableLsn
        },
        get publishedSeq() {
          return store.commit.publishedSeq
        },
        emitError,
      },
      options.headsIntervalMs ?? DEFAULT_HEADS_INTERVAL_MS,
    )
  }

  /** Opens the store for writing: takes the lock (`options.lock`), replays the journal and opens every log. */
  static async open(options: FileStoreOptions): Promise<FileLogStore> {
    const { fs, root } = makeStoreDirs(options)
    const unlock = await acquireStoreLock(fs, root, options.lock)
    try {
      const store = new FileLogStore(fs, root, options, ZERO_WATERMARK)
      await store.takeOver(unlock)
      return store
    } catch (err) {
      unlock()
      throw err
    }
  }

  /**
   * A store for a standby, built without the lock and without writing
   * anything: every log the heads file names, at its head there, so that a
   * server can restore its shapes on them while another process writes. It
   * serves `get`, `ids`, `durableLsn` (the watermark on disk now: a lower
   * bound) and a log's `head` and `meta`; everything that writes throws
   * `store_not_promoted`. `refresh` keeps it current; `promote` takes the lock
   * and makes it the writer, as `open` would have, keeping every log object
   * whose id and meta are still those on disk.
   */
  static async prepare(options: FileStoreOptions): Promise<FileLogStore> {
    const { fs, root } = makeStoreDirs(options)
    const watermark = watermarkVersion(fs, root) === BUCKETED_STORE_VERSION ? readWatermark(fs, root) : undefined
    const store = new FileLogStore(fs, root, options, watermark ?? ZERO_WATERMARK)
    store.preparing = watermark !== undefined
    store.refreshNow()
    return store
  }

  /**
   * Whether this store waits for its promotion (`prepare`). Such a store
   * changes only through `refresh` and `promote`.
   */
  get prepared(): boolean {
    return this.unlock === undefined && !this.closed
  }

  /**
   * A prepared store: reads the heads file again if another one is in place
   * since, and brings the logs to it (a log whose id and meta stay is the same
   * object; the others are new, and those gone are retired). Resolves whether
   * anything changed. Rereading costs about what `prepare` did (a second with
   * 100k logs): a standby calls this every few seconds at most.
   */
  async refresh(): Promise<boolean> {
    if (!this.prepared) throw new StorageError('store_closed', 'refresh: the store is not a prepared one')
    if (!this.preparing) return false
    const now = headsVersion(this.fs, this.root)
    if (now === undefined || sameHeadsVersion(now, this.preparedFrom?.version)) return false
    this.refreshNow()
    return true
  }

  private refreshNow(): void {
    if (!this.preparing) return
    const read = peekHeads(this.fs, this.root, this.preparedFrom)
    if (read === undefined) return
    const plan = planHeads(read.logs)
    const { logs, aligned } = prepareLogs(this.root, this.commit, plan, this.logs)
    this.logs = logs
    this.preparedFrom = read
    this.preparedPlan = { plan, aligned }
  }

  /**
   * Makes a prepared store the writer: waits for the lock (`options.lock`,
   * with `whileWaiting` run between attempts), replays the journal, and
   * checks every log against its files as `open` does. Logs are kept as
   * objects where their id, directory and meta are unchanged (brought to what
   * is on disk in place); a log made or changed since is a new object, and a
   * log gone is retired. After a failure the store is closed (the lock, if
   * taken, released).
   */
  async promote(lock: StoreLockOptions = this.options.lock ?? {}): Promise<void> {
    if (!this.prepared) throw new StorageError('store_closed', 'promote: the store is not a prepared one')
    let unlock: (() => void) | undefined
    try {
      unlock = await acquireStoreLock(this.fs, this.root, lock)
      await this.takeOver(unlock)
    } catch (err) {
      unlock?.()
      this.closed = true
      for (const log of this.logs.values()) log.retire()
      this.logs.clear()
      throw err
    }
  }

  /** What `open` and `promote` do once the lock is theirs. */
  private async takeOver(unlock: () => void): Promise<void> {
    const { fs, root, options } = this
    // Before replay, which finds each log at its bucketed place, and before
    // the watermark says the store is bucketed (format.ts).
    await migrateFlatLayout(fs, root)
    let watermark = readWatermark(fs, root)
    if (!watermark || watermarkVersion(fs, root) !== BUCKETED_STORE_VERSION) {
      watermark ??= ZERO_WATERMARK
      await publishWatermark(fs, root, watermark)
    }
    // Before any log is opened: recovery's cut relies on the files holding
    // everything the watermark covers. Replayed whatever `journal` says now,
    // since the last run may have journaled.
    const replay = await replayJournal(fs, root, watermark)
    this.commit.resume(replay.watermark)
    this.journal?.resume(replay.nextGeneration)
    tidyHeads(fs, root)
    const prepared = this.preparedFrom
    // The prepared logs' entries stand while the file they came from is the one in place, or one of
    // its lineage is (heads-file.ts: no log was made again under a deleted id since); else the file in
    // place decides. Not with no file in place: the deleted-id guard removed it.
    const inPlace = headsVersion(fs, root)
    const sameFile = sameHeadsVersion(prepared?.version, inPlace)
    const keep = prepared !== undefined && prepared.watermark <= replay.watermark.lsn && (sameFile || sameHeadsLineage(prepared.version, inPlace))
    // The native stats of the logs' files start while the file is decoded (store-directory.ts EarlyStats).
    const early = !keep && fs === nodeFs && options.statFiles !== undefined ? new EarlyStats(fs, options.statFiles, root) : undefined
    const read = keep ? undefined : readHeads(fs, root, replay.watermark.lsn, prepared, early)
    const heads = read?.logs
    const planned = heads === undefined ? undefined : early?.plan(heads)
    const plan = keep ? this.preparedPlan!.plan : heads === undefined ? undefined : (planned?.plan ?? planHeads(heads))
    const foreign = await this.load(plan, { logs: this.logs, aligned: keep ? this.preparedPlan!.aligned : undefined }, planned?.stats)
    // The lineage of the file in place (it may have been given another since the standby read it:
    // heads-snapshots.ts), unless the file names files other than these (a copied or restored store).
    this.heads.adopt(foreign ? 0n : keep ? inPlace!.lineage : (read?.version.lineage ?? 0n))
    this.preparedFrom = undefined
    this.preparedPlan = undefined
    this.preparing = false
    this.unlock = unlock
    if (options.prefaultTails === true) void this.prefaultTails()
    this.commit.live?.write(replay.watermark)
    this.commit.live?.syncNow()
    // Not for prepared entries the file in place merely shares a lineage with: that file may say more.
    const named = keep && !sameFile ? undefined : plan?.entries.length
    if (named !== undefined && this.cleanOpened === named && this.logs.size === named) this.heads.inPlaceIsCurrent()
    this.heads.start()
  }

  /** Resolves whether the plan named other files than those in place for any log (its entries were of no use for it). */
  private async load(plan: HeadsPlan | undefined, prepared: PreparedLogs, started?: StatParts): Promise<boolean> {
    const loaded = await loadLogs(
      { fs: this.fs, root: this.root, fds: this.fds, durable: this.commit.durableLsn, logHost: this.commit, trash: this.trash, statFiles: this.options.statFiles, emitError: (err) => this.emitError(err) },
      plan,
      prepared,
      started,
    )
    this.logs = loaded.logs
    this.quarantined.push(...loaded.quarantined)
    this.cleanOpened = loaded.cleanOpened
    // The heads file names logs deleted before the crash (or set aside now): as if deleted in this run.
    for (const id of loaded.gone) this.heads.deletedLog(id)
    return loaded.mismatched > 0
  }

  /**
   * Touches the start of the tail reserve (`FileStoreOptions.prefaultTails`),
   * a step per turn of the event loop (tail-arena.ts) while the store serves:
   * for a writer that opens with the option off and calls this once its own
   * start-up is done, so the steps do not slow it. Resolves when done (or
   * stopped by a later call, which starts over, or by the close).
   */
  prefaultTails(): Promise<void> {
    return this.arena.prefault(Math.max(DEFAULT_ARENA_RESERVE_BYTES, this.logs.size * PREFAULT_PER_LOG_BYTES))
  }

  get durableLsn(): bigint {
    return this.commit.durableLsn
  }

  /** Logs currently open in the writer. */
  get size(): number {
    return this.logs.size
  }

  /** The last flush error, cleared by the next successful flush. */
  get lastError(): StorageError | undefined {
    return this.commit.lastError
  }

  createShape(id: string, options?: { meta?: Uint8Array }): SnapshotWriter {
    this.ensureOpen()
    checkShapeId(id)
    if (this.logs.has(id) || this.creating.has(id)) throw new StorageError('shape_exists', `shape ${id} already exists`)
    const tmpDir = `${this.root}/tmp/${id}.${process.pid}.${++this.tmpCounter}.${randomBytes(3).toString('hex')}`
    const meta = options?.meta ?? new Uint8Array()
    makeShapeDir(this.fs, tmpDir, id, meta)
    this.creating.add(id)
    this.heads.creating(id)
    return snapshotWriter(this.snapshotHost, id, tmpDir, meta)
  }

  /** Makes a registered new log visible to `get` and `ids`. */
  private reveal(log: FileShapeLog): void {
    if (!this.creating.delete(log.id)) return
    this.logs.set(log.id, log)
  }

  get(id: string): FileShapeLog | undefined {
    return this.logs.get(id)
  }

  ids(): string[] {
    return [...this.logs.keys()]
  }

  finishedLogs(): Iterable<FileShapeLog> {
    return this.logs.values()
  }

  async deleteShape(id: string): Promise<boolean> {
    this.ensureOpen()
    const log = this.logs.get(id)
    if (!log) return false
    this.logs.delete(id)
    this.heads.deletedLog(id)
    if (log.registered) this.journal?.tombstone(log.id)
    log.deleted = true
    this.commit.forget(log)
    log.retire()
    try {
      this.trash.discard(log.dir, id)
      // In the same turn as the rename: no creation can refill the bucket in between.
      await dropBucketIfEmpty(this.fs, this.root, id)
    } catch (err) {
      throw fromSystemError(err, `delete shape ${id}`)
    }
    return true
  }

  advance(lsn: bigint): void {
    this.commit.advance(lsn)
  }

  onFlush(listener: (result: FlushResult) => void, options?: FlushListenerOptions): () => void {
    return this.commit.onFlush(listener, options)
  }

  /**
   * Cuts every log back to what the watermark covers, for a caller about to
   * deliver again everything above it (see `GroupCommit.rollbackToDurable`).
   */
  rollbackToDurable(): Promise<number> {
    this.ensureOpen()
    return this.commit.rollbackToDurable(this.logs.values())
  }

  async flush(): Promise<FlushResult> {
    this.ensureOpen()
    return this.commit.flush(true)
  }

  /**
   * Writes the heads file now (heads-snapshots.ts), as the writer does every
   * `headsIntervalMs` when something changed: an open after a crash then scans
   * only the logs appended to since.
   */
  writeHeads(): Promise<void> {
    this.ensureOpen()
    return this.heads.write(true)
  }

  /** Errors of background work (timed flushes, trash removal, quarantined logs). */
  onError(listener: (err: StorageError) => void): () => void {
    this.errorListeners.add(listener)
    return () => this.errorListeners.delete(listener)
  }

  private emitError(err: StorageError): void {
    for (const listener of this.errorListeners) listener(err)
  }

  /**
   * Called with true when the write-behind tails pass `tailBudgetBytes`: the
   * writer should stop appending (a replication stream pauses) while a
   * checkpoint writes them back, and with false once they are under half of
   * it. Appends are still taken meanwhile; this is advice, not a refusal.
   */
  onPressure(listener: (held: boolean) => void): () => void {
    return this.checkpointer.onPressure(listener)
  }

  /**
   * Undefined when what the store makes durable keeps up with the appends;
   * else a promise that resolves once it has caught up: the write-backs of
   * logs whose tails passed BACKLOG_BYTES (one huge transaction into one
   * shape, appended faster than a write-back lands), and a slow flush while
   * the next journal group has gathered twice the flush threshold. A writer
   * waits on it between batches of a big transaction, as on `onPressure`, so
   * neither a tail nor a journal group grows with the transaction.
   */
  backlog(): Promise<void> | undefined {
    return this.commit.backlog()
  }

  /** Whether the writer is asked to hold back now (see `onPressure`). */
  get underPressure(): boolean {
    return this.checkpointer.underPressure
  }

  /** The checkpoint running now, or else the last one. */
  get checkpointStats(): Readonly<CheckpointStats> {
    return this.checkpointer.stats
  }

  /**
   * Gives back memory kept for a busy stream that an idle one does not need:
   * the journal's group buffers grown by a huge flush. The server calls it
   * when it goes idle after a large transaction; the next big group grows them
   * again.
   */
  shedMemory(): void {
    this.journal?.shedMemory()
  }

  stats(): FileStoreStats {
    return {
      logs: this.logs.size,
      journalSegments: this.journal?.segmentCount ?? 0,
      journalBufferBytes: this.journal?.bufferBytes ?? 0,
      tailBytes: this.arena.bytesInUse,
      tailMemoryBytes: this.arena.slabBytes,
      underPressure: this.checkpointer.underPressure,
      pressures: this.checkpointer.pressures,
      checkpoint: this.checkpointer.stats,
    }
  }

  private ensureOpen(): void {
    if (this.closed) throw new StorageError('store_closed')
    if (this.unlock === undefined) throw new StorageError('store_not_promoted')
  }

  /**
   * Flushes, checkpoints, writes the heads file and releases the store. A
   * later call waits for the first (and, as before, does not repeat its error):
   * two closes side by side would both write the heads file, the second
   * possibly after a new writer had taken it.
   */
  close(): Promise<void> {
    if (this.closing !== undefined) return this.closing.then(() => undefined, () => undefined)
    this.closing = this.closeOnce()
    return this.closing
  }

  private async closeOnce(): Promise<void> {
    if (this.closed) return
    if (this.unlock === undefined) {
      // Prepared, never promoted: nothing was written, nothing is held.
      this.closed = true
      for (const log of this.logs.values()) log.retire()
      this.logs.clear()
      return
    }
    let error: unknown
    try {
      await this.commit.flush()
    } catch (err) {
      error = err
    }
    // No timed flush may write the journal while the checkpoint below deletes it.
    this.closed = true
    this.commit.stop()
    this.arena.stopPrefault()
    // Nothing is appended any more: whoever was held back need not wait.
    this.checkpointer.stop()
    await this.heads.stop()
    if (this.journal) {
      // A clean shutdown leaves nothing to replay.
      try {
        await this.journal.running?.catch(() => undefined)
        await this.checkpointer.checkpoint(true)
      } catch (err) {
        error ??= err
      }
      this.journal.close()
      await this.commit.live?.close()
    }
    this.commit.snapshots.rejectAll(new StorageError('store_closed'))
    if (error === undefined) {
      // Last, so that it describes every log as the next open finds it: nothing is scanned.
      try {
        await this.heads.write(false)
      } catch (err) {
        error = err
      }
    }
    for (const log of this.logs.values()) log.retire()
    this.logs.clear()
    this.unlock?.()
    if (error) throw error
  }
}

const ZERO_WATERMARK = { lsn: 0n, sequence: 0n }

/** The store's directories, made if missing (harmless beside a writer: it made them too). */
function makeStoreDirs(options: FileStoreOptions): { fs: FsPort; root: string } {
  const fs = options.fs ?? nodeFs
  const root = options.dir
  if (options.chunkBytes !== undefined && !(options.chunkBytes >= 1)) throw new RangeError('chunkBytes must be at least 1')
  try {
    for (const sub of ['', '/shapes', '/tmp', '/trash', '/quarantine', '/journal']) fs.mkdirSync(`${root}${sub}`, { recursive: true })
  } catch (err) {
    throw fromSystemError(err, `create store directory ${root}`)
  }
  return { fs, root }
}

/** Opens (creating if needed) a file store for writing. */
export function openFileLogStore(options: FileStoreOptions): Promise<FileLogStore> {
  return FileLogStore.open(options)
}
