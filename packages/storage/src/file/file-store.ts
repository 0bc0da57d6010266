/**
 * The file engine's store: shape directories, snapshots, group commit and the
 * durable watermark. Layout and byte formats: `format.ts`.
 *
 * Group commit. With the journal, an append records its bytes and entry
 * records in the journal's group being built and keeps them in memory (the
 * log's tail); without it, appends write to the page cache and mark their log
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
 *      instead), and finish pending snapshots (sync, rename into shapes/,
 *      sync the directory);
 *   3. with the journal, overwrite `watermark.live` for followers (the
 *      watermark file itself moves at checkpoints); without it, publish the
 *      watermark file atomically;
 *   4. move each log's published head to its last transaction covered by the
 *      watermark and appended before step 1, and tell listeners. Lazily
 *      unless a listener or the caller of `flush()` asks which logs moved:
 *      the flush then only records its watermark and sequence number, and
 *      each log catches up when it is next read or appended to.
 *
 * New logs. A log being built lives in tmp/ and is not in the dirty or
 * unpublished sets: the flush that finishes it syncs it (everything appended
 * so far, live transactions included), renames it into shapes/ and registers
 * it, publishing the snapshot and the complete transactions that the sync
 * covered and the watermark covers. Its transactions may lie at or below the
 * watermark, so the rename waits for a later flush while one of those is open
 * or arrived after the sync, and from the rename on the log refuses new ones
 * (`floor`): no record at or below a published watermark is ever unsynced in
 * shapes/, which recovery and read-only followers rely on.
 *
 * A failed sync loses nothing acknowledged: the watermark stays, the failed
 * logs drop their unpublished entries (the kernel may have dropped those pages,
 * so their bytes can no longer be trusted), `advance` falls back to the
 * watermark, and the caller replays from there; replays are idempotent.
 */
import { randomBytes } from 'node:crypto'
import type { FlushListenerOptions, FlushResult, ShapeLogStore, SnapshotWriter } from '../contract.js'
import { FlushError, StorageError, fromSystemError } from '../errors.js'
import { FdCache, FileRef } from './fd-cache.js'
import { FileShapeLog } from './file-log.js'
import type { LogHost } from './log-host.js'
import { LOG_FILES } from '../defaults.js'
import { DEFAULT_CHUNK_BYTES, checkShapeId } from '../defaults.js'
import { CHUNK_RECORD_BYTES, ENTRY_RECORD_BYTES, HEADER_BYTES, decodeMeta, encodeHeader, encodeMeta } from '../format.js'
import type { Watermark } from '../format.js'
import { defaultMaxOpenFiles } from '../open-file-limit.js'
import type { FsPort } from '../fs-port.js'
import { nodeFs, writeFully } from '../fs-port.js'
import { EMPTY_HEAD } from './log-state.js'
import type { HeadState } from './log-state.js'
import { DEFAULT_ARENA_RESERVE_BYTES, TailArena } from './tail-arena.js'
import { forEachConcurrently } from '../concurrently.js'
import { recoverLog } from './recovery.js'
import { acquireStoreLock } from './store-lock.js'
import { Journal, JournalCommitError } from './journal.js'
import { listSegments, replayJournal } from './journal-replay.js'
import type { CleanLog } from './heads-file.js'
import { takeHeads, writeHeads } from './heads-file.js'
import { LiveWatermark, publishWatermark, readWatermark, syncDirectory } from './watermark.js'
import { PortWriter, writeBackThread } from './write-back.js'
import type { FileWriter } from './write-back.js'

/** The checkpoint running now, or else the last one (all zero before the first). */
export interface CheckpointStats {
  running: boolean
  /** Logs named in the checkpoint's segments. */
  logs: number
  /** Of those, how many are done (written back; and synced, file by file, without syncfs). */
  writtenBack: number
  /** With syncfs: from the start until every log was written back (zero file by file). */
  writeBackMs: number
  /** The syncfs (file by file: the whole checkpoint). */
  syncMs: number
  totalMs: number
  /** How: one syncfs for the store, or an fdatasync per file. */
  syncfs: boolean
}

/** What `FileLogStore.stats()` reports: for metrics and diagnosis. */
export interface FileStoreStats {
  readonly logs: number
  /** Journal segments on disk, the current one included (at most one when no checkpoint is due). */
  readonly journalSegments: number
  /** Bytes of write-behind tails and staged index records in memory (what `tailBudgetBytes` bounds). */
  readonly tailBytes: number
  /** Memory held for them (the tail arena's slabs, resident once touched). */
  readonly tailMemoryBytes: number
  /** The writer is asked to hold back (`onPressure`), and how many times it was since open. */
  readonly underPressure: boolean
  readonly pressures: number
  readonly checkpoint: Readonly<CheckpointStats>
}

/** The inode of each of a log's files, as a stat at open found them. */
interface FileInodes {
  readonly data: number
  readonly entries: number
  readonly chunks: number
}

/** Tuning knobs of the file engine. Every one has a production default. */
export interface FileStoreOptions {
  readonly dir: string
  /** A chunk closes after the entry that makes it reach this many bytes. */
  readonly chunkBytes?: number
  /** Longest time appended data waits for a flush. */
  readonly flushIntervalMs?: number
  /** Dirty bytes that trigger a flush before the interval ends. */
  readonly flushBytes?: number
  /** Bound of the file-descriptor LRU (three files per log in use). */
  readonly maxOpenFiles?: number
  /**
   * Group commit through the store-wide journal (one fdatasync per flush);
   * false syncs every dirty log's files on every flush instead.
   */
  readonly journal?: boolean
  /**
   * A journal segment is checkpointed (its logs synced, then it is deleted)
   * past this size, or later while it names many logs (up to 4x; journal.ts
   * `closeDue`)...
   */
  readonly journalSegmentBytes?: number
  /** ... or this age (with the same allowance, up to 10x). */
  readonly journalSegmentAgeMs?: number
  /**
   * Memory reserved at open for write-behind tails and staged index records
   * (tail-arena.ts): address space, resident only as it is used; more is
   * added in 4 MiB slabs when it runs out. Default: the tail budget (at least
   * 64 MiB, at most 1 GiB), so that tails within the budget never grow the
   * arena (each growth counts as V8 external memory, and enough of it starts
   * a full collection of the whole heap). The price: a page of the reserve
   * stays resident once a burst has touched it (slabs past the reserve go
   * back after the next checkpoint, the reserve never), and under strict
   * overcommit (vm.overcommit_memory=2) the whole reserve is committed at
   * open; set a smaller reserve where that matters.
   */
  readonly tailReserveBytes?: number
  /**
   * Touch the start of the reserve at open (tail-arena.ts `prefault`): 64
   * MiB, or 1,280 bytes per log the store opened with if that is more (a
   * first tail block of 1 KiB, twice a first append of a few hundred bytes,
   * and a first block of staged index records, 256 bytes: what every log that
   * takes a change holds until its next write-back). They become resident at
   * once, and appends into them never wait on a page fault (about 15 µs per
   * 4 KiB page on the benchmark VM: with 100k logs, 0.2 s of the first
   * seconds after an open). For a long-running writer; off by default (tests
   * open many small stores).
   */
  readonly prefaultTails?: boolean
  /**
   * Write-behind tails leave memory through a checkpoint (a hot log's also
   * through its own write-backs). Past half this many bytes of them the
   * current journal segment is closed early and checkpointed; past all of it
   * the store asks its writer to hold back (`onPressure`) until a checkpoint
   * has brought them under half.
   */
  readonly tailBudgetBytes?: number
  /**
   * Write-backs on the process's write-back thread (write-back.ts); the
   * default with the real file system. Otherwise through `fs` on the thread
   * pool (a port other than the real file system cannot be used from the
   * thread).
   */
  readonly writeBackThread?: boolean
  readonly fs?: FsPort
}

// Short enough that live readers barely notice the wait for durability, long
// enough that a busy stream shares each sync among many transactions.
export const DEFAULT_FLUSH_INTERVAL_MS = 10
export const DEFAULT_FLUSH_BYTES = 8 * 1024 * 1024
export const DEFAULT_MAX_OPEN_FILES = defaultMaxOpenFiles()
// Replay after a crash reads about this much (up to 4x with many logs: see
// closeDue in journal.ts); a checkpoint syncs the logs of a segment once, so
// bigger segments mean fewer, larger checkpoints.
export const DEFAULT_JOURNAL_SEGMENT_BYTES = 64 * 1024 * 1024
// Bounds how long a quiet store keeps a journal to replay (up to 10x with many logs).
export const DEFAULT_JOURNAL_SEGMENT_AGE_MS = 30_000
// Large enough that a segment's own size, not memory, ends it (a stream to
// 100k logs holds ~220 MiB of tails then, ~370 MiB while its checkpoint runs):
// the budget decides how many changes a log gathers between two write-backs,
// each of which costs system calls on two files. Sealing early at half of a
// smaller budget wrote back ~2 changes per log and lost the keep-up load on
// shared cores (storage README, write-behind). With fewer logs the tails stay
// near what a segment holds, far below it.
export const DEFAULT_TAIL_BUDGET_BYTES = 1024 * 1024 * 1024
// The default reserve follows the budget up to here; a bigger budget grows the arena in slabs past it.
const MAX_TAIL_RESERVE_BYTES = 1024 * 1024 * 1024
/** What `prefaultTails` touches per log (see there). */
const PREFAULT_PER_LOG_BYTES = 1280
// While the writer is held back and a checkpoint failed: when to try again.
const PRESSURE_RETRY_MS = 1000


// Longest wait between retries of a failing timed flush.
const MAX_RETRY_MS = 250

const NO_CHECKPOINT: Readonly<CheckpointStats> = Object.freeze({ running: false, logs: 0, writtenBack: 0, writeBackMs: 0, syncMs: 0, totalMs: 0, syncfs: false })

// Enough to keep every thread-pool worker and the device queue busy.
const MAX_CONCURRENT_SYNCS = 64
// Logs a checkpoint writes back as one job list (`FileShapeLog.writeBackMany`): a batch's worth for the write-back thread.
const CHECKPOINT_RUN = 256


interface FinishingSnapshot {
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

export class FileLogStore implements ShapeLogStore, LogHost {
  readonly readOnly = false
  readonly fds: FdCache
  readonly writer: FileWriter
  readonly chunkBytes: number
  readonly arena: TailArena
  private readonly flushIntervalMs: number
  private readonly flushBytes: number
  private readonly logs = new Map<string, FileShapeLog>()
  private readonly creating = new Set<string>()
  /*
   * The logs appended to since the last flush: a reused array with a mark on
   * each member, not a Set. A Set emptied and refilled every flush grows new
   * hash tables as it refills; they outlive a scavenge (a flush awaits its
   * fdatasync), so they are promoted and left for a full collection of the
   * whole heap to find dead. In a profile of what outlived a scavenge (eq10k
   * bench, 100-row transactions), Set.add under append was the largest item of
   * the append path. Two lists take turns, so appends during a flush never
   * touch the list it works through.
   */
  private dirty: Array<FileShapeLog | undefined> = []
  private dirtySpare: Array<FileShapeLog | undefined> = []
  private dirtyCount = 0
  /**
   * Registered logs with a transaction end waiting to be published, each once
   * (`FileShapeLog.unpublishedSlot` is its index; holes where one was taken
   * out). A list, not a Set: an append adds its log and a flush takes out those
   * it published, and with a Set that churn rebuilt its hash table over and
   * over, tables that at 100k logs outlived scavenges. Its length only grows
   * (`unpublishedCount` are in use): cutting `length` after each publish
   * trimmed the array's store, and the appends before the next flush grew it
   * again, a new young copy at every step.
   */
  private unpublished: Array<FileShapeLog | undefined> = []
  private unpublishedCount = 0
  private readonly faults = new Map<FileShapeLog, bigint>()
  private finishing: FinishingSnapshot[] = []
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
  private flushing: Promise<FlushResult> | undefined
  private readonly listeners = new Set<(r: FlushResult) => void>()
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
  private readonly errorListeners = new Set<(err: StorageError) => void>()
  private readonly pressureListeners = new Set<(held: boolean) => void>()
  private readonly tailBudget: number
  /** The writer is asked to hold back (see `onPressure`). */
  private pressured = false
  /** Times the writer was asked to hold back since open. */
  private pressures = 0
  private pressureRetry: NodeJS.Timeout | undefined
  /** A background checkpoint runs (`startCheckpoint`). */
  private checkpointing = false
  private closed = false
  private closing: Promise<void> | undefined
  private tmpCounter = 0
  /** Timed flushes failed in a row; spaces out the retries. */
  private failedFlushes = 0
  /** Checkpoints sync with one syncfs: unknown until the first, false where the port or system cannot. */
  private wholeSync: boolean | undefined
  /** Set by a failed checkpoint sync: no checkpoint runs again (see `breakSync`). */
  private syncBroken: StorageError | undefined
  /** The last flush error, cleared by the next successful flush. */
  lastError: StorageError | undefined
  /** Logs opened from the heads file a clean close left, without scanning their files. */
  cleanOpened = 0
  /** Ids of logs that failed to open and were moved to quarantine/. */
  readonly quarantined: string[] = []
  readonly journal: Journal<FileShapeLog> | undefined
  /** Logs whose files the journal does not fully cover: the next flush syncs them as a whole. */
  private readonly syncNext = new Set<FileShapeLog>()
  /** Followers' notice of the watermark (journal mode only). */
  private readonly live: LiveWatermark | undefined
  /**
   * A journal group may hold a watermark this store did not keep (its commit
   * or a sync beside it failed): the next group must publish the real one,
   * since replay takes the last (journal-format.ts).
   */
  private republish = false

  private constructor(
    readonly fs: FsPort,
    readonly root: string,
    options: FileStoreOptions,
    watermark: { lsn: bigint; sequence: bigint },
    private readonly unlock: () => void,
    nextGeneration: number,
  ) {
    this.journal =
      options.journal === false
        ? undefined
        : new Journal(fs, root, nextGeneration, {
            segmentBytes: options.journalSegmentBytes ?? DEFAULT_JOURNAL_SEGMENT_BYTES,
            segmentAgeMs: options.journalSegmentAgeMs ?? DEFAULT_JOURNAL_SEGMENT_AGE_MS,
          })
    this.live = this.journal ? new LiveWatermark(fs, root, (err) => this.emitError(err)) : undefined
    this.fds = new FdCache(fs, options.maxOpenFiles ?? DEFAULT_MAX_OPEN_FILES)
    this.writer = (options.writeBackThread ?? fs === nodeFs) ? writeBackThread() : new PortWriter(fs, this.fds)
    // Without the journal nothing waits for a write-back: only staged records use the arena.
    this.tailBudget = options.tailBudgetBytes ?? DEFAULT_TAIL_BUDGET_BYTES
    this.arena = new TailArena(options.tailReserveBytes ?? (this.journal ? Math.min(Math.max(DEFAULT_ARENA_RESERVE_BYTES, this.tailBudget), MAX_TAIL_RESERVE_BYTES) : 0))
    this.chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES
    this.flushIntervalMs = options.flushIntervalMs ?? DEFAULT_FLUSH_INTERVAL_MS
    this.flushBytes = options.flushBytes ?? DEFAULT_FLUSH_BYTES
    this.durable = watermark.lsn
    this.lastPublishedLsn = watermark.lsn
    this.advanced = watermark.lsn
    this.sequence = watermark.sequence
  }

  static async open(options: FileStoreOptions): Promise<FileLogStore> {
    const fs = options.fs ?? nodeFs
    const root = options.dir
    if (options.chunkBytes !== undefined && !(options.chunkBytes >= 1)) throw new RangeError('chunkBytes must be at least 1')
    try {
      for (const sub of ['', '/shapes', '/tmp', '/trash', '/quarantine', '/journal']) fs.mkdirSync(`${root}${sub}`, { recursive: true })
    } catch (err) {
      throw fromSystemError(err, `create store directory ${root}`)
    }
    const unlock = acquireStoreLock(fs, root)
    try {
      let watermark = readWatermark(fs, root)
      if (!watermark) {
        watermark = { lsn: 0n, sequence: 0n }
        await publishWatermark(fs, root, watermark)
      }
      // Taken (and removed for good) before anything changes a log, replay included.
      const heads = await takeHeads(fs, root, watermark.lsn)
      // Before any log is opened: recovery's cut relies on the files holding
      // everything the watermark covers. Replayed whatever `journal` says now,
      // since the last run may have journaled.
      const segments = listSegments(fs, root).length
      const replay = await replayJournal(fs, root, watermark)
      const store = new FileLogStore(fs, root, options, replay.watermark, unlock, replay.nextGeneration)
      // A clean close leaves no journal: with one, the heads file does not describe these files.
      await store.load(segments === 0 ? heads : undefined)
      if (options.prefaultTails === true) store.arena.prefault(Math.max(DEFAULT_ARENA_RESERVE_BYTES, store.logs.size * PREFAULT_PER_LOG_BYTES))
      store.live?.write(replay.watermark)
      return store
    } catch (err) {
      unlock()
      throw err
    }
  }

  /** `clean`: the heads a clean close left (heads-file.ts); logs listed there are opened without scanning their files. */
  private async load(clean: Map<string, CleanLog> | undefined): Promise<void> {
    // Unfinished snapshots never became shapes: drop them.
    for (const name of this.fs.readdirSync(`${this.root}/tmp`)) {
      await this.fs.rm(`${this.root}/tmp/${name}`, { recursive: true, force: true })
    }
    this.emptyTrash()
    for (const id of this.fs.readdirSync(`${this.root}/shapes`)) {
      const dir = `${this.root}/shapes/${id}`
      try {
        checkShapeId(id)
        const known = clean?.get(id)
        const inodes = known === undefined ? undefined : this.cleanInodes(known.head, dir)
        this.logs.set(id, inodes !== undefined ? this.openClean(known!, dir, inodes) : await this.openLog(id, dir))
      } catch (err) {
        if (!(err instanceof StorageError) || (err.code !== 'corrupt_log' && err.code !== 'invalid_shape_id' && err.code !== 'unsupported_format')) {
          throw err
        }
        // A damaged log must not stop every other shape from being served; keep
        // it aside for inspection and let the server recreate the shape.
        this.fs.renameSync(dir, `${this.root}/quarantine/${id}.${Date.now()}`)
        this.quarantined.push(id)
        this.emitError(err)
      }
    }
  }

  private async openLog(id: string, dir: string): Promise<FileShapeLog> {
    let meta: Buffer
    try {
      const decoded = decodeMeta(this.fs.readFileSync(`${dir}/${LOG_FILES.meta}`))
      if (typeof decoded === 'string') throw new StorageError('corrupt_log', `shape ${id}: meta.bin is damaged (${decoded})`)
      meta = decoded
    } catch (err) {
      if (err instanceof StorageError) throw err
      throw new StorageError('corrupt_log', `shape ${id}: cannot read meta.bin`, { cause: err })
    }
    const log = new FileShapeLog(id, dir, meta, this, [], EMPTY_HEAD)
    try {
      const found = await recoverLog(this.fs, this.fds, id, dir, this.durable, {
        data: log.data,
        entries: log.entries,
        chunks: log.chunkFile,
      })
      log.restore(found.head, found.chunks)
      log.registered = true
      return log
    } catch (err) {
      log.retire()
      throw err
    }
  }

  /** Writes every log's head for the next open (heads-file.ts); logs that cannot vouch for their files are left out. */
  private async writeCleanHeads(): Promise<void> {
    const clean: CleanLog[] = []
    for (const log of this.logs.values()) {
      const state = log.cleanState()
      if (state !== undefined) clean.push({ id: log.id, meta: log.meta, head: state.head, chunks: state.chunks })
    }
    await writeHeads(this.fs, this.root, this.durable, clean)
  }

  /**
   * The inodes of the log's files when they are the sizes its clean head gives (else undefined): a stat per
   * file, no open. Catches a file truncated, replaced or restored from a backup
   * while the server was down (the log is then scanned like after a crash, and
   * set aside if damaged); bytes rewritten in place at the same size are not
   * looked for here, as a scan would look only at headers and the last records.
   */
  private cleanInodes(head: HeadState, dir: string): FileInodes | undefined {
    try {
      const data = this.fs.statSync(`${dir}/${LOG_FILES.data}`)
      const entries = this.fs.statSync(`${dir}/${LOG_FILES.entries}`)
      const chunks = this.fs.statSync(`${dir}/${LOG_FILES.chunks}`)
      const match =
        data.size === head.dataEnd &&
        entries.size === HEADER_BYTES + head.entries * ENTRY_RECORD_BYTES &&
        chunks.size === HEADER_BYTES + head.closedChunks * CHUNK_RECORD_BYTES
      return match ? { data: data.ino, entries: entries.ino, chunks: chunks.ino } : undefined
    } catch {
      return undefined
    }
  }

  private openClean(known: CleanLog, dir: string, inodes: FileInodes): FileShapeLog {
    const log = new FileShapeLog(known.id, dir, known.meta, this, [...known.chunks], known.head)
    // Known from the start, so no write (on the write-back thread, by path) lands in another file put at the same path.
    log.data.ino = inodes.data
    log.entries.ino = inodes.entries
    log.chunkFile.ino = inodes.chunks
    log.registered = true
    this.cleanOpened++
    return log
  }

  private emptyTrash(): void {
    for (const name of this.fs.readdirSync(`${this.root}/trash`)) {
      this.fs.rm(`${this.root}/trash/${name}`, { recursive: true, force: true }).catch((err: unknown) => {
        this.emitError(fromSystemError(err, `remove ${name} from trash`))
      })
    }
  }

  get durableLsn(): bigint {
    return this.durable
  }

  /** Logs currently open in the writer. */
  get size(): number {
    return this.logs.size
  }

  createShape(id: string, options?: { meta?: Uint8Array }): SnapshotWriter {
    this.ensureOpen()
    checkShapeId(id)
    if (this.logs.has(id) || this.creating.has(id)) throw new StorageError('shape_exists', `shape ${id} already exists`)
    const tmpDir = `${this.root}/tmp/${id}.${process.pid}.${++this.tmpCounter}.${randomBytes(3).toString('hex')}`
    const meta = options?.meta ?? new Uint8Array()
    try {
      this.fs.mkdirSync(tmpDir, { recursive: true })
      const files: Array<[string, Buffer]> = [
        [LOG_FILES.data, encodeHeader('log')],
        [LOG_FILES.entries, encodeHeader('entries')],
        [LOG_FILES.chunks, encodeHeader('chunks')],
        [LOG_FILES.meta, encodeMeta(meta)],
      ]
      for (const [name, bytes] of files) {
        const fd = this.fs.openSync(`${tmpDir}/${name}`, 'wx', 0o644)
        try {
          writeFully(this.fs, fd, bytes, bytes.length, 0)
        } finally {
          this.fs.closeSync(fd)
        }
      }
    } catch (err) {
      void this.fs.rm(tmpDir, { recursive: true, force: true }).catch(() => {})
      throw fromSystemError(err, `create shape ${id}`)
    }
    this.creating.add(id)
    // A copy of its own exact size: a pooled Buffer would keep a whole 8 KiB slab alive per log.
    const log = new FileShapeLog(id, tmpDir, Uint8Array.prototype.slice.call(meta), this, [], EMPTY_HEAD)
    // open: rows; finishing: finish() called, live appends allowed; published:
    // renamed into shapes/ (the log's floor is set); resolved or dropped: settled.
    // ended: snapshot-end written, live appends allowed, finish() not called yet.
    let state: 'open' | 'ended' | 'finishing' | 'published' | 'resolved' | 'dropped' = 'open'
    let finishing: FinishingSnapshot | undefined
    let settled: Promise<unknown> = Promise.resolve()
    const drop = async (): Promise<void> => {
      state = 'dropped'
      log.deleted = true
      this.creating.delete(id)
      this.forget(log)
      log.retire()
      await this.fs.rm(tmpDir, { recursive: true, force: true })
    }
    /** An append after the snapshot, by the writer's state (see SnapshotWriter.appendTransaction). */
    const guarded = (append: () => number): number => {
      if (state === 'open') throw new StorageError('invalid_append', `shape ${id}: live entries follow the snapshot; call endSnapshot() or finish() first`)
      if (state === 'dropped') throw new StorageError('invalid_append', `snapshot of shape ${id} was aborted or failed`)
      if (state === 'ended') {
        try {
          return append()
        } catch (err) {
          // As in the finishing window: a failed write fails the snapshot.
          if (err instanceof StorageError && err.code !== 'invalid_append') void drop()
          throw err
        }
      }
      if (state !== 'finishing') return append()
      try {
        return append()
      } catch (err) {
        // A failed write here cannot hold the watermark back (the transaction
        // may lie below it already), so it fails the snapshot, as a failed
        // row append does. Invalid input leaves the log as it was.
        if (err instanceof StorageError && err.code !== 'invalid_append') finishing!.reject(err)
        throw err
      }
    }
    return {
      append: (rows) => {
        if (state !== 'open') throw new StorageError('invalid_append', `snapshot of shape ${id} is ${state}`)
        try {
          log.appendSnapshot(rows)
        } catch (err) {
          void drop()
          throw err
        }
      },
      endSnapshot: (snapshotEnd) => {
        if (state !== 'open') throw new StorageError('invalid_append', `snapshot of shape ${id} is ${state}`)
        try {
          log.appendSnapshot([], snapshotEnd)
        } catch (err) {
          void drop()
          throw err
        }
        state = 'ended'
      },
      finish: (snapshotEnd) => {
        if (state === 'open' && snapshotEnd !== undefined) {
          try {
            log.appendSnapshot([], snapshotEnd)
          } catch (err) {
            return drop().then(() => Promise.reject(err))
          }
        } else if (state !== 'ended' || snapshotEnd !== undefined) {
          const why = state === 'open' ? 'finish() needs the snapshot-end line' : `snapshot of shape ${id} is ${state}`
          return Promise.reject(new StorageError('invalid_append', why))
        }
        state = 'finishing'
        const done = new Promise<FileShapeLog>((resolve, reject) => {
          finishing = {
            log,
            meta: new FileRef(`${tmpDir}/${LOG_FILES.meta}`, 'r'),
            tmpDir,
            prepared: false,
            aborted: false,
            syncSeq: 0,
            syncedEnds: undefined,
            renamed: () => {
              state = 'published'
            },
            resolve: (l) => {
              state = 'resolved'
              resolve(l)
            },
            reject: (err) => {
              if (state === 'resolved' || state === 'dropped') return
              void drop().finally(() => reject(err))
            },
            abandon: (err) => {
              state = 'dropped'
              reject(err)
            },
          }
          this.finishing.push(finishing)
          this.schedule(true)
        })
        settled = done.catch(() => undefined)
        return done
      },
      appendTransaction: (entries, options) => guarded(() => log.appendTransaction(entries, options)),
      appendLines: (tx, ops, jsons, count, options) => guarded(() => log.appendLines(tx, ops, jsons, count, options)),
      abort: async () => {
        if (state === 'open' || state === 'ended') return drop()
        if (state !== 'finishing' && state !== 'published') return
        const f = finishing!
        f.aborted = true
        const queued = this.finishing.indexOf(f)
        if (queued >= 0) {
          // No flush has it yet.
          this.finishing.splice(queued, 1)
          f.reject(new StorageError('shape_deleted', `snapshot of shape ${id} was aborted`))
        }
        await settled
        // A flush registered the log before it saw the abort: remove it like any other.
        if (this.logs.get(id) === log) await this.deleteShape(id)
      },
    }
  }

  /** Makes a registered new log visible to `get` and `ids`. */
  private reveal(log: FileShapeLog): void {
    if (!this.creating.delete(log.id)) return
    this.logs.set(log.id, log)
  }

  /** Takes a log out of the store's flush bookkeeping. */
  private forget(log: FileShapeLog): void {
    log.registered = false
    // Its entry in the dirty list stays behind and is skipped (registered is false).
    log.dirtyMark = false
    this.dropUnpublished(log)
    this.faults.delete(log)
  }

  get(id: string): FileShapeLog | undefined {
    return this.logs.get(id)
  }

  ids(): string[] {
    return [...this.logs.keys()]
  }

  async deleteShape(id: string): Promise<boolean> {
    this.ensureOpen()
    const log = this.logs.get(id)
    if (!log) return false
    this.logs.delete(id)
    if (log.registered) this.journal?.tombstone(log.journalId)
    log.deleted = true
    this.forget(log)
    log.retire()
    const trashed = `${this.root}/trash/${id}.${Date.now()}.${randomBytes(3).toString('hex')}`
    try {
      this.fs.renameSync(log.dir, trashed)
      await syncDirectory(this.fs, `${this.root}/shapes`)
    } catch (err) {
      throw fromSystemError(err, `delete shape ${id}`)
    }
    this.fs.rm(trashed, { recursive: true, force: true }).catch((err: unknown) => {
      this.emitError(fromSystemError(err, `remove deleted shape ${id}`))
    })
    return true
  }

  advance(lsn: bigint): void {
    if (lsn <= this.advanced) return
    this.advanced = lsn
    this.schedule(false)
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

  /** Errors of background work (timed flushes, trash removal, quarantined logs). */
  onError(listener: (err: StorageError) => void): () => void {
    this.errorListeners.add(listener)
    return () => this.errorListeners.delete(listener)
  }

  async flush(): Promise<FlushResult> {
    this.ensureOpen()
    return this.flushInternal(true)
  }

  /** `named`: the caller reads the result's `advanced` (a `flush()` call): the flush finds the logs that moved even without listeners for them. */
  private async flushInternal(named = false): Promise<FlushResult> {
    // A flush already running may have started before the caller's appends:
    // wait for it, then run one of our own.
    while (this.flushing) await this.flushing.catch(() => undefined)
    const run = this.runFlush(named)
    this.flushing = run
    try {
      return await run
    } finally {
      this.flushing = undefined
    }
  }

  private async runFlush(named: boolean): Promise<FlushResult> {
    const started = performance.now()
    if (this.timer) {
      clearTimeout(this.timer)
      this.timer = undefined
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
    // visit per dirty log, not a second pass (with 100k logs, by the time a
    // second pass came back to a log it had left the cache).
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
    const snapshots = this.finishing
    this.finishing = []

    let journalFailed = false
    if (journal) {
      const whole = [...this.syncNext]
      this.syncNext.clear()
      try {
        // Logs the journal does not cover are synced first: the group below
        // publishes a watermark that covers them too.
        if (whole.length > 0) await forEachConcurrently(whole, this.syncConcurrency(), (log) => this.syncFiles(log))
        const publishes = failed.length === 0 && (target > this.durable || this.republish)
        await journal.commit(publishes ? { lsn: target > this.durable ? target : this.durable, sequence: this.sequence + 1n } : undefined)
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
      this.maintainJournal()
    } else {
      await forEachConcurrently(logs, this.syncConcurrency(), async (log) => {
        try {
          await this.syncLog(log)
        } catch (err) {
          // A log deleted while this flush ran has nothing left to make durable.
          if (log.deleted) return
          failed.push(log)
          firstError ??= fromSystemError(err, `sync shape ${log.id}`)
        }
      })
    }
    // After a failed journal commit a tombstone may not be durable: a log
    // re-created under its id must not go live yet.
    const { created, waiting } = journalFailed ? { created: [], waiting: snapshots } : await this.finishSnapshots(snapshots, target)
    if (waiting.length > 0) {
      // Kept ahead of snapshots finished meanwhile; the timer keeps a process
      // whose only work is awaiting `finish` alive.
      this.finishing = [...waiting, ...this.finishing]
      this.schedule(false, true)
    }
    try {
      return await this.publish(target, seq, failed, journalFailed, firstError, created, started, named)
    } finally {
      // Resolved last, so whoever awaited a snapshot also sees everything this
      // flush published (the snapshot itself is durable whatever happened since).
      for (const c of created) {
        this.reveal(c.log)
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
      this.reveal(c.log)
      advanced.push(c.log.id)
    }
    this.lastError = undefined
    // Lazily: nobody asks which logs moved, so none is visited. Each log
    // publishes what this flush made durable when it is next read or appended
    // to (FileShapeLog.catchUp), and stays in the list for the next flush that
    // is asked. With 100k logs this pass was a cache miss per log appended
    // since the last flush (~5% of the pipeline's main thread).
    if (this.advancedListeners === 0 && !named) return this.tell({ durableLsn: this.durable, advanced, durationMs: performance.now() - started })
    const waiting = this.unpublished
    const count = this.unpublishedCount
    let kept = 0
    for (let i = 0; i < count; i++) {
      const log = waiting[i]
      if (log === undefined) continue
      // What earlier flushes published without visiting it is not this flush's news.
      log.publish(lastLsn, lastSeq)
      if (log.publish(this.durable, seq) && !isCreated(created, log)) advanced.push(log.id)
      if (log.hasUnpublished()) {
        waiting[kept] = log
        log.unpublishedSlot = kept++
      } else {
        log.unpublishedSlot = -1
      }
    }
    for (let i = kept; i < count; i++) waiting[i] = undefined
    this.unpublishedCount = kept
    return this.tell({ durableLsn: this.durable, advanced, durationMs: performance.now() - started })
  }

  private tell(result: FlushResult): FlushResult {
    for (const listener of this.listeners) listener(result)
    return result
  }

  /**
   * Syncs in flight at once. Each pins up to three descriptors, so this keeps a
   * flush of 100k dirty logs inside the descriptor budget; the thread pool runs
   * only a few at a time anyway.
   */
  private syncConcurrency(): number {
    return Math.max(1, Math.min(MAX_CONCURRENT_SYNCS, Math.floor(this.fds.maxOpen / 3)))
  }

  /**
   * A checkpoint: every log named in the closed segments (all of them on
   * close) writes back what it keeps in memory (write-behind), then one
   * syncfs makes the whole store durable where the port and system allow it
   * (tried at the first checkpoint), else each log fdatasyncs its own files.
   * With 100k logs that is one call instead of 200-300k, each of which cost a
   * filesystem journal commit: a checkpoint took ~160 s under load that way.
   */
  private checkpoint(all: boolean): Promise<void> {
    if (this.syncBroken) return Promise.reject(this.syncBroken)
    // Decided now: callers start a checkpoint only when none runs (the journal would queue it).
    const whole = this.wholeSync !== false && this.fs.syncFilesystem !== undefined
    const stats: CheckpointStats = { ...NO_CHECKPOINT, running: true, syncfs: whole }
    const started = performance.now()

    let synced = started
    return this.journal!.checkpoint(all, {
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
            await FileShapeLog.writeBackMany(logs, this.writer)
            stats.writtenBack += logs.length
          }
        : undefined,
      batch: CHECKPOINT_RUN,
      // Write-backs and per-file syncs wait on other threads: many at once.
      concurrency: whole ? Math.max(1, Math.ceil(this.writer.concurrency / CHECKPOINT_RUN)) : this.syncConcurrency(),
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

  /** The checkpoint running now, or else the last one. */
  get checkpointStats(): Readonly<CheckpointStats> {
    return this.lastCheckpoint
  }

  private lastCheckpoint: CheckpointStats = NO_CHECKPOINT

  /** Writes back and syncs one log's files: for logs whose bytes the journal does not hold. */
  private syncFiles(log: FileShapeLog): Promise<void> {
    return this.unlessDeleted(
      log,
      async () => {
        await log.writeBackAll()
        await this.syncOwnFiles(log)
      },
      (err) => fromSystemError(err, `sync shape ${log.id}`),
    )
  }

  /** `step` for a log; it fails only while the log exists (a deleted log has nothing left to make durable). */
  private async unlessDeleted(log: FileShapeLog, step: () => Promise<void> | void, fail: (err: unknown) => Error): Promise<void> {
    if (log.deleted) return
    try {
      await step()
    } catch (err) {
      if (log.deleted) return
      throw fail(err)
    }
  }

  /**
   * One log's part of a checkpoint: its tail into its files (through the
   * store's writer, write-back.ts), and without syncfs its files synced. A
   * failed write loses nothing: the bytes stay in memory for the next try.
   */
  private async checkpointLog(log: FileShapeLog, sync: boolean): Promise<void> {
    await this.unlessDeleted(
      log,
      () => log.writeBackAll(),
      (err) => fromSystemError(err, `write back shape ${log.id}`),
    )
    if (sync) await this.checkpointSync(log)
  }

  private checkpointSync(log: FileShapeLog): Promise<void> {
    return this.unlessDeleted(
      log,
      () => this.syncOwnFiles(log),
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
      await this.fs.syncFilesystem!(this.root)
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
    await forEachConcurrently(logs, this.syncConcurrency(), (log) => this.checkpointSync(log))
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
  private readonly keepWatermark = (w: Watermark): Promise<void> => publishWatermark(this.fs, this.root, w)

  /**
   * Called with true when the write-behind tails pass `tailBudgetBytes`: the
   * writer should stop appending (a replication stream pauses) while a
   * checkpoint writes them back, and with false once they are under half of
   * it. Appends are still taken meanwhile; this is advice, not a refusal.
   */
  onPressure(listener: (held: boolean) => void): () => void {
    this.pressureListeners.add(listener)
    return () => this.pressureListeners.delete(listener)
  }

  /** Whether the writer is asked to hold back now (see `onPressure`). */
  get underPressure(): boolean {
    return this.pressured
  }

  stats(): FileStoreStats {
    return {
      logs: this.logs.size,
      journalSegments: this.journal?.segmentCount ?? 0,
      tailBytes: this.arena.bytesInUse,
      tailMemoryBytes: this.arena.slabBytes,
      underPressure: this.pressured,
      pressures: this.pressures,
      checkpoint: this.lastCheckpoint,
    }
  }

  /**
   * After each journal commit and each checkpoint: checkpoints closed
   * segments, and keeps the write-behind tails within the budget. They leave
   * memory only through a checkpoint, which covers closed segments only: past
   * half the budget the current segment is closed early; past all of it the
   * writer is asked to hold back too. Unbounded, a stream to 100k logs that a
   * checkpoint could not keep up with grew them past 1 GiB of memory touched
   * for the first time, each page fault slowing the appends that starved the
   * checkpoint of the event loop further (bench:pipeline keep-up).
   */
  private maintainJournal(): void {
    const journal = this.journal
    if (journal === undefined || this.closed) return
    const inUse = this.arena.bytesInUse
    // After a failed sync no checkpoint runs again: holding the writer back would stop it for good.
    if (this.syncBroken !== undefined || inUse <= this.tailBudget / 2) this.setPressure(false)
    else if (inUse > this.tailBudget) this.setPressure(true)
    if (this.checkpointing) return
    if (this.syncBroken === undefined && inUse > this.tailBudget / 2) {
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
    if (this.closed) return
    clearTimeout(this.pressureRetry)
    this.pressureRetry = setTimeout(() => this.maintainJournal(), PRESSURE_RETRY_MS)
    this.pressureRetry.unref()
  }

  private setPressure(held: boolean): void {
    if (this.pressured === held) return
    this.pressured = held
    if (held) this.pressures++
    else clearTimeout(this.pressureRetry)
    for (const listener of this.pressureListeners) {
      try {
        listener(held)
      } catch (err) {
        // A listener's bug must not fail the flush or checkpoint that noticed the change.
        this.emitError(fromSystemError(err, 'notify a pressure listener'))
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
        this.arena.trim()
        this.maintainJournal()
      },
      (err: unknown) => {
        this.checkpointing = false
        this.emitError(fromSystemError(err, 'checkpoint the journal'))
        // A held-back writer appends nothing, so no commit would try again.
        if (this.pressured) this.retryMaintenance()
      },
    )
  }

  private async syncLog(log: FileShapeLog): Promise<void> {
    if (log.deleted) return
    log.writeIndex()
    await this.syncOwnFiles(log)
  }

  /** fdatasync of log.dat and entries.idx, and of chunks.idx when something changed it since its last sync. */
  private async syncOwnFiles(log: FileShapeLog): Promise<void> {
    const chunks = log.chunksDirty
    log.chunksDirty = false
    try {
      await Promise.all([
        this.fds.useAsync(log.data, (fd) => this.fs.fdatasync(fd)),
        this.fds.useAsync(log.entries, (fd) => this.fs.fdatasync(fd)),
        chunks ? this.fds.useAsync(log.chunkFile, (fd) => this.fs.fdatasync(fd)) : undefined,
      ])
    } catch (err) {
      log.chunksDirty ||= chunks
      throw err
    }
  }

  /**
   * Syncs finished snapshots, renames into place those whose every transaction
   * at or below `target` is complete and covered by the sync, and registers
   * them. Returns the snapshots that became logs and those left for a later
   * flush.
   */
  private async finishSnapshots(
    snapshots: FinishingSnapshot[],
    target: bigint,
  ): Promise<{ created: FinishingSnapshot[]; waiting: FinishingSnapshot[] }> {
    if (snapshots.length === 0) return { created: [], waiting: [] }
    const ready: FinishingSnapshot[] = []
    await forEachConcurrently(snapshots, this.syncConcurrency(), async (s) => {
      try {
        // Carried over with nothing appended since: already synced.
        if (!s.prepared || s.log.lastSeq() > s.syncSeq) {
          // syncLog writes the staged index before its first await, so every
          // append up to here is in what the sync covers.
          s.syncSeq = this.seq
          const synced = this.syncLog(s.log)
          s.syncedEnds = s.log.fileEnds()
          await synced
        }
        if (!s.prepared) {
          await this.fds.useAsync(s.meta, (fd) => this.fs.fdatasync(fd))
          this.fds.retire(s.meta)
          await syncDirectory(this.fs, s.tmpDir)
          s.prepared = true
        }
        ready.push(s)
      } catch (err) {
        this.fds.retire(s.meta)
        s.reject(fromSystemError(err, `finish snapshot of shape ${s.log.id}`))
      }
    })
    const moved: FinishingSnapshot[] = []
    const waiting: FinishingSnapshot[] = []
    // No await from each check to its rename: nothing can be appended in between.
    for (const s of ready) {
      if (s.log.deleted) continue // dropped by a failed append during the sync
      if (s.aborted) {
        s.reject(new StorageError('shape_deleted', `snapshot of shape ${s.log.id} was aborted`))
        continue
      }
      if (s.log.unsettledAtOrBelow(target, s.syncSeq) || this.faults.has(s.log)) {
        waiting.push(s)
        continue
      }
      const dir = `${this.root}/shapes/${s.log.id}`
      try {
        this.fs.renameSync(s.tmpDir, dir)
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
      await syncDirectory(this.fs, `${this.root}/shapes`)
    } catch (err) {
      // The renames may not survive a crash; do not hand out logs that could vanish.
      for (const s of moved) {
        const back = `${this.root}/trash/${s.log.id}.${Date.now()}.${randomBytes(3).toString('hex')}`
        try {
          this.fs.renameSync(s.log.dir, back)
        } catch {
          // Left in shapes/: it is complete and synced, so reopening finds a valid log.
        }
        s.log.moveTo(back)
        s.reject(fromSystemError(err, `publish snapshot of shape ${s.log.id}`))
      }
      return { created: [], waiting }
    }
    // Registered (flushed and published from now on), but served by `get` only
    // once this flush is done with it (`reveal`).
    for (const s of moved) {
      const log = s.log
      log.registered = true
      if (this.journal && s.syncedEnds) {
        try {
          log.journalSince(s.syncedEnds)
        } catch {
          // Then the next flush syncs its files as a whole.
          this.syncNext.add(log)
        }
      }
      log.publishSnapshot()
      // Already durable: synced in the directory, covered by a published watermark.
      log.publish(this.durable, s.syncSeq)
      if (log.hasUnpublished()) this.listUnpublished(log)
      if (log.lastSeq() > s.syncSeq) {
        // Appended after the sync (above the target, or it would have waited):
        // synced and published by later flushes like any dirty log's.
        this.listDirty(log)
        this.schedule(false)
      }
    }
    return { created: moved, waiting }
  }

  // ---- LogHost -------------------------------------------------------------

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
      // (FileShapeLog.journalRecords): the flush visits only logs with records left to write.
      if (this.journal === undefined || log.indexDue) this.listDirty(log)
    }
    this.dirtyBytes += bytes
    if (this.dirtyBytes >= this.flushBytes) this.schedule(true)
    else if (!this.timer) this.schedule(false)
  }

  writeBackFailed(log: FileShapeLog, err: StorageError): void {
    // Nothing is lost: the bytes stay in memory and in the journal, and the next write-back or checkpoint tries again.
    if (!log.deleted) this.emitError(err)
  }

  markUnpublished(log: FileShapeLog): void {
    // Membership follows boundaries, not dirtiness: a `more` append dirties a log
    // without giving it anything to publish, and the publish pass drops such logs.
    // A log being built is published when it is registered.
    if (log.registered) this.listUnpublished(log)
  }

  private listUnpublished(log: FileShapeLog): void {
    if (log.unpublishedSlot >= 0) return
    const slot = this.unpublishedCount++
    log.unpublishedSlot = slot
    if (slot < this.unpublished.length) this.unpublished[slot] = log
    else this.unpublished.push(log)
  }

  private dropUnpublished(log: FileShapeLog): void {
    const slot = log.unpublishedSlot
    if (slot < 0) return
    this.unpublished[slot] = undefined
    log.unpublishedSlot = -1
  }

  private listDirty(log: FileShapeLog): void {
    if (log.dirtyMark) return
    log.dirtyMark = true
    this.dirty[this.dirtyCount++] = log
  }


  noteFault(log: FileShapeLog, tx: bigint): void {
    const prev = this.faults.get(log)
    if (prev === undefined || tx < prev) this.faults.set(log, tx)
  }

  clearFault(log: FileShapeLog, tx: bigint): void {
    const prev = this.faults.get(log)
    if (prev !== undefined && tx >= prev) this.faults.delete(log)
  }

  private cappedTarget(): bigint {
    let target = this.advanced
    for (const tx of this.faults.values()) if (tx - 1n < target) target = tx - 1n
    return target < this.durable ? this.durable : target
  }

  /** `keepAlive`: someone awaits this flush (a snapshot carried over), though it need not run at once. */
  private schedule(now: boolean, keepAlive = false): void {
    if (this.closed) return
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
    if (this.closed) return
    this.flushInternal()
      .then(() => {
        this.failedFlushes = 0
      })
      .catch((err: unknown) => {
        this.failedFlushes++
        this.emitError(err instanceof StorageError ? err : fromSystemError(err, 'flush'))
      })
      .finally(() => {
        // Keep retrying while there is work; a cleared fault then resumes by itself.
        // Failures back off, so a full disk reports an error a few times a second, not a hundred.
        if (this.closed || this.timer) return
        if (!(this.dirtyCount > 0 || this.dirtyBytes > 0 || this.finishing.length > 0 || this.cappedTarget() > this.durable)) return
        if (this.failedFlushes === 0) return this.schedule(false)
        const delay = Math.min(MAX_RETRY_MS, this.flushIntervalMs * 2 ** Math.min(this.failedFlushes, 16))
        this.timer = setTimeout(this.onTimer, delay)
        this.timer.unref()
      })
  }

  private emitError(err: StorageError): void {
    for (const listener of this.errorListeners) listener(err)
  }

  private ensureOpen(): void {
    if (this.closed) throw new StorageError('store_closed')
  }

  /** Flushes what it can, closes every file and releases the lock. */
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
    let error: unknown
    try {
      await this.flushInternal()
    } catch (err) {
      error = err
    }
    // No timed flush may write the journal while the checkpoint below deletes it.
    this.closed = true
    if (this.timer) clearTimeout(this.timer)
    // Nothing is appended any more: whoever was held back need not wait.
    this.setPressure(false)
    if (this.journal) {
      // A clean shutdown leaves nothing to replay.
      try {
        await this.journal.running?.catch(() => undefined)
        await this.checkpoint(true)
      } catch (err) {
        error ??= err
      }
      this.journal.close()
      await this.live?.close()
    }
    for (const s of this.finishing) s.reject(new StorageError('store_closed'))
    if (error === undefined) {
      // Last: the next open trusts these heads only because nothing came after them.
      try {
        await this.writeCleanHeads()
      } catch (err) {
        error = err
      }
    }
    for (const log of this.logs.values()) log.retire()
    this.logs.clear()
    this.unlock()
    if (error) throw error
  }
}

/** Opens (creating if needed) a file store for writing. */
export function openFileLogStore(options: FileStoreOptions): Promise<FileLogStore> {
  return FileLogStore.open(options)
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
