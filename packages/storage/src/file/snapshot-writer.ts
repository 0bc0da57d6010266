/**
 * A new shape being built: its directory in tmp/ and the `SnapshotWriter`
 * that fills it. The writer's states:
 *
 *   open       snapshot rows are taken
 *   ended      the snapshot-end line is written; live appends allowed, finish() not called yet
 *   finishing  finish() called (queued for a flush, snapshot-finisher.ts); live appends allowed
 *   published  renamed into shapes/ (the log's floor is set)
 *   resolved   finish() resolved with the registered log
 *   dropped    aborted or failed: the directory is removed and the id is free again
 *
 * A log being built is not in the store's dirty or unpublished lists: the
 * flush that finishes it syncs it and registers it.
 */
import type { SnapshotWriter } from '../contract.js'
import { LOG_FILES } from '../defaults.js'
import { StorageError, fromSystemError } from '../errors.js'
import { encodeHeader, encodeMeta } from '../format.js'
import type { FsPort } from '../fs-port.js'
import { writeFully } from '../fs-port.js'
import { FileRef } from './fd-cache.js'
import { FileShapeLog } from './file-log.js'
import type { GroupCommit } from './group-commit.js'
import { EMPTY_HEAD } from './log-state.js'
import type { FinishingSnapshot } from './snapshot-finisher.js'

/** What a shape being built needs from its store. */
export interface SnapshotHost {
  readonly fs: FsPort
  /** The group commit the new log appends through, and whose flush finishes it. */
  readonly commit: GroupCommit
  /** The snapshot was dropped: its id is free again and the flush forgets the log. */
  dropped(log: FileShapeLog): void
  /** Whether a flush registered `log` in the store (an abort came after it). */
  isRegistered(log: FileShapeLog): boolean
  deleteShape(id: string): Promise<boolean>
}

/** Creates `tmpDir` with a new log's four files (headers and meta.bin). */
export function makeShapeDir(fs: FsPort, tmpDir: string, id: string, meta: Uint8Array): void {
  try {
    fs.mkdirSync(tmpDir, { recursive: true })
    const files: Array<[string, Buffer]> = [
      [LOG_FILES.data, encodeHeader('log')],
      [LOG_FILES.entries, encodeHeader('entries')],
      [LOG_FILES.chunks, encodeHeader('chunks')],
      [LOG_FILES.meta, encodeMeta(meta)],
    ]
    for (const [name, bytes] of files) {
      const fd = fs.openSync(`${tmpDir}/${name}`, 'wx', 0o644)
      try {
        writeFully(fs, fd, bytes, bytes.length, 0)
      } finally {
        fs.closeSync(fd)
      }
    }
  } catch (err) {
    void fs.rm(tmpDir, { recursive: true, force: true }).catch(() => {})
    throw fromSystemError(err, `create shape ${id}`)
  }
}

/** The writer of a new log in `tmpDir` (made by `makeShapeDir`). */
export function snapshotWriter(host: SnapshotHost, id: string, tmpDir: string, meta: Uint8Array): SnapshotWriter {
  const commit = host.commit
  // Copied into the log's own string: the caller's bytes are neither kept nor viewed. The id too, as a
  // flat string of its own: every journal record writes it, and the caller's may be a concatenation
  // (handles are built as one) or a slice of a longer string, one more object to reach its characters through.
  const log = new FileShapeLog(Buffer.from(id, 'latin1').toString('latin1'), tmpDir, meta, commit, [], EMPTY_HEAD)
  let state: 'open' | 'ended' | 'finishing' | 'published' | 'resolved' | 'dropped' = 'open'
  let finishing: FinishingSnapshot | undefined
  let settled: Promise<unknown> = Promise.resolve()
  const drop = async (): Promise<void> => {
    state = 'dropped'
    log.deleted = true
    host.dropped(log)
    log.retire()
    await host.fs.rm(tmpDir, { recursive: true, force: true })
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
    append: (rows, options) => {
      if (state !== 'open') throw new StorageError('invalid_append', `snapshot of shape ${id} is ${state}`)
      if (options?.closeChunk === true && rows.length === 0) throw new StorageError('invalid_append', `shape ${id}: closeChunk needs a row`)
      try {
        log.appendSnapshot(rows, undefined, options?.closeChunk === true)
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
        commit.finishSnapshot(finishing)
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
      if (commit.snapshots.withdraw(f)) {
        // No flush has it yet.
        f.reject(new StorageError('shape_deleted', `snapshot of shape ${id} was aborted`))
      }
      await settled
      // A flush registered the log before it saw the abort: remove it like any other.
      if (host.isRegistered(log)) await host.deleteShape(id)
    },
  }
}
