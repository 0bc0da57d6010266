/**
 * What a log needs from its store: the store-wide pieces it writes through
 * and the group commit it reports appends to. Implemented by `GroupCommit`
 * (group-commit.ts), one object per store, so every call on the append path
 * goes to one class.
 */
import type { StorageError } from '../errors.js'
import type { FsPort } from '../fs-port.js'
import type { FdCache } from './fd-cache.js'
import type { FileShapeLog } from './file-log.js'
import type { Journal } from './journal.js'
import type { TailArena } from './tail-arena.js'
import type { FileWriter } from './write-back.js'

export interface LogHost {
  readonly fs: FsPort
  readonly fds: FdCache
  readonly chunkBytes: number
  /** Memory for write-behind tails and staged records. */
  readonly arena: TailArena
  /** Records a write to a registered log's file in the journal; undefined when the store keeps none. */
  readonly journal: Journal<FileShapeLog> | undefined
  /** Where write-backs go (write-back.ts). */
  readonly writer: FileWriter
  /** A number that increases with every append across the store. */
  nextSeq(): number
  /** The last successful flush's watermark and sequence number (see `FileShapeLog.catchUp`). */
  readonly publishedLsn: bigint
  readonly publishedSeq: number
  markDirty(log: FileShapeLog, bytes: number): void
  /** The log has a transaction boundary waiting to be published. */
  markUnpublished(log: FileShapeLog): void
  /** An append of transaction `tx` failed: the watermark must stay below it. */
  noteFault(log: FileShapeLog, tx: bigint): void
  /** An append at or above the faulted transaction succeeded. */
  clearFault(log: FileShapeLog, tx: bigint): void
  /** The log holds more than BACKLOG_BYTES not yet written back (log-write-back.ts). */
  noteBacklog(log: BackloggedLog): void
  /** A background write-back failed; the bytes stay in memory and the journal, and are tried again. */
  writeBackFailed(log: { readonly deleted: boolean }, err: StorageError): void
}

/** A log whose write-behind tail outgrew its write-backs (log-write-back.ts). */
export interface BackloggedLog {
  readonly backlogged: boolean
  catchUpWriteBack(): Promise<boolean>
}
