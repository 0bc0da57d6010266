/**
 * The clean-close heads file: what a writer that closed cleanly knew of every
 * log, so that the next open need not scan each log's files.
 *
 * Why: opening a log after a crash means finding its durable prefix (recovery.ts):
 * open and stat three files, read records and meta.bin, a dozen system calls per
 * log. With 100k logs that is most of the start-up time, paid on every
 * restart, crash or not. After a clean close nothing
 * needs finding: every log is synced and ends where its head says.
 *
 * The file is only ever trusted by the open that immediately follows the close
 * that wrote it, and that open removes it (durably: unlink, then fsync of the
 * directory) before the store changes anything. A crash at any later point
 * therefore finds no heads file and recovers every log by scanning, as before.
 * A file that is damaged, of another version, or written for another watermark
 * is removed and ignored. Its version follows FORMAT_VERSION, so a release that
 * changes the log formats also writes heads an older release will not use. A
 * log the close could not vouch for (a transaction still open, bytes not yet in
 * its files) is left out and scanned.
 *
 * Layout (magic "SLHD"), little-endian:
 *   0   16   header (format.ts)
 *   16  8    watermark    the store's durable LSN at the close
 *   24  4    count        logs that follow
 *   28  ...  per log: id length (1) and id (latin1); meta length (4) and meta;
 *             entries, dataEnd, last tx, last op (8 each); closed chunks,
 *             snapshot chunks, chunk count (4 each); per chunk: end tx, end op,
 *             end entry, end pos (8 each) and kind (1).
 *   end-4 4  check        crc32 of every byte before it, XOR salt
 */
import { crc32 } from 'node:zlib'
import type { LogOffset } from '@sluice/protocol'
import { StorageError, fromSystemError } from '../errors.js'
import { checkHeader, encodeHeader } from '../format.js'
import type { FsPort } from '../fs-port.js'
import type { ChunkInfo, HeadState } from './log-state.js'
import { replaceFileDurably, syncDirectory } from './watermark.js'

export const HEADS_FILE = 'heads'
const TEMP_FILE = 'heads.tmp'
const FIXED_BYTES = 28
const CHECK_BYTES = 4
const CHUNK_BYTES = 33
const SALT = 0x48ead5e1

export interface CleanLog {
  readonly id: string
  /** The meta bytes, one character per byte (FileShapeLog.metaText). */
  readonly meta: string
  readonly head: HeadState
  readonly chunks: readonly ChunkInfo[]
}

function logBytes(log: CleanLog): number {
  return 1 + log.id.length + 4 + log.meta.length + 32 + 12 + log.chunks.length * CHUNK_BYTES
}

export function encodeHeads(watermark: bigint, logs: readonly CleanLog[]): Buffer {
  let size = FIXED_BYTES + CHECK_BYTES
  for (const log of logs) size += logBytes(log)
  const buf = Buffer.alloc(size)
  encodeHeader('heads').copy(buf, 0)
  buf.writeBigUInt64LE(watermark, 16)
  buf.writeUInt32LE(logs.length, 24)
  let at = FIXED_BYTES
  for (const log of logs) {
    // Shape ids are at most 128 ASCII characters (defaults.ts); the length takes one byte.
    if (log.id.length > 255) throw new RangeError(`shape id of ${log.id.length} characters`)
    buf[at++] = log.id.length
    at += buf.write(log.id, at, 'latin1')
    buf.writeUInt32LE(log.meta.length, at)
    buf.write(log.meta, at + 4, 'latin1')
    at += 4 + log.meta.length
    const h = log.head
    buf.writeBigUInt64LE(BigInt(h.entries), at)
    buf.writeBigUInt64LE(BigInt(h.dataEnd), at + 8)
    buf.writeBigUInt64LE(h.last.tx, at + 16)
    buf.writeBigUInt64LE(h.last.op, at + 24)
    buf.writeUInt32LE(h.closedChunks, at + 32)
    buf.writeUInt32LE(h.snapshotChunks, at + 36)
    buf.writeUInt32LE(log.chunks.length, at + 40)
    at += 44
    for (const c of log.chunks) {
      buf.writeBigUInt64LE(c.end.tx, at)
      buf.writeBigUInt64LE(c.end.op, at + 8)
      buf.writeBigUInt64LE(BigInt(c.endEntry), at + 16)
      buf.writeBigUInt64LE(BigInt(c.endPos), at + 24)
      buf[at + 32] = c.kind
      at += CHUNK_BYTES
    }
  }
  buf.writeUInt32LE((crc32(buf.subarray(0, at)) ^ SALT) >>> 0, at)
  return buf
}

/** The logs of a heads file written at `watermark`, or why it cannot be used. */
export function decodeHeads(buf: Buffer, watermark: bigint): Map<string, CleanLog> | string {
  const problem = checkHeader('heads', buf)
  if (problem) return problem
  if (buf.length < FIXED_BYTES + CHECK_BYTES) return 'short'
  const end = buf.length - CHECK_BYTES
  if (buf.readUInt32LE(end) !== (crc32(buf.subarray(0, end)) ^ SALT) >>> 0) return 'check'
  if (buf.readBigUInt64LE(16) !== watermark) return 'written at another watermark'
  const count = buf.readUInt32LE(24)
  const logs = new Map<string, CleanLog>()
  let at = FIXED_BYTES
  const need = (n: number): boolean => at + n <= end
  const u64 = new U64Reader(buf)
  const ops = new U64Reader(buf)
  for (let i = 0; i < count; i++) {
    if (!need(1)) return 'short'
    const idLength = buf[at++]!
    if (!need(idLength + 4)) return 'short'
    const id = buf.toString('latin1', at, at + idLength)
    at += idLength
    const metaLength = buf.readUInt32LE(at)
    at += 4
    if (!need(metaLength + 44)) return 'short'
    // A string of its own: the file's buffer is not kept alive by 100k small views of it.
    const meta = buf.toString('latin1', at, at + metaLength)
    at += metaLength
    const last: LogOffset = { tx: u64.big(at + 16), op: ops.big(at + 24) }
    const head: HeadState = {
      entries: u64.number(at),
      dataEnd: u64.number(at + 8),
      last,
      closedChunks: buf.readUInt32LE(at + 32),
      snapshotChunks: buf.readUInt32LE(at + 36),
    }
    const chunkCount = buf.readUInt32LE(at + 40)
    at += 44
    if (chunkCount !== head.closedChunks || !need(chunkCount * CHUNK_BYTES)) return 'short'
    const chunks: ChunkInfo[] = []
    for (let c = 0; c < chunkCount; c++, at += CHUNK_BYTES) {
      const tx = u64.big(at)
      const op = ops.big(at + 8)
      chunks.push({
        // The last chunk usually ends where the log does: one offset object for both.
        end: tx === last.tx && op === last.op ? last : { tx, op },
        endEntry: u64.number(at + 16),
        endPos: u64.number(at + 24),
        kind: buf[at + 32]!,
      })
    }
    logs.set(id, { id, meta, head, chunks })
  }
  if (at !== end) return 'trailing bytes'
  return logs
}

/**
 * Reads the file's 64-bit fields without a BigInt per field: positions and
 * counts as numbers (they stay below 2^53), and offsets as BigInts reused
 * while the value repeats (a store's logs share their transactions; BigInts
 * are immutable, so sharing one is safe). A start with 100k logs reads
 * 600k of these.
 */
class U64Reader {
  private lastLow = -1
  private lastHigh = -1
  private lastBig = 0n
  constructor(private readonly buf: Buffer) {}

  number(at: number): number {
    return this.buf.readUInt32LE(at + 4) * 0x1_0000_0000 + this.buf.readUInt32LE(at)
  }

  big(at: number): bigint {
    const low = this.buf.readUInt32LE(at)
    const high = this.buf.readUInt32LE(at + 4)
    if (low !== this.lastLow || high !== this.lastHigh) {
      this.lastLow = low
      this.lastHigh = high
      this.lastBig = (BigInt(high) << 32n) | BigInt(low)
    }
    return this.lastBig
  }
}

/** Writes the heads file (temporary name, fdatasync, rename, directory fsync): the last step of a clean close. */
export async function writeHeads(fs: FsPort, root: string, watermark: bigint, logs: readonly CleanLog[]): Promise<void> {
  try {
    await replaceFileDurably(fs, root, HEADS_FILE, TEMP_FILE, encodeHeads(watermark, logs))
  } catch (err) {
    throw fromSystemError(err, 'write the heads file')
  }
}

/**
 * Takes the heads file a clean close left: reads it, then removes it for good
 * (unlink and directory fsync) before returning, so nothing the store does
 * afterwards can be undone by a crash into a state the file would misdescribe.
 * Returns undefined when there is none or it cannot be used; throws when it
 * cannot be removed (opening on would risk trusting it after a later crash).
 */
export async function takeHeads(fs: FsPort, root: string, watermark: bigint): Promise<Map<string, CleanLog> | undefined> {
  const path = `${root}/${HEADS_FILE}`
  try {
    if (fs.existsSync(`${root}/${TEMP_FILE}`)) fs.unlinkSync(`${root}/${TEMP_FILE}`)
    if (!fs.existsSync(path)) return undefined
    let decoded: Map<string, CleanLog> | string
    try {
      decoded = decodeHeads(fs.readFileSync(path), watermark)
    } catch (err) {
      decoded = `unreadable: ${(err as Error).message}`
    }
    fs.unlinkSync(path)
    await syncDirectory(fs, root)
    return typeof decoded === 'string' ? undefined : decoded
  } catch (err) {
    throw new StorageError('io_error', `cannot remove the heads file ${path}: ${(err as Error).message}`, { cause: err })
  }
}
