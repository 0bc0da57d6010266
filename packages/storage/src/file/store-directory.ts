/**
 * The store's directory at open and at close: leftovers of the last run
 * removed (tmp/, trash/), every log in shapes/ (its buckets, shape-dirs.ts)
 * opened (from the heads file a clean close left, or by recovery's scan), a
 * damaged log moved to quarantine/, buckets left empty removed, and at close
 * the heads file written for the next open.
 */
import { constants } from 'node:os'
import { LOG_FILES, checkShapeId } from '../defaults.js'
import { StorageError, fromSystemError } from '../errors.js'
import { CHUNK_RECORD_BYTES, ENTRY_RECORD_BYTES, HEADER_BYTES, META_HEADER_BYTES, decodeMeta } from '../format.js'
import type { FsPort } from '../fs-port.js'
import type { FdCache } from './fd-cache.js'
import { FileShapeLog } from './file-log.js'
import type { HeadsEntry } from './heads-file.js'
import type { LogHost } from './log-host.js'
import { EMPTY_HEAD } from './log-state.js'
import type { ChunkInfo } from './log-state.js'
import { recoverLog } from './recovery.js'
import { type ListedLog, dropEmptyBuckets, listLogs, shapeDir, shapesRoot } from './shape-dirs.js'
import { type ListedLogs, type StatFiles, type StatParts, statInParts } from './stat-files.js'
import type { Trash } from './trash.js'

/** What opening the logs needs. */
export interface DirectoryContext {
  readonly fs: FsPort
  readonly root: string
  readonly fds: FdCache
  /** The durable watermark: recovery cuts what lies past it. */
  readonly durable: bigint
  readonly logHost: LogHost
  readonly trash: Trash
  /** Stats the logs' files in one native call; only given with the real file system (the port's statSync otherwise). */
  readonly statFiles?: StatFiles | undefined
  emitError(err: StorageError): void
}

/** The logs an open found. */
export interface LoadedLogs {
  readonly logs: Map<string, FileShapeLog>
  /** Ids of logs that failed to open and were moved to quarantine/. */
  readonly quarantined: string[]
  /** Logs opened from the heads file a clean close left, without scanning their files. */
  cleanOpened: number
}

/** The inode of each of a log's files, as a stat at open found them. */
interface FileInodes {
  readonly data: number
  readonly entries: number
  readonly chunks: number
}

/**
 * Logs a standby built before it held the lock (`prepareLogs`), to be used
 * again by the open that promotes it, so that what was built on them (its
 * shapes) stays valid. A log is used again only for the same id, directory
 * and meta, and is then brought to what the open finds in place.
 */
export interface PreparedLogs {
  readonly logs: ReadonlyMap<string, FileShapeLog>
  /** The logs were built from the very entries given to `loadLogs` (so an entry they pass needs no restore). */
  readonly fromClean: boolean
}

/**
 * Logs built from a heads file's entries alone, for a store that does not
 * hold the lock yet (a standby: `FileLogStore.prepare` and `refresh`). Nothing
 * is opened or stat'ed: the open that promotes the store checks each against
 * its files (`loadLogs`). A log of `prepared` with the same id, directory and
 * meta is kept and brought to its entry's head in place; the others are
 * retired.
 */
export function prepareLogs(root: string, logHost: LogHost, entries: ReadonlyMap<string, HeadsEntry>, prepared: ReadonlyMap<string, FileShapeLog>): Map<string, FileShapeLog> {
  const logs = new Map<string, FileShapeLog>()
  for (const entry of entries.values()) {
    try {
      checkShapeId(entry.id)
    } catch {
      // Not a log this store could hold: the open finds what its directory holds, if anything.
      continue
    }
    const dir = shapeDir(root, entry.id)
    const kept = prepared.get(entry.id)
    if (kept !== undefined && kept.dir === dir && kept.metaText === entry.meta) {
      // Durable bytes are never rewritten: the same head is the same chunks.
      if (!kept.isAt(entry.head)) kept.restore(entry.head, entry.chunks)
      logs.set(entry.id, kept)
    } else {
      // decodeHeads made the array for this log alone: no copy.
      logs.set(entry.id, new FileShapeLog(entry.id, dir, entry.meta, logHost, entry.chunks as ChunkInfo[], entry.head))
    }
  }
  retireUnused(prepared, logs)
  return logs
}

function retireUnused(prepared: ReadonlyMap<string, FileShapeLog> | undefined, used: ReadonlyMap<string, FileShapeLog>): void {
  if (prepared === undefined) return
  for (const [id, log] of prepared) if (used.get(id) !== log) log.retire()
}

/** The prepared log of the id to use again in `dir` with `meta`, if it is that. */
function reusable(kept: FileShapeLog | undefined, dir: string, meta: string): FileShapeLog | undefined {
  return kept !== undefined && kept.dir === dir && kept.metaText === meta ? kept : undefined
}

/**
 * `clean`: the heads file's logs (heads-file.ts); those whose files are still
 * the ones it names and end where it says are opened without scanning them,
 * those whose files grew since are scanned from its prefix on.
 * `listed`: the logs listed and their files stat'ed already (`listAndStatLogs`), only given with `clean`.
 * `prepared`: logs to use again (`PreparedLogs`); those left unused are retired.
 */
export async function loadLogs(ctx: DirectoryContext, clean: Map<string, HeadsEntry> | undefined, listed?: ListedLogs, prepared?: PreparedLogs): Promise<LoadedLogs> {
  const { fs, root } = ctx
  const loaded: LoadedLogs = { logs: new Map(), quarantined: [], cleanOpened: 0 }
  // Unfinished snapshots never became shapes: drop them.
  for (const name of fs.readdirSync(`${root}/tmp`)) {
    await fs.rm(`${root}/tmp/${name}`, { recursive: true, force: true })
  }
  ctx.trash.empty()
  const logs = listed?.logs ?? listLogs(fs, root)
  // Every listed log's files at once, in CLEAN_FILES' order; only the heads file's entries are checked against them.
  const statParts = clean === undefined ? undefined : (listed?.stats ?? statListed(fs, ctx.statFiles, root, logs))
  const stats = statParts?.out
  // The parts of the stats are waited for one by one: the first logs are checked while later ones are stat'ed.
  let part = 0
  let statted = 0
  // Prepared logs used again (when all were, none is left to retire), and the buckets that keep a log.
  let reused = 0
  const holding = new Set<string>()
  let lastBucket = ''
  const bucketAt = shapesRoot(root).length + 1
  for (let i = 0; i < logs.length; i++) {
    const { id, dir } = logs[i]!
    if (statParts !== undefined && i >= statted) {
      while (statParts.parts[part]!.to <= i) part++
      await statParts.parts[part]!.done
      statted = statParts.parts[part]!.to
    }
    try {
      const kept = prepared?.logs.get(id)
      // A prepared log's id was checked when it was prepared.
      if (kept === undefined) checkShapeId(id)
      const known = clean?.get(id)
      const found = known === undefined || stats === undefined ? undefined : checkHeads(stats, i, known)
      if (found === undefined) {
        loaded.logs.set(id, await openLog(ctx, id, dir, undefined, kept))
      } else if (found === 'grown') {
        loaded.logs.set(id, await openLog(ctx, id, dir, known, kept))
      } else {
        loaded.logs.set(id, openClean(ctx, known!, dir, found, kept, prepared?.fromClean === true))
        loaded.cleanOpened++
      }
      if (kept !== undefined && loaded.logs.get(id) === kept) reused++
      // Listed bucket by bucket: a bucket's name is taken once per bucket, not per log.
      if (lastBucket === '' || !dir.startsWith(lastBucket, bucketAt)) {
        lastBucket = dir.slice(bucketAt, dir.indexOf('/', bucketAt))
        holding.add(lastBucket)
      }
    } catch (caught) {
      const err = unreadable(id, caught) ?? caught
      if (!(err instanceof StorageError) || (err.code !== 'corrupt_log' && err.code !== 'invalid_shape_id' && err.code !== 'unsupported_format')) {
        throw err
      }
      // A damaged log must not stop every other shape from being served; keep
      // it aside for inspection and let the server recreate the shape.
      fs.renameSync(dir, `${root}/quarantine/${id}.${Date.now()}`)
      loaded.quarantined.push(id)
      ctx.emitError(err)
    }
  }
  if (reused !== prepared?.logs.size) retireUnused(prepared?.logs, loaded.logs)
  dropEmptyBuckets(fs, root, holding)
  return loaded
}

/** EUCLEAN's number on Linux: not in Node's table of errno names. */
const LINUX_EUCLEAN = 117
const osErrno = constants.errno

/**
 * Errors by which the disk or the file system says a file's blocks or its
 * inode are damaged: EIO, and on Linux EBADMSG and EUCLEAN (ext4's and xfs's
 * "structure needs cleaning"), which libuv has no names for, so they are told
 * by number. They fail the one log whose files gave them, like a bad header:
 * the log is set aside and its shape made again from Postgres, where failing
 * the whole open would stop every other shape too. Errors of the store itself
 * (its journal, its directories) still fail the open.
 */
const DAMAGE_ERRNOS: ReadonlySet<number> = new Set([osErrno.EIO, ...(process.platform === 'linux' ? [osErrno.EBADMSG, LINUX_EUCLEAN] : [])])

function unreadable(id: string, err: unknown): StorageError | undefined {
  const sys = (err instanceof StorageError ? err.cause : err) as NodeJS.ErrnoException | undefined
  if (typeof sys?.errno !== 'number' || !DAMAGE_ERRNOS.has(Math.abs(sys.errno))) return undefined
  return new StorageError('corrupt_log', `shape ${id}: its files cannot be read (${sys.message})`, { cause: err })
}

/**
 * Opens a log by scanning its files: all of them, or (`known`, an entry of the
 * heads file for these very files) from that prefix on. Into a prepared log
 * of the same meta when there is one.
 */
async function openLog(ctx: DirectoryContext, id: string, dir: string, known: HeadsEntry | undefined, kept: FileShapeLog | undefined): Promise<FileShapeLog> {
  const meta = known?.meta ?? readLogMeta(ctx, id, dir).toString('latin1')
  let log = reusable(kept, dir, meta)
  if (log === undefined) {
    log = new FileShapeLog(id, dir, meta, ctx.logHost, [], EMPTY_HEAD)
  } else {
    // Its files are found by this open, as a new log's would be.
    log.data.ino = -1
    log.entries.ino = -1
    log.chunkFile.ino = -1
  }
  try {
    const files = { data: log.data, entries: log.entries, chunks: log.chunkFile }
    const found = await recoverLog(ctx.fs, ctx.fds, id, dir, ctx.durable, files, known === undefined ? undefined : { head: known.head, chunks: known.chunks as ChunkInfo[] })
    log.restore(found.head, found.chunks)
    log.registered = true
    return log
  } catch (err) {
    log.retire()
    throw err
  }
}

function readLogMeta(ctx: DirectoryContext, id: string, dir: string): Buffer {
  try {
    const decoded = decodeMeta(ctx.fs.readFileSync(`${dir}/${LOG_FILES.meta}`))
    if (typeof decoded === 'string') throw new StorageError('corrupt_log', `shape ${id}: meta.bin is damaged (${decoded})`)
    return decoded
  } catch (err) {
    if (err instanceof StorageError) throw err
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new StorageError('corrupt_log', `shape ${id}: meta.bin is missing from ${dir}`, { cause: err })
    // Damage (EIO) sets the log aside (`unreadable`); a lack of descriptors or of permission is no fault of the log's and fails the open.
    throw fromSystemError(err, `read meta.bin of shape ${id}`)
  }
}

/**
 * The files `checkHeads` checks, in the order their stats are laid out. The
 * heads file carries the meta, so meta.bin is not read; it is stat'ed all the
 * same, as a log without it could not be opened after a crash nor by a
 * follower.
 */
const CLEAN_FILES = [LOG_FILES.data, LOG_FILES.entries, LOG_FILES.chunks, LOG_FILES.meta] as const

/**
 * Lists shapes/ and starts the stats of its logs' files (natively, off the
 * event loop), for `loadLogs` after a clean close: the caller reads and
 * decodes the heads file meanwhile. Lists and stats only; changes nothing.
 */
export function listAndStatLogs(fs: FsPort, root: string, statFiles: StatFiles): ListedLogs {
  const logs = listLogs(fs, root)
  return { logs, stats: statListed(fs, statFiles, root, logs) }
}

/** The stats of the listed logs' files, each log's directory named relative to shapes/ (bucket and id). */
function statListed(fs: FsPort, statFiles: StatFiles | undefined, root: string, logs: readonly ListedLog[]): StatParts {
  const top = shapesRoot(root)
  const dirs = logs.map((log) => log.dir.slice(top.length + 1))
  return statInParts(fs, statFiles, top, dirs, CLEAN_FILES)
}

/**
 * What the stats (`statAll`, no open) say of the `i`th log against its entry
 * in the heads file: its files' inodes when they are still the files the entry
 * names (the data file's inode) and end where it says, so the entry is its
 * head now; 'grown' when they are those files and grew (appends since: scanned
 * from the entry's prefix on); else undefined (scanned whole). Catches a file
 * missing, truncated, replaced or restored from a backup, and a log re-created
 * under the id; bytes rewritten in place at the same size are not looked for
 * here, as a scan would look only at headers and the last records.
 */
function checkHeads(stats: Float64Array, i: number, known: HeadsEntry): FileInodes | 'grown' | undefined {
  const { head } = known
  const at = i * 2 * CLEAN_FILES.length
  if (known.dataIno < 0 || stats[at + 1] !== known.dataIno || stats[at + 6] !== META_HEADER_BYTES + known.meta.length) return undefined
  const data = stats[at]!
  const entries = stats[at + 2]!
  const chunks = stats[at + 4]!
  const entriesEnd = HEADER_BYTES + head.entries * ENTRY_RECORD_BYTES
  const chunksEnd = HEADER_BYTES + head.closedChunks * CHUNK_RECORD_BYTES
  if (data === head.dataEnd && entries === entriesEnd && chunks === chunksEnd) return { data: stats[at + 1]!, entries: stats[at + 3]!, chunks: stats[at + 5]! }
  return data >= head.dataEnd && entries >= entriesEnd && chunks >= chunksEnd ? 'grown' : undefined
}

/** `fromClean`: `kept` was built from this very entry. */
function openClean(ctx: DirectoryContext, known: HeadsEntry, dir: string, inodes: FileInodes, kept: FileShapeLog | undefined, fromClean: boolean): FileShapeLog {
  let log = reusable(kept, dir, known.meta)
  if (log === undefined) {
    // decodeHeads made the array for this log alone: no copy.
    log = new FileShapeLog(known.id, dir, known.meta, ctx.logHost, known.chunks as ChunkInfo[], known.head)
  } else if (!fromClean && !log.isAt(known.head)) {
    log.restore(known.head, known.chunks)
  }
  // Known from the start, so no write (on the write-back thread, by path) lands in another file put at the same path.
  log.data.ino = inodes.data
  log.entries.ino = inodes.entries
  log.chunkFile.ino = inodes.chunks
  log.registered = true
  return log
}
