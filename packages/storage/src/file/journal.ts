/**
 * The writer's journal: group commit with one fdatasync per flush, however many
 * logs the flush touched. Format: `journal-format.ts`; replay at open:
 * `journal-replay.ts`.
 *
 * Between flushes, every write and truncation of a registered log's files is
 * also recorded here (the log's own write goes to the page cache as before).
 * `commit()` seals what was recorded into one group, appends it to the current
 * segment with one write and syncs the segment once. The logs' own files are
 * synced only by a checkpoint:
 *
 *   segments   [ 00000007 closed ] [ 00000008 closed ] [ 00000009 current ]
 *   checkpoint  sync every log recorded in 7 and 8, then delete 7 and 8
 *
 * A closed segment is deleted only after every log it names was synced, so
 * whatever a published watermark covers is always in a log file on disk or in
 * a segment still present. The journal owns its segment descriptor (log
 * descriptors belong to the FdCache).
 */
import { fdatasyncSync } from 'node:fs'
import { InlineSyncPolicy } from './inline-sync-policy.js'
import { FILE_CHUNKS, FILE_DATA, FILE_ENTRIES, GroupBuilder, segmentName } from './journal-format.js'
import type { JournalFile } from './journal-format.js'
import { encodeHeader } from '../format.js'
import type { Watermark } from '../format.js'
import type { FsPort } from '../fs-port.js'
import { writeFully } from '../fs-port.js'
import { syncDirectory } from './watermark.js'
import { forEachConcurrently } from '../concurrently.js'
import { Serial } from '../serial.js'

export { FILE_CHUNKS, FILE_DATA, FILE_ENTRIES }

export interface JournalOptions {
  /** A segment is closed (and checkpointed) once it holds this many bytes (more with many owners: `closeDue`)... */
  readonly segmentBytes: number
  /** ... or once it is this old. */
  readonly segmentAgeMs: number
  /**
   * A commit asked to sync inline (see `commit`) blocks the calling thread in
   * fdatasync(2) while recent inline syncs took at most this long (ms, their
   * median: inline-sync-policy.ts); 0: every sync goes through the port
   * (FileStoreOptions.idleSyncInlineMaxMs).
   */
  readonly inlineSyncMaxMs?: number
}

export const DEFAULT_IDLE_SYNC_INLINE_MAX_MS = 1

// See `closeDue`.
const OWNERS_PER_SEGMENT = 32_768
const SEGMENT_GROWTH = 4
const AGE_GROWTH = 10

/**
 * What the journal writes for (a log). The two marks are the journal's own
 * bookkeeping, kept on the owner so that recording a write costs no Set
 * operation: with 100k logs a Set of a group's or a segment's owners was
 * rebuilt over and over as it grew, and its tables outlived young-generation
 * collections. A new owner starts with both at 0.
 */
export interface JournalOwner {
  /** The group (by the journal's count) the owner was last listed in. */
  journalGroup: number
  /** The segment the owner was last listed in (by its mark). */
  journalSegment: number
}

interface Segment<T> {
  readonly generation: number
  /** What its owners are marked with (see JournalOwner). */
  readonly mark: number
  fd: number
  size: number
  readonly openedAt: number
  /** Owners (logs) with records in this segment, each once: what a checkpoint must sync. */
  readonly owners: T[]
  /** The watermark of its last group that carried one. */
  watermark: Watermark | undefined
  /** Closed early (`seal`): no more groups go into it, and a checkpoint may take it. */
  sealed: boolean
}

/** A commit failed: nothing of its group may be trusted, for any of these owners. */
export class JournalCommitError<T> extends Error {
  override readonly name = 'JournalCommitError'
  /** Never leaves the engine: the store turns it into a StorageError (`io_error` or `disk_full`) of its cause. */
  readonly code = 'journal_commit_failed'
  constructor(
    override readonly cause: unknown,
    readonly owners: readonly T[],
  ) {
    super('journal commit failed', { cause })
  }
}

/** How a checkpoint makes the owners of its segments durable. */
export interface CheckpointSteps<T> {
  /** Told how many owners the checkpoint covers, before the first `sync`. */
  start?: ((owners: number) => void) | undefined
  /** Per owner, at most `concurrency` at once... */
  sync(owner: T): Promise<void>
  /** ... or, when given, per run of up to `batch` owners, at most `concurrency` runs at once. */
  syncBatch?: ((owners: readonly T[]) => Promise<void>) | undefined
  batch?: number | undefined
  concurrency: number
  /** After every owner's `sync`: one step that makes all of them durable. */
  syncAll?: ((owners: readonly T[]) => Promise<void>) | undefined
  /** Makes the segments' last watermark durable elsewhere before they go. */
  keep(watermark: Watermark): Promise<void>
}

/** `list` cut into runs of `size` (the last may be shorter). */
function runsOf<T>(list: readonly T[], size: number): T[][] {
  const runs: T[][] = []
  for (let i = 0; i < list.length; i += size) runs.push(list.slice(i, i + size))
  return runs
}

/**
 * The marks of groups and segments, of every journal in the process, come
 * from one count: never 0 (a new owner's), and an owner's mark never matches a
 * group or segment of another journal.
 */
let lastMark = 0

export class Journal<T extends JournalOwner> {
  private readonly builder = new GroupBuilder()
  /** Owners with records in the group being built, each once (marked with `group`). */
  private owners: T[] = []
  private group = ++lastMark
  /** Tombstones not yet in a committed group (kept across failed commits). */
  private tombstones: string[] = []
  private readonly segments: Segment<T>[] = []
  private sequence = 0
  /** The last write to the current segment failed: start a new one. */
  private broken = false
  /**
   * The segment the next commit appends to unless it is due to close: the
   * last one, while it is neither sealed nor left broken by a failed write.
   */
  private openSegment: Segment<T> | undefined = undefined
  /** The open segment every owner of the group being built was listed in (undefined: not one segment for all). */
  private groupSegment: Segment<T> | undefined = undefined
  private readonly checkpoints = new Serial()
  /** A group is being written and synced: its segment must not be sealed under it. */
  private committingNow = false
  /** Whether an idle commit's sync runs inline (inline-sync-policy.ts). */
  private readonly inlinePolicy: InlineSyncPolicy
  readonly dir: string

  constructor(
    private readonly fs: FsPort,
    root: string,
    private nextGeneration: number,
    private readonly options: JournalOptions,
  ) {
    this.dir = `${root}/journal`
    this.inlinePolicy = new InlineSyncPolicy(options.inlineSyncMaxMs ?? 0)
  }

  /** The first generation this journal writes, once the replay found the last one (a store built before it held the lock). */
  resume(nextGeneration: number): void {
    this.nextGeneration = nextGeneration
  }

  write(owner: T, id: string, file: JournalFile, position: number, bytes: Uint8Array, offset: number, length: number): void {
    if (owner.journalGroup !== this.group) this.list(owner)
    this.builder.write(id, file, position, bytes, offset, length)
  }

  /** Whether the owner has records in the group being built. */
  inGroup(owner: T): boolean {
    return owner.journalGroup === this.group
  }

  truncate(owner: T, id: string, file: JournalFile, size: number): void {
    if (owner.journalGroup !== this.group) this.list(owner)
    this.builder.truncate(id, file, size)
  }

  /**
   * Lists the owner in the group, and in the segment the group will most
   * likely go to (the open one) right away: here the owner is in the CPU's
   * caches, while a pass over the group's owners at the commit came back to
   * each of them after the flush interval (with 100k logs, a cache miss per
   * owner per flush). The commit lists them again only if the group goes
   * elsewhere (see `commit`).
   */
  private list(owner: T): void {
    owner.journalGroup = this.group
    this.owners.push(owner)
    const seg = this.openSegment
    if (this.owners.length === 1) this.groupSegment = seg
    else if (seg !== this.groupSegment) this.groupSegment = undefined
    if (seg !== undefined && owner.journalSegment !== seg.mark) {
      owner.journalSegment = seg.mark
      seg.owners.push(owner)
    }
  }

  /** The log under `id` was deleted: on replay, its earlier records are skipped. */
  tombstone(id: string): void {
    this.tombstones.push(id)
  }

  /** Tombstones wait for a commit (a re-created log must not go live before its id's tombstone is durable). */
  get tombstonesPending(): boolean {
    return this.tombstones.length > 0
  }

  /**
   * Makes everything recorded so far durable, with `watermark` when given (the
   * group is then the watermark's publication): one write, one fdatasync (and a
   * directory sync when a new segment starts). Returns the owners it covered.
   * On failure the group is dropped and the error names its owners.
   * `inline`: the caller has nothing else to do (an idle store's flush): with
   * `inlineSyncMaxMs` and a fast disk the fdatasync blocks this thread instead of
   * going through the thread pool.
   */
  async commit(watermark?: Watermark, inline = false): Promise<readonly T[]> {
    const owners = this.owners
    const listedIn = this.groupSegment
    this.owners = []
    this.groupSegment = undefined
    this.group = ++lastMark
    // A count, not the array: a deletion while this commit waits adds to it, and that tombstone is the next group's.
    const tombstoned = this.tombstones.length
    for (let i = 0; i < tombstoned; i++) this.builder.tombstone(this.tombstones[i]!)
    if (watermark) this.builder.watermark(watermark.lsn, watermark.sequence)
    if (this.builder.empty) return owners
    let dirSync = false
    this.committingNow = true
    try {
      let seg = this.segments.at(-1)
      if (!seg || seg.sealed || this.broken || this.closeDue(seg)) {
        seg = this.startSegment()
        dirSync = true
      }
      const pieces = this.builder.seal(seg.generation, ++this.sequence)
      if (seg !== listedIn) {
        // Not the segment the owners were listed in as they wrote (a new one, or the open one was sealed or broken meanwhile).
        const mark = seg.mark
        for (const o of owners) {
          if (o.journalSegment === mark) continue
          o.journalSegment = mark
          seg.owners.push(o)
        }
      }
      this.broken = true // until the write is whole
      this.openSegment = undefined
      for (const piece of pieces) {
        writeFully(this.fs, seg.fd, piece, piece.length, seg.size)
        seg.size += piece.length
      }
      this.builder.reset()
      // The writes of the next group list their owners in it (sealed meanwhile: see `seal`).
      if (!seg.sealed) this.openSegment = seg
      const fd = seg.fd
      const started = performance.now()
      if (inline && !dirSync && this.inlinePolicy.mayTry(started)) {
        fdatasyncSync(fd)
        const now = performance.now()
        this.inlinePolicy.record(now - started, now)
      } else await Promise.all([this.fs.fdatasync(fd), dirSync ? syncDirectory(this.fs, this.dir) : undefined])
      if (watermark) seg.watermark = watermark
      this.broken = false
      this.tombstones = this.tombstones.slice(tombstoned)
      return owners
    } catch (err) {
      this.builder.reset()
      this.openSegment = undefined
      throw new JournalCommitError(err, owners)
    } finally {
      this.committingNow = false
    }
  }

  /**
   * A checkpoint costs about one write-back per owner, however little each
   * wrote (system calls on two files each), so a segment naming many
   * owners stays open longer: past `segmentBytes` or `segmentAgeMs` it closes
   * only once it holds `segmentBytes / OWNERS_PER_SEGMENT` bytes per owner
   * (2 KiB at the default 64 MiB), and at SEGMENT_GROWTH times the size or
   * AGE_GROWTH times the age in any case (bounding replay and the tails held
   * in memory until their checkpoint).
   */
  private closeDue(seg: Segment<T>): boolean {
    const { segmentBytes, segmentAgeMs } = this.options
    const age = performance.now() - seg.openedAt
    if (seg.size >= segmentBytes * SEGMENT_GROWTH || age >= segmentAgeMs * AGE_GROWTH) return true
    if (seg.size < segmentBytes && age < segmentAgeMs) return false
    return seg.size * OWNERS_PER_SEGMENT >= seg.owners.length * segmentBytes
  }

  /**
   * A new segment, listed only once its header is written: one whose header
   * write failed (a full disk) must not take the next group at offset 0, where
   * replay, finding no header, would read none of the groups acknowledged in it.
   */
  private startSegment(): Segment<T> {
    const generation = this.nextGeneration++
    const path = `${this.dir}/${segmentName(generation)}`
    const fd = this.fs.openSync(path, 'wx', 0o644)
    const header = encodeHeader('journal')
    try {
      writeFully(this.fs, fd, header, header.length, 0)
    } catch (err) {
      // Left behind if these fail too, it holds no group: replay reads nothing from a segment without its header.
      try {
        this.fs.closeSync(fd)
        this.fs.unlinkSync(path)
      } catch {}
      throw err
    }
    const seg: Segment<T> = { generation, mark: ++lastMark, fd, size: header.length, openedAt: performance.now(), owners: [], watermark: undefined, sealed: false }
    this.segments.push(seg)
    return seg
  }

  /**
   * Closes the current segment before `closeDue` would, so that the next
   * checkpoint covers every log with records so far (the store does this when
   * the tails held for checkpoints pass their memory budget). The next commit
   * starts a new segment. False when there is nothing to close (no segment,
   * one sealed already, or one naming no log) or a commit is writing into it
   * (a checkpoint would close its descriptor under it): try after the commit.
   */
  seal(): boolean {
    const seg = this.segments.at(-1)
    if (seg === undefined || seg.sealed || seg.owners.length === 0 || this.committingNow) return false
    seg.sealed = true
    if (this.openSegment === seg) this.openSegment = undefined
    return true
  }

  /** A commit is under way (`seal` waits for it to end). */
  /** Lets go of the group buffers a burst grew, when no group is being built (`GroupBuilder.shed`). */
  shedMemory(): void {
    this.builder.shed()
  }

  /** Bytes of group buffers held (`GroupBuilder.heldBytes`). */
  get bufferBytes(): number {
    return this.builder.heldBytes
  }

  get committing(): boolean {
    return this.committingNow
  }

  /** Closed segments wait for a checkpoint. */
  get closedSegments(): number {
    const last = this.segments.at(-1)
    return last === undefined ? 0 : this.segments.length - (last.sealed ? 0 : 1)
  }

  get segmentCount(): number {
    return this.segments.length
  }

  /**
   * Syncs every owner named in the closed segments (all segments with `all`,
   * when nothing else writes: on close), then `syncAll` if given (the owners'
   * `sync` then only needs to get their bytes into the files), hands the last
   * watermark those segments published to `keep` (which must make it durable
   * elsewhere, since it is deleted with them), then deletes the segments.
   * `sync` must resolve for owners that no longer exist. One checkpoint runs
   * at a time.
   */
  checkpoint(all: boolean, how: CheckpointSteps<T>): Promise<void> {
    const run = async (): Promise<void> => {
      const upto = all ? this.segments.length : this.closedSegments
      if (upto <= 0) return
      const done = this.segments.slice(0, upto)
      // A segment lists each owner once, so one segment (the usual case) needs no Set: with many owners its table would be promoted, per checkpoint.
      const list = done.length === 1 ? done[0]!.owners.slice() : [...new Set(done.flatMap((seg) => seg.owners))]
      how.start?.(list.length)
      // The first failure fails the checkpoint: the other workers stop too.
      const syncBatch = how.syncBatch
      if (syncBatch === undefined) await forEachConcurrently(list, how.concurrency, (owner) => how.sync(owner))
      else await forEachConcurrently(runsOf(list, how.batch ?? 1), how.concurrency, syncBatch)
      if (how.syncAll) await how.syncAll(list)
      // The last one, as replay would take it (see journal-format.ts).
      let last: Watermark | undefined
      for (const seg of done) last = seg.watermark ?? last
      if (last) await how.keep(last)
      // Oldest first: a crash part-way leaves a suffix, and replaying a suffix over synced files is correct.
      for (const seg of done) {
        this.closeSegment(seg)
        try {
          this.fs.unlinkSync(`${this.dir}/${segmentName(seg.generation)}`)
        } catch (err) {
          // Gone already is the state this wants (the directory itself may have been removed).
          if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
        }
        this.segments.splice(this.segments.indexOf(seg), 1)
      }
      await syncDirectory(this.fs, this.dir)
    }
    // The caller of `checkpoint` gets the error; `running` only settles.
    return this.checkpoints.run(run)
  }

  /** A checkpoint in progress, if any. */
  get running(): Promise<void> | undefined {
    return this.checkpoints.settled
  }

  private closeSegment(seg: Segment<T>): void {
    if (seg.fd < 0) return
    try {
      this.fs.closeSync(seg.fd)
    } catch {
      // Its groups were synced when written; a close error loses nothing.
    }
    seg.fd = -1
  }

  /** Closes segment descriptors (the store is closing; what is left is replayed at the next open). */
  close(): void {
    for (const seg of this.segments) this.closeSegment(seg)
  }
}
