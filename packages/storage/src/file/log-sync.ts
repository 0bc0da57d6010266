/**
 * Making one log's own files durable: the fdatasyncs a flush without the
 * journal, a finishing snapshot and a checkpoint without syncfs use. The
 * group commit and the checkpointer both call these; neither owns them.
 */
import { fromSystemError } from '../errors.js'
import type { FsPort } from '../fs-port.js'
import type { FdCache } from './fd-cache.js'
import type { FileShapeLog } from './file-log.js'

// Enough to keep every thread-pool worker and the device queue busy.
const MAX_CONCURRENT_SYNCS = 64

/**
 * Syncs in flight at once. Each pins up to three descriptors, so this keeps a
 * flush of many dirty logs inside the descriptor budget; the thread pool runs
 * only a few at a time anyway.
 */
export function syncConcurrency(fds: FdCache): number {
  return Math.max(1, Math.min(MAX_CONCURRENT_SYNCS, Math.floor(fds.maxOpen / 3)))
}

/** fdatasync of log.dat and entries.idx, and of chunks.idx when something changed it since its last sync. */
export async function syncOwnFiles(fs: FsPort, fds: FdCache, log: FileShapeLog): Promise<void> {
  const chunks = log.chunksDirty
  log.chunksDirty = false
  try {
    await Promise.all([
      fds.useAsync(log.data, (fd) => fs.fdatasync(fd)),
      fds.useAsync(log.entries, (fd) => fs.fdatasync(fd)),
      chunks ? fds.useAsync(log.chunkFile, (fd) => fs.fdatasync(fd)) : undefined,
    ])
  } catch (err) {
    log.chunksDirty ||= chunks
    throw err
  }
}

/** A log writing through: its staged index into the files, then the files synced. */
export async function syncLog(fs: FsPort, fds: FdCache, log: FileShapeLog): Promise<void> {
  if (log.deleted) return
  log.writeIndex()
  await syncOwnFiles(fs, fds, log)
}

/** `step` for a log; it fails only while the log exists (a deleted log has nothing left to make durable). */
export async function unlessDeleted(log: FileShapeLog, step: () => Promise<void> | void, fail: (err: unknown) => Error): Promise<void> {
  if (log.deleted) return
  try {
    await step()
  } catch (err) {
    if (log.deleted) return
    throw fail(err)
  }
}

/** Writes back and syncs one log's files: for logs whose bytes the journal does not hold. */
export function syncFiles(fs: FsPort, fds: FdCache, log: FileShapeLog): Promise<void> {
  return unlessDeleted(
    log,
    async () => {
      await log.writeBackAll()
      await syncOwnFiles(fs, fds, log)
    },
    (err) => fromSystemError(err, `sync shape ${log.id}`),
  )
}
