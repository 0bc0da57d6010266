/**
 * The heads file while the writer runs (heads-file.ts), so that an open after
 * a crash, or a standby's after the writer's kill -9, scans only the logs
 * appended to since, not every log: every `intervalMs` in which something was
 * appended or a log came or went, each log's published head is taken, a batch
 * of logs per turn of the event loop (with 100k logs the whole takes a few
 * hundred milliseconds, which must not hold up appends and reads at once),
 * and the file replaced durably. The store writes it once more, whole, at its
 * close.
 *
 * An entry vouches for a log by its id and its data file's inode. Inode
 * numbers are reused, so a log deleted and then made again under its id
 * could, with files of the same sizes, pass for the one a file names. So the
 * ids deleted in this lineage (heads-file.ts) are kept, and creating a log
 * under one of them removes the file in place (durably) before the new log
 * can be renamed into shapes/ (`beforePlace`), and draws a new lineage: no
 * file of the lineage, in place or held by a standby, then vouches for the
 * id. A writer that took its lineage over from the file it opened on (or a
 * standby's promotion) does not know which ids its predecessors deleted, so
 * its first creation of any log does the same. The server never makes a log
 * again under an id (a handle carries its creation time, a compacted log a
 * new generation); the storage contract allows it.
 */
import { setImmediate as nextTurn } from 'node:timers/promises'
import type { StorageError } from '../errors.js'
import { fromSystemError } from '../errors.js'
import type { FsPort } from '../fs-port.js'
import type { FileShapeLog } from './file-log.js'
import { type HeadsEntry, HEADS_FILE, HeadsFileWriter, OLD_HEADS_FILE, encodeHeadsPart, newLineage, patchLineage } from './heads-file.js'
import { syncDirectory } from './watermark.js'
import { Serial } from '../serial.js'

/** Logs whose heads are taken in one turn of the event loop. */
const BATCH_LOGS = 1000
/** Room for a batch's records (about 150 bytes a log; a batch that needs more gets a buffer of its own). */
const SCRATCH_BYTES = 256 * 1024
/** Ids deleted in one lineage that are kept: past this many, a new lineage starts (as for an id made again). */
const MAX_DELETED_IDS = 65_536

/** What the snapshots read of the store. */
export interface HeadsHost {
  readonly fs: FsPort
  readonly root: string
  /** The store's logs now. */
  logs(): IterableIterator<FileShapeLog>
  readonly logCount: number
  readonly durableLsn: bigint
  /** Moves with every published append (GroupCommit.publishedSeq). */
  readonly publishedSeq: number
  emitError(err: StorageError): void
}

export class HeadsSnapshots {
  private readonly writes = new Serial()
  /** What the last file written was taken at (published sequence and log count). */
  private written = ''
  private stopped = false
  /** Ids of logs deleted in this lineage (a file of it may name them). */
  private readonly deleted = new Set<string>()
  /** Written into every file (heads-file.ts): taken over at open (`adopt`), drawn anew when an id of `deleted` is made again. */
  private lineage = newLineage()
  /** The lineage was taken over: files of it may name logs deleted before this writer, so any creation draws a new one. */
  private namesUnknown = false
  /** Removing the file for a log made again under a deleted id, or giving it a new lineage (see the top of this file). */
  private removing: Promise<void> | undefined
  /** Moves when the file is removed: a write started before must not put it back. */
  private epoch = 0
  private timer: NodeJS.Timeout | undefined

  constructor(
    private readonly host: HeadsHost,
    private readonly intervalMs: number,
  ) {}

  /** Starts the timed writes: once the store is open (a store whose open failed must never write). */
  start(): void {
    if (this.intervalMs <= 0 || this.timer !== undefined || this.stopped) return
    this.timer = setInterval(() => this.tick(), this.intervalMs)
    this.timer.unref()
  }

  private get state(): string {
    return `${this.host.publishedSeq}:${this.host.logCount}`
  }

  private tick(): void {
    if (this.writes.settled !== undefined || this.stopped || this.state === this.written) return
    this.write(true).catch((err: unknown) => this.host.emitError(fromSystemError(err, 'write the heads file')))
  }

  /**
   * Takes every log's head and writes the file, after any write under way: a
   * batch per turn (`sliced`, while the store serves) or in one go (at close,
   * when nothing else runs). A sliced write stops without writing once `stop`
   * was called.
   */
  write(sliced: boolean): Promise<void> {
    return this.writes.run(() => this.writeOnce(sliced))
  }

  /** A log was deleted: a file of the lineage may still name it. */
  deletedLog(id: string): void {
    this.deleted.add(id)
    // Kept bounded: a new lineage (and the file in place removed) forgets them all.
    if (this.deleted.size > MAX_DELETED_IDS) this.newLineage(id)
  }

  /**
   * Takes over the lineage of the heads file the store opened on (or a
   * standby was promoted on), so that a standby that read a file of it
   * before this writer started can still trust what it read. 0 (a file of an
   * earlier build) keeps the lineage drawn at construction.
   */
  adopt(lineage: bigint): void {
    if (lineage === 0n) return
    this.lineage = lineage
    this.namesUnknown = true
  }

  /**
   * A log is being made under `id`: if the file in place may name an earlier
   * log of that id (deleted in this lineage), it goes; if only a file of the
   * lineage held elsewhere may (the lineage was taken over), the file in place
   * is given the new lineage. A new lineage starts either way.
   */
  creating(id: string): void {
    if (this.deleted.has(id)) this.newLineage(id)
    else if (this.namesUnknown) this.newLineage(undefined)
  }

  /** `id`: the deleted id made again (the file in place goes); undefined: the file in place takes the new lineage. */
  private newLineage(id: string | undefined): void {
    this.deleted.clear()
    this.namesUnknown = false
    const lineage = newLineage()
    this.lineage = lineage
    this.epoch++
    // Writes begun or queued before now may name the earlier log: the removal
    // follows them. Later ones cannot (that log has left the store, the new one
    // has not joined it yet) and are not waited for, so none waits on another.
    const earlier = [this.removing, this.writes.settled]
    const removing = (async () => {
      await Promise.allSettled(earlier)
      const { fs, root } = this.host
      if (id === undefined) {
        await patchLineage(fs, root, lineage)
        return
      }
      for (const name of [HEADS_FILE, OLD_HEADS_FILE]) if (fs.existsSync(`${root}/${name}`)) fs.unlinkSync(`${root}/${name}`)
      await syncDirectory(fs, root)
    })()
    this.removing = removing
    // Once done, nothing waits on it; a failure fails only the new logs waiting then (their flush reports it).
    const done = (): void => {
      if (this.removing === removing) this.removing = undefined
    }
    removing.then(done, () => {
      // The file may still be there (or of the old lineage): the next log made under the id, or any, tries again.
      if (id !== undefined) this.deleted.add(id)
      this.namesUnknown = true
      done()
    })
  }

  /** What a new log waits for before it is renamed into shapes/ (FinisherHost.beforePlace). */
  beforePlace(): Promise<void> | undefined {
    return this.removing
  }

  private async writeOnce(sliced: boolean): Promise<void> {
    if (sliced && this.stopped) return
    const state = this.state
    const epoch = this.epoch
    const logs = [...this.host.logs()]
    const writer = HeadsFileWriter.open(this.host.fs, this.host.root, this.lineage)
    try {
      // One buffer for every batch's records: the file is never held whole.
      const scratch = Buffer.allocUnsafe(SCRATCH_BYTES)
      for (let from = 0; from < logs.length; from += BATCH_LOGS) {
        if (sliced && from > 0) {
          await nextTurn()
          if (this.stopped || epoch !== this.epoch) {
            writer.abort()
            return
          }
        }
        const batch: HeadsEntry[] = []
        for (let i = from; i < Math.min(from + BATCH_LOGS, logs.length); i++) {
          const entry = logs[i]!.headsEntry()
          if (entry !== undefined) batch.push(entry)
        }
        writer.append(encodeHeadsPart(batch, scratch), batch.length)
      }
      if (epoch !== this.epoch) {
        writer.abort()
        return
      }
    } catch (err) {
      writer.abort()
      throw err
    }
    // Taken after every head: each is at or below it.
    await writer.finish(this.host.durableLsn)
    this.written = state
  }

  /**
   * The file in place says what a write now would (the open found every log
   * it names as it names them, and no other): the timed writes wait for a
   * change, where the first would otherwise encode every log again.
   */
  inPlaceIsCurrent(): void {
    this.written = this.state
  }

  /** No more timed writes; resolves once one under way has finished or given up. */
  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer !== undefined) clearInterval(this.timer)
    await this.writes.settled
    // A failed removal already failed the new logs that waited for it.
    await this.removing?.catch(() => undefined)
  }
}
