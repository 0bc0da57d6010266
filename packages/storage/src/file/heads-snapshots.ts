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
 * could, with files of the same sizes, pass for the one a file on disk names.
 * So the ids deleted since the file on disk was started are kept, and
 * creating a log under one of them removes the file (durably) before the new
 * log can be renamed into shapes/ (`beforePlace`). The server never does
 * this (a handle carries its creation time); the storage contract allows it.
 */
import { setImmediate as nextTurn } from 'node:timers/promises'
import type { StorageError } from '../errors.js'
import { fromSystemError } from '../errors.js'
import type { FsPort } from '../fs-port.js'
import type { FileShapeLog } from './file-log.js'
import { type HeadsEntry, HEADS_FILE, HeadsFileWriter, OLD_HEADS_FILE, encodeHeadsPart } from './heads-file.js'
import { syncDirectory } from './watermark.js'
import { Serial } from '../serial.js'

/** Logs whose heads are taken in one turn of the event loop. */
const BATCH_LOGS = 1000
/** Room for a batch's records (about 150 bytes a log; a batch that needs more gets a buffer of its own). */
const SCRATCH_BYTES = 256 * 1024

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
  /** Ids of logs deleted since the file on disk was started (it may name them). */
  private readonly deleted = new Set<string>()
  /** Removing the file for a log made again under a deleted id (see the top of this file). */
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

  /** A log was deleted: the file on disk may still name it. */
  deletedLog(id: string): void {
    this.deleted.add(id)
  }

  /** A log is being made under `id`: if the file on disk may name an earlier log of that id, it goes. */
  creating(id: string): void {
    if (!this.deleted.has(id)) return
    this.deleted.clear()
    this.epoch++
    // Writes begun or queued before now may name the earlier log: the removal
    // follows them. Later ones cannot (that log has left the store, the new one
    // has not joined it yet) and are not waited for, so none waits on another.
    const earlier = [this.removing, this.writes.settled]
    const removing = (async () => {
      await Promise.allSettled(earlier)
      const { fs, root } = this.host
      for (const name of [HEADS_FILE, OLD_HEADS_FILE]) if (fs.existsSync(`${root}/${name}`)) fs.unlinkSync(`${root}/${name}`)
      await syncDirectory(fs, root)
    })()
    this.removing = removing
    // Once done, nothing waits on it; a failure fails only the new logs waiting then (their flush reports it).
    const done = (): void => {
      if (this.removing === removing) this.removing = undefined
    }
    removing.then(done, () => {
      // The file may still be there: the next log made under the id tries again.
      this.deleted.add(id)
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
    // Ids deleted from here on may be named by this file too; those before are not.
    const before = [...this.deleted]
    const logs = [...this.host.logs()]
    const writer = HeadsFileWriter.open(this.host.fs, this.host.root)
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
    for (const id of before) this.deleted.delete(id)
    this.written = state
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
