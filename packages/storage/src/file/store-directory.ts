/**
 * The store's directory at open and at close: leftovers of the last run
 * removed (tmp/, trash/), every log in shapes/ (its buckets, shape-dirs.ts)
 * opened (from the heads file a clean close left, or by recovery's scan), a
 * damaged log moved to quarantine/, buckets left empty removed, and at close
 * the heads file written for the next open.
 */
import { constants } from 'node:os'
import { LOG_FILES, checkShapeId, isShapeId } from '../defaults.js'
import { StorageError, fromSystemError } from '../errors.js'
import { CHUNK_RECORD_BYTES, ENTRY_RECORD_BYTES, HEADER_BYTES, META_HEADER_BYTES, decodeMeta } from '../format.js'
import type { FsPort } from '../fs-port.js'
import type { FdCache } from './fd-cache.js'
import { FileShapeLog } from './file-log.js'
import type { HeadsEntry, HeadsListener } from './heads-file.js'
import type { LogHost } from './log-host.js'
import { EMPTY_HEAD } from './log-state.js'
import type { ChunkInfo } from './log-state.js'
import { recoverLog } from './recovery.js'
import { SHAPE_BUCKETS, bucketIndex, bucketName, bucketOf, dropEmptyBuckets, isBucketName, dirPrefix, listBucket, shapesRoot } from './shape-dirs.js'
import { StatBatches, type StatFiles, type StatParts, statInParts } from './stat-files.js'
import { nodeFs } from '../fs-port.js'
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
  readonly cleanOpened: number
  /** Ids the heads file names whose logs are no more (deleted before a crash, or set aside now). */
  readonly gone: string[]
  /** Logs whose files were there but not the ones their entry names, nor grown from them (scanned whole). */
  readonly mismatched: number
}

/** What `checkHeads` finds: the files are the entry's and end where it says, or grew from it. */
const EXACT = 1
const GROWN = 2

/**
 * A heads file's logs in its order, with what an open needs of each before
 * it stats their files: built once per file read (`planHeads`), and by a
 * standby ahead of its promotion, so that the promotion itself does no work
 * per log beyond checking the stats.
 */
export interface HeadsPlan {
  /** The entries whose ids a store may hold, in the file's order. */
  readonly entries: readonly HeadsEntry[]
  /** Each entry's directory relative to shapes/ (`<bucket>/<id>`). */
  readonly dirs: readonly string[]
  /** Each entry's bucket (`bucketIndex`). */
  readonly buckets: Uint8Array
}

export function planHeads(clean: ReadonlyMap<string, HeadsEntry>): HeadsPlan {
  const entries: HeadsEntry[] = []
  const dirs: string[] = []
  const buckets = new Uint8Array(clean.size)
  for (const entry of clean.values()) {
    // Not a log this store could hold: the open finds what its directory holds, if anything.
    if (!isShapeId(entry.id)) continue
    const bucket = bucketIndex(entry.id)
    buckets[entries.length] = bucket
    entries.push(entry)
    dirs.push(plannedDir(bucket, entry.id))
  }
  return { entries, dirs, buckets }
}

/**
 * The stats of a heads file's logs, started while the file is being decoded
 * (a `HeadsListener`): the thread pool stats the files of the first logs
 * while the opening thread decodes the rest, where statting only once the
 * plan is whole left one core idle through the decode and then shared both
 * between the stats and the checks. `plan` gives the decoded file's plan with
 * them, if it lists the directories they were started for (it does unless the
 * file names an id twice); otherwise they go unused.
 */
export class EarlyStats implements HeadsListener {
  private batches: StatBatches | undefined
  private readonly ids: string[] = []
  private readonly dirs: string[] = []
  private readonly buckets: number[] = []

  constructor(
    private readonly fs: FsPort,
    private readonly batch: StatFiles,
    private readonly root: string,
  ) {}

  begin(count: number): void {
    this.batches = new StatBatches(this.fs, this.batch, shapesRoot(this.root), CLEAN_FILES, count)
  }

  entry(id: string): void {
    // As `planHeads` does: an id no log of this store could have is not planned.
    if (this.batches === undefined || !isShapeId(id)) return
    const bucket = bucketIndex(id)
    const dir = plannedDir(bucket, id)
    this.ids.push(id)
    this.dirs.push(dir)
    this.buckets.push(bucket)
    this.batches.push(dir)
  }

  /** The plan of `clean` (as `planHeads` makes it) and its stats, or undefined when the decode named other directories. */
  plan(clean: ReadonlyMap<string, HeadsEntry>): { readonly plan: HeadsPlan; readonly stats: StatParts } | undefined {
    const batches = this.batches
    if (batches === undefined) return undefined
    const stats = batches.finish()
    const entries: HeadsEntry[] = []
    for (const entry of clean.values()) {
      if (!isShapeId(entry.id)) continue
      if (this.ids[entries.length] !== entry.id) return undefined
      entries.push(entry)
    }
    if (entries.length !== this.ids.length) return undefined
    return { plan: { entries, dirs: this.dirs, buckets: Uint8Array.from(this.buckets) }, stats }
  }
}

/** A planned log's directory relative to shapes/ (`HeadsPlan.dirs`). */
function plannedDir(bucket: number, id: string): string {
  return `${bucketName(bucket)}/${id}`
}

/**
 * Logs a standby built before it held the lock (`prepareLogs`), to be used
 * again by the open that promotes it, so that what was built on them (its
 * shapes) stays valid. A log is used again only for the same id, directory
 * and meta, and is then brought to what the open finds in place.
 */
export interface PreparedLogs {
  readonly logs: ReadonlyMap<string, FileShapeLog>
  /**
   * The logs were built from the very plan given to `loadLogs`: `aligned[i]`
   * is the log of its `i`th entry (so an entry they pass needs no restore,
   * and no lookup by id).
   */
  readonly aligned?: readonly FileShapeLog[] | undefined
}

/**
 * Logs built from a heads file's entries alone, for a store that does not
 * hold the lock yet (a standby: `FileLogStore.prepare` and `refresh`). Nothing
 * is opened or stat'ed: the open that promotes the store checks each against
 * its files (`loadLogs`). A log of `prepared` with the same id, directory and
 * meta is kept and brought to its entry's head in place; the others are
 * retired. `aligned[i]` is the log of `plan.entries[i]`.
 */
export function prepareLogs(root: string, logHost: LogHost, plan: HeadsPlan, prepared: ReadonlyMap<string, FileShapeLog>): { logs: Map<string, FileShapeLog>; aligned: FileShapeLog[] } {
  const logs = new Map<string, FileShapeLog>()
  const aligned: FileShapeLog[] = []
  const prefix = dirPrefix(root)
  plan.entries.forEach((entry, i) => {
    const kept = prepared.get(entry.id)
    let log: FileShapeLog
    const dir = prefix + plan.dirs[i]!
    const reused = reusable(kept, dir, entry.meta)
    if (reused !== undefined) {
      // Durable bytes are never rewritten: the same head is the same chunks.
      if (!reused.isAt(entry.head)) reused.restore(entry.head, entry.chunks)
      log = reused
    } else {
      // decodeHeads made the array for this log alone: no copy.
      log = new FileShapeLog(entry.id, dir, entry.meta, logHost, entry.chunks as ChunkInfo[], entry.head)
    }
    logs.set(entry.id, log)
    aligned.push(log)
  })
  retireUnused(prepared, logs)
  return { logs, aligned }
}

function retireUnused(prepared: ReadonlyMap<string, FileShapeLog> | undefined, used: ReadonlyMap<string, FileShapeLog>): void {
  if (prepared === undefined || prepared === used) return
  for (const [id, log] of prepared) if (used.get(id) !== log) log.retire()
}

/** The prepared log of the id to use again in `dir` with `meta`, if it is that. */
function reusable(kept: FileShapeLog | undefined, dir: string, meta: string): FileShapeLog | undefined {
  return kept !== undefined && kept.dir === dir && kept.metaText === meta ? kept : undefined
}

/**
 * Opens every log of the store: `plan`'s (the heads file's, heads-file.ts)
 * by checking their files' sizes and inodes against their entries (those
 * still as the entry says are opened without scanning them, those grown since
 * are scanned from its prefix on), and any other log in shapes/ by a scan.
 * `prepared`: logs to use again (`PreparedLogs`); those left unused are
 * retired. `gone` in the result: the plan's logs that are no more (deleted
 * before a crash, or set aside now). `started`: the stats of the plan's
 * files, started already (`EarlyStats`).
 *
 * Other logs are found without listing every bucket: a directory's link
 * count is two plus its subdirectories on the usual Linux file systems, so a
 * bucket whose count says it holds just the logs the plan found there holds
 * nothing else. Only buckets where the two differ (a log made since the
 * heads file, one it left out, a file system that counts otherwise) are
 * listed.
 */
export async function loadLogs(ctx: DirectoryContext, plan: HeadsPlan | undefined, prepared?: PreparedLogs, started?: StatParts): Promise<LoadedLogs> {
  const { fs, root } = ctx
  const top = shapesRoot(root)
  const prefix = dirPrefix(root)
  // Unfinished snapshots never became shapes: drop them.
  for (const name of fs.readdirSync(`${root}/tmp`)) {
    await fs.rm(`${root}/tmp/${name}`, { recursive: true, force: true })
  }
  ctx.trash.empty()
  const entries = plan?.entries ?? []
  // The native batch stats the real file system only: another port answers for its own files.
  const statParts = plan === undefined ? undefined : (started ?? statInParts(fs, fs === nodeFs ? ctx.statFiles : undefined, top, plan.dirs, CLEAN_FILES))
  const quarantined: string[] = []
  /** Logs each bucket holds as far as the open knows: the plan's found there, then what a listing adds. */
  const inBucket = new Uint32Array(SHAPE_BUCKETS)
  /** The plan's logs opened, in its order (undefined: not found in place, or set aside). */
  const opened: Array<FileShapeLog | undefined> = new Array<FileShapeLog | undefined>(entries.length)
  /** Whether the plan's `i`th log was found in its directory (opened or set aside). */
  const present = new Uint8Array(entries.length)
  let cleanOpened = 0
  let mismatched = 0
  let allReused = prepared?.aligned !== undefined && prepared.logs.size === entries.length
  /** A log that failed to open for a fault of its own is set aside (undefined); other errors fail the open. */
  const setAside = (id: string, dir: string, caught: unknown): undefined => {
    const err = unreadable(id, caught) ?? caught
    if (!(err instanceof StorageError) || (err.code !== 'corrupt_log' && err.code !== 'invalid_shape_id' && err.code !== 'unsupported_format')) {
      throw err
    }
    // A damaged log must not stop every other shape from being served; keep
    // it aside for inspection and let the server recreate the shape.
    fs.renameSync(dir, `${root}/quarantine/${id}.${Date.now()}`)
    quarantined.push(id)
    ctx.emitError(err)
    return undefined
  }
  // Scans a log (whole, or from `known`'s prefix): the only step of an open that awaits per log.
  const scan = async (id: string, dir: string, known: HeadsEntry | undefined, kept: FileShapeLog | undefined): Promise<FileShapeLog | undefined> => {
    try {
      // A prepared log's id was checked when it was prepared (a plan's were when it was planned: checking again costs little on this rare path).
      if (kept === undefined && known === undefined) checkShapeId(id)
      return await openLog(ctx, id, dir, known, kept)
    } catch (caught) {
      return setAside(id, dir, caught)
    }
  }
  if (plan !== undefined && statParts !== undefined) {
    const stats = statParts.out
    const fromPlan = prepared?.aligned
    let from = 0
    // The parts are waited for one by one: the first logs are checked while later ones are still stat'ed.
    for (const part of statParts.parts) {
      await part.done
      for (let i = from; i < part.to; i++) {
        const known = entries[i]!
        const found = checkHeads(stats, i, known)
        // Files of neither kind, if any is there: the log is scanned whole (or set aside); with none, the bucket's count decides.
        if (found === undefined && !anyFile(stats, i)) {
          allReused = false
          continue
        }
        present[i] = 1
        inBucket[plan.buckets[i]!]! += 1
        const kept = fromPlan !== undefined ? fromPlan[i] : prepared?.logs.get(known.id)
        const dir = kept?.dir ?? prefix + plan.dirs[i]!
        let log: FileShapeLog | undefined
        if (found === EXACT) {
          // No await here: with 100k logs, one per log would cost more than the rest of the check.
          try {
            log = openClean(known, dir, stats, i, kept, fromPlan !== undefined, ctx)
            cleanOpened++
          } catch (caught) {
            log = setAside(known.id, dir, caught)
          }
        } else {
          if (found === undefined) mismatched++
          log = await scan(known.id, dir, found === GROWN ? known : undefined, kept)
        }
        opened[i] = log
        if (log === undefined || log !== kept) allReused = false
      }
      from = part.to
    }
  }
  // Logs in shapes/ that the plan did not find: each bucket whose link count differs from what the plan found there is listed.
  const extra: Array<{ id: string; dir: string; bucket: number }> = []
  const listed: number[] = []
  for (const name of fs.readdirSync(top)) {
    if (!isBucketName(name)) {
      // The flat layout's place (its logs were moved at open): whatever is left there is scanned, or set aside.
      extra.push({ id: name, dir: `${top}/${name}`, bucket: -1 })
      continue
    }
    const b = Number.parseInt(name.slice(2), 16)
    let links: number | undefined
    try {
      links = fs.statSync(`${top}/${name}`).nlink
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue
      throw err
    }
    if (links !== undefined && links >= 2 && links - 2 === inBucket[b]) continue
    listed.push(b)
  }
  if (listed.length > 0) {
    // The plan's ids found in the buckets to list: only those are looked up.
    const toList = new Uint8Array(SHAPE_BUCKETS)
    for (const b of listed) toList[b] = 1
    const known = new Set<string>()
    for (let i = 0; i < entries.length; i++) if (present[i] === 1 && toList[plan!.buckets[i]!] === 1) known.add(entries[i]!.id)
    for (const b of listed) {
      const name = bucketName(b)
      const ids = listBucket(fs, root, name)
      for (const id of ids) if (!known.has(id)) extra.push({ id, dir: `${top}/${name}/${id}`, bucket: b })
    }
  }
  const logs = allReused && extra.length === 0 && quarantined.length === 0 ? (prepared!.logs as Map<string, FileShapeLog>) : new Map<string, FileShapeLog>()
  if (logs !== prepared?.logs) for (const log of opened) if (log !== undefined) logs.set(log.id, log)
  for (const { id, dir, bucket } of extra) {
    const log = await scan(id, dir, undefined, prepared?.logs.get(id))
    if (log !== undefined) {
      logs.set(id, log)
      if (bucket >= 0) inBucket[bucket]! += 1
    }
  }
  // The plan's logs not opened, unless a listing found them after all (their entry's files were all missing).
  const gone: string[] = []
  for (let i = 0; i < entries.length; i++) if (opened[i] === undefined && !logs.has(entries[i]!.id)) gone.push(entries[i]!.id)
  retireUnused(prepared?.logs, logs)
  // A bucket holds a log when one was opened there (one whose log was set aside may be empty now).
  const holding = new Set<string>()
  for (const log of quarantined.length === 0 ? [] : logs.values()) holding.add(bucketOf(log.id))
  if (quarantined.length === 0) for (let b = 0; b < SHAPE_BUCKETS; b++) if (inBucket[b]! > 0) holding.add(bucketName(b))
  dropEmptyBuckets(fs, root, holding)
  return { logs, quarantined, cleanOpened, gone, mismatched }
}

/** Whether any of the `i`th log's files was found. */
function anyFile(stats: Float64Array, i: number): boolean {
  const at = i * 2 * CLEAN_FILES.length
  for (let f = 0; f < CLEAN_FILES.length; f++) if (stats[at + 2 * f]! >= 0) return true
  return false
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
    log.setInodes(-1, -1, -1)
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
 * What the stats (`statAll`, no open) say of the `i`th log against its entry
 * in the heads file: its files' inodes when they are still the files the entry
 * names (the data file's inode) and end where it says, so the entry is its
 * head now; 'grown' when they are those files and grew (appends since: scanned
 * from the entry's prefix on); else undefined (scanned whole). Catches a file
 * missing, truncated, replaced or restored from a backup, and a log re-created
 * under the id; bytes rewritten in place at the same size are not looked for
 * here, as a scan would look only at headers and the last records.
 */
function checkHeads(stats: Float64Array, i: number, known: HeadsEntry): typeof EXACT | typeof GROWN | undefined {
  const { head } = known
  const at = i * 2 * CLEAN_FILES.length
  if (known.dataIno < 0 || stats[at + 1] !== known.dataIno || stats[at + 6] !== META_HEADER_BYTES + known.meta.length) return undefined
  const data = stats[at]!
  const entries = stats[at + 2]!
  const chunks = stats[at + 4]!
  const entriesEnd = HEADER_BYTES + head.entries * ENTRY_RECORD_BYTES
  const chunksEnd = HEADER_BYTES + head.closedChunks * CHUNK_RECORD_BYTES
  if (data === head.dataEnd && entries === entriesEnd && chunks === chunksEnd) return EXACT
  return data >= head.dataEnd && entries >= entriesEnd && chunks >= chunksEnd ? GROWN : undefined
}

/** `fromClean`: `kept` was built from this very entry. The inodes are the `i`th log's in `stats`. */
function openClean(known: HeadsEntry, dir: string, stats: Float64Array, i: number, kept: FileShapeLog | undefined, fromClean: boolean, ctx: DirectoryContext): FileShapeLog {
  let log = reusable(kept, dir, known.meta)
  if (log === undefined) {
    // decodeHeads made the array for this log alone: no copy.
    log = new FileShapeLog(known.id, dir, known.meta, ctx.logHost, known.chunks as ChunkInfo[], known.head)
  } else if (!fromClean && !log.isAt(known.head)) {
    log.restore(known.head, known.chunks)
  }
  // Known from the start, so no write (on the write-back thread, by path) lands in another file put at the same path.
  const at = i * 2 * CLEAN_FILES.length
  log.setInodes(stats[at + 1]!, stats[at + 3]!, stats[at + 5]!)
  log.registered = true
  return log
}
