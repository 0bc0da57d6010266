/**
 * Opening a log directory: find the last durable transaction and, for the
 * writer, cut everything after it.
 *
 * What a crash can leave: a log directory exists only once its snapshot was
 * synced, and every live record with `tx ≤ watermark` was synced before that
 * watermark was published. (A new log can hold transactions below the
 * watermark: they were synced in tmp/ before the rename, and from the rename
 * on the log takes none at or below it; see file-store.ts.) So the records
 * form a durable prefix (snapshot rows, then `tx ≤ W`), followed by anything
 * at all: records of later transactions, torn records, holes of zeros. A record is *durable* when its check passes and
 * its tx is 0 or at most W; that holds for a prefix and then never again, which
 * makes the cut point a binary search, not a scan.
 */
import type { FdCache } from './fd-cache.js'
import type { FileRef } from './fd-cache.js'
import { StorageError, fromSystemError } from '../errors.js'
import {
  CHUNK_RECORD_BYTES,
  CHUNK_SNAPSHOT,
  ENTRY_RECORD_BYTES,
  ENTRY_SNAPSHOT,
  ENTRY_TXN_END,
  HEADER_BYTES,
  checkHeader,
  readChunkRecord,
  readEntryRecord,
} from '../format.js'
import type { EntryRecord, FileKind } from '../format.js'
import type { FsPort } from '../fs-port.js'
import { readFully } from '../fs-port.js'
import type { ChunkInfo, HeadState } from './log-state.js'
import { EMPTY_HEAD } from './log-state.js'

export interface RecoveredLog {
  readonly head: HeadState
  readonly chunks: ChunkInfo[]
  /** File sizes differed from the durable head (the writer cut them). */
  readonly cut: boolean
}

interface Files {
  readonly data: FileRef
  readonly entries: FileRef
  readonly chunks: FileRef
}

function corrupt(id: string, what: string): StorageError {
  return new StorageError('corrupt_log', `shape ${id}: ${what}`)
}

/**
 * The file's size, after checking its header the first time the log is scanned.
 * Headers never change once written, so a follower catching up (every
 * watermark move) skips the read.
 */
function fileSize(fs: FsPort, fds: FdCache, id: string, ref: FileRef, kind: FileKind, checked: boolean): number {
  try {
    return headerCheckedSize(fs, fds, id, ref, kind, checked)
  } catch (err) {
    throw missingFile(fs, id, ref, err) ?? err
  }
}

function headerCheckedSize(fs: FsPort, fds: FdCache, id: string, ref: FileRef, kind: FileKind, checked: boolean): number {
  return fds.use(ref, (fd) => {
    if (checked) return fs.fstatSync(fd).size
    const buf = Buffer.alloc(HEADER_BYTES)
    const n = readFully(fs, fd, buf, 0, HEADER_BYTES, 0)
    const problem = checkHeader(kind, buf.subarray(0, n))
    if (problem === 'version') {
      throw new StorageError('unsupported_format', `shape ${id}: ${ref.path} has format version ${buf[4]}`)
    }
    if (problem) throw corrupt(id, `${ref.path} has a bad header (${problem})`)
    return fs.fstatSync(fd).size
  })
}

/**
 * A log file that cannot be opened because it is not there. In a directory
 * still in place that is damage (an operator's rm, a lost file after a disk
 * fault, a copy that skipped it): the log cannot be trusted, like one with a
 * bad header. With the directory gone too the log was deleted or moved (a
 * follower racing the writer), which is not damage.
 */
function missingFile(fs: FsPort, id: string, ref: FileRef, err: unknown): StorageError | undefined {
  const cause = err instanceof StorageError ? err.cause : err
  if ((cause as NodeJS.ErrnoException | undefined)?.code !== 'ENOENT') return undefined
  const path = ref.path
  const dir = path.slice(0, path.lastIndexOf('/'))
  if (!fs.existsSync(dir)) return new StorageError('shape_deleted', `shape ${id}: ${dir} is gone`, { cause: err })
  return new StorageError('corrupt_log', `shape ${id}: ${path.slice(dir.length + 1)} is missing from ${dir}`, { cause: err })
}

// Records after a failed one examined for signs of damage (see scanLog).
const DAMAGE_LOOKAHEAD = 64

const durable = (r: EntryRecord | undefined, lsn: bigint): r is EntryRecord => r !== undefined && (r.tx === 0n || r.tx <= lsn)

/**
 * Finds the durable head of a log for watermark `lsn`. Read-only: the caller
 * decides whether to cut. `known` skips a prefix already known durable (and the header checks already done).
 */
export function scanLog(fs: FsPort, fds: FdCache, id: string, files: Files, lsn: bigint, known?: { head: HeadState; chunks: ChunkInfo[] }): RecoveredLog {
  const checked = known !== undefined
  const dataSize = fileSize(fs, fds, id, files.data, 'log', checked)
  const entriesSize = fileSize(fs, fds, id, files.entries, 'entries', checked)
  const chunksSize = fileSize(fs, fds, id, files.chunks, 'chunks', checked)

  const total = Math.floor((entriesSize - HEADER_BYTES) / ENTRY_RECORD_BYTES)
  const from = known?.head.entries ?? 0

  // Binary search for the first non-durable record in [from, total).
  const one = Buffer.alloc(ENTRY_RECORD_BYTES)
  const recordAt = (fd: number, i: number): EntryRecord | undefined => {
    const n = readFully(fs, fd, one, 0, ENTRY_RECORD_BYTES, HEADER_BYTES + i * ENTRY_RECORD_BYTES)
    return n === ENTRY_RECORD_BYTES ? readEntryRecord(one, 0) : undefined
  }
  let count = fds.use(files.entries, (fd) => {
    let lo = from
    let hi = total
    while (lo < hi) {
      const mid = lo + Math.floor((hi - lo) / 2)
      if (durable(recordAt(fd, mid), lsn)) lo = mid + 1
      else hi = mid
    }
    return lo
  })

  // Damage is not a crash. A crash leaves, after the durable prefix, only
  // records of later transactions, torn ones and holes of zeros. So a failing
  // record that still reads as durable (snapshot flag, or 0 < tx ≤ watermark),
  // or a valid durable record further on, means the durable prefix itself was
  // damaged: refuse rather than cut away acknowledged data. (A tear cannot hit
  // the tx field: records start 16 bytes into a 32-byte grid, so every 512-byte
  // sector boundary falls at byte 16 of a record, after tx and op.)
  if (count < total) {
    fds.use(files.entries, (fd) => {
      const ahead = Math.min(total - count, DAMAGE_LOOKAHEAD)
      const buf = Buffer.alloc(ahead * ENTRY_RECORD_BYTES)
      const n = readFully(fs, fd, buf, 0, buf.length, HEADER_BYTES + count * ENTRY_RECORD_BYTES)
      for (let at = 0; at + ENTRY_RECORD_BYTES <= n; at += ENTRY_RECORD_BYTES) {
        const r = readEntryRecord(buf, at)
        const where = `entry record ${count + at / ENTRY_RECORD_BYTES}`
        if (r) {
          if (durable(r, lsn)) throw corrupt(id, `${where} is durable but follows a damaged one`)
          continue
        }
        if (at > 0) continue
        const tx = buf.readBigUInt64LE(at)
        const flags = buf[at + 24]!
        const zero = buf.subarray(at, at + ENTRY_RECORD_BYTES).every((b) => b === 0)
        if (!zero && (flags & ENTRY_SNAPSHOT || (tx > 0n && tx <= lsn))) {
          throw corrupt(id, `${where} fails its check but belongs to a durable transaction`)
        }
      }
    })
  }
  if (count === from && from === 0 && total > 0) throw corrupt(id, 'its first entry record is damaged')

  // The cut must sit on a transaction end with its bytes present. Both hold for
  // anything the engine wrote; walking back guards against a damaged tail.
  let last: EntryRecord | undefined
  fds.use(files.entries, (fd) => {
    while (count > from) {
      const r = recordAt(fd, count - 1)!
      if (r.flags & ENTRY_TXN_END && r.end <= dataSize) {
        last = r
        return
      }
      count--
    }
  })

  // Chunk records: a valid prefix, each ending inside the durable entries.
  const chunkTotal = Math.floor((chunksSize - HEADER_BYTES) / CHUNK_RECORD_BYTES)
  const chunks: ChunkInfo[] = known ? known.chunks.slice(0, known.head.closedChunks) : []
  let snapshotChunks = known?.head.snapshotChunks ?? 0
  if (chunkTotal > chunks.length) {
    fds.use(files.chunks, (fd) => {
      const buf = Buffer.alloc((chunkTotal - chunks.length) * CHUNK_RECORD_BYTES)
      const n = readFully(fs, fd, buf, 0, buf.length, HEADER_BYTES + chunks.length * CHUNK_RECORD_BYTES)
      for (let at = 0; at + CHUNK_RECORD_BYTES <= n; at += CHUNK_RECORD_BYTES) {
        const c = readChunkRecord(buf, at)
        if (!c || c.endEntry > count) break
        chunks.push({ end: { tx: c.endTx, op: c.endOp }, endEntry: c.endEntry, endPos: c.endPos, kind: c.kind })
        if (c.kind === CHUNK_SNAPSHOT) snapshotChunks++
      }
    })
  }

  let head: HeadState
  if (count === from && known) {
    head = { ...known.head, closedChunks: chunks.length, snapshotChunks }
  } else if (count === 0) {
    head = EMPTY_HEAD
  } else {
    if (!last) throw corrupt(id, 'no complete transaction found')
    head = { entries: count, dataEnd: last.end, last: { tx: last.tx, op: last.op }, closedChunks: chunks.length, snapshotChunks }
  }
  const cut =
    dataSize !== head.dataEnd ||
    entriesSize !== HEADER_BYTES + head.entries * ENTRY_RECORD_BYTES ||
    chunksSize !== HEADER_BYTES + head.closedChunks * CHUNK_RECORD_BYTES
  return { head, chunks, cut }
}

/**
 * The writer's open: scan (from `known` on, a prefix known durable), then cut
 * the files to the durable head and sync the cut, so that stale bytes can
 * never reappear behind later appends.
 */
export async function recoverLog(fs: FsPort, fds: FdCache, id: string, dir: string, lsn: bigint, files: Files, known?: { head: HeadState; chunks: ChunkInfo[] }): Promise<RecoveredLog> {
  const found = scanLog(fs, fds, id, files, lsn, known)
  if (!found.cut) return found
  const { head } = found
  const cuts: Array<[FileRef, number]> = [
    [files.data, head.dataEnd],
    [files.entries, HEADER_BYTES + head.entries * ENTRY_RECORD_BYTES],
    [files.chunks, HEADER_BYTES + head.closedChunks * CHUNK_RECORD_BYTES],
  ]
  for (const [ref, size] of cuts) {
    await fds.useAsync(ref, async (fd) => {
      try {
        if (fs.fstatSync(fd).size !== size) {
          fs.ftruncateSync(fd, size)
          await fs.fsync(fd)
        }
      } catch (err) {
        throw fromSystemError(err, `cut back shape ${id} in ${dir}`)
      }
    })
  }
  return found
}
