/**
 * The heads file: every log's head as the writer last recorded it, so that an
 * open need not scan each log's files.
 *
 * Why: opening a log after a crash means finding its durable prefix (recovery.ts):
 * open and stat three files, read records and meta.bin, a dozen system calls per
 * log. With 100k logs that is most of the start-up time (and of a standby's
 * takeover after a kill -9).
 *
 * The writer writes it at a clean close and, while it runs, every
 * `headsIntervalMs` that something was appended (heads-snapshots.ts). Each
 * log's entry is its published head at the moment it was taken: durable, so
 * every later state of the same log holds at least that prefix, unchanged
 * (durable bytes are never rewritten; a log re-created under its id has other
 * files). An open (after the journal's replay, which puts everything durable
 * into the files) therefore trusts an entry exactly when the log's files are
 * still the ones it names (the data file's inode) and end where it says
 * (sizes of the data, entries and chunk files, and of meta.bin): then nothing
 * was appended since, not even an undurable write-back for recovery to cut.
 * A log of the same inode whose files grew is scanned from the entry's
 * prefix on; any other is scanned whole. So a stale file is never wrong, only
 * less useful, and it stays in place across opens.
 *
 * A file that is damaged, of another version, or written at a watermark past
 * the store's is removed and ignored. Its version moves with the log formats
 * (2 since entries name their data file's inode), so a release that changes
 * them also writes heads an older release will not use. A log that cannot
 * vouch for its files (deleted, or with no known inode) is left out and
 * scanned.
 *
 * Lineage. A standby builds its logs from the file it last read, and at its
 * promotion finds a newer one in place when the writer wrote one since (at
 * its close, say). The entries it holds are still true of their logs, as
 * lower bounds, unless a log was made again under an id deleted since they
 * were taken: inode numbers are reused, so such a log could pass for the
 * one an entry names. A writer draws a random lineage at open and records
 * it in every file it writes; it draws a new one (and removes the file in
 * place) when it makes a log under an id deleted in its lineage. Two files of
 * one lineage therefore have no such log between them, and the standby
 * checks its entries against the files without reading the newer one.
 *
 * Layout (magic "SLHD", version 2), little-endian; what is known only once
 * every entry was taken comes last, so the file is written as it is encoded,
 * a batch at a time, and never held whole in memory:
 *   0   16   header (format.ts); bytes 8-15: the lineage (below; 0 in files
 *             of earlier builds, which readers ignore)
 *   16  ...  per log: id length (1) and id (latin1); meta length (4) and meta;
 *             entries, dataEnd, last tx, last op, data file inode (8 each);
 *             closed chunks, snapshot chunks, chunk count (4 each); per chunk:
 *             end tx, end op, end entry, end pos (8 each) and kind (1).
 *   end-16 8 watermark    the store's durable LSN when the last entry was taken
 *   end-8  4 count        logs before it
 *   end-4  4 check        crc32 of every byte before it but the lineage's
 *                          (which is rewritten in place, `patchLineage`), XOR
 *                          salt; of every byte before it in a file without
 *                          a lineage (0: written by an earlier build)
 */
import { randomBytes } from 'node:crypto'
import { crc32 } from 'node:zlib'
import type { LogOffset } from '@sluice/protocol'
import { fromSystemError } from '../errors.js'
import { checkHeader, encodeHeader, small } from '../format.js'
import type { FsPort } from '../fs-port.js'
import type { ChunkInfo, HeadState } from './log-state.js'
import { readFully, writeFully } from '../fs-port.js'
import { syncDirectory } from './watermark.js'

export const HEADS_FILE = 'heads'
const TEMP_FILE = 'heads.tmp'
/** The file a new one replaces, moved aside until it is removed off the event loop (`HeadsFileWriter.finish`). */
export const OLD_HEADS_FILE = 'heads.old'
const HEADER_BYTES = 16
/** Watermark, count and check. */
const TRAILER_BYTES = 16
const CHUNK_BYTES = 33
const SALT = 0x48ead5e1

export interface HeadsEntry {
  readonly id: string
  /** The meta bytes, one character per byte (FileShapeLog.metaText). */
  readonly meta: string
  readonly head: HeadState
  readonly chunks: readonly ChunkInfo[]
  /** The inode of the log's data file when the entry was taken: a log re-created under the id has another. */
  readonly dataIno: number
}

function logBytes(log: HeadsEntry): number {
  return 1 + log.id.length + 4 + log.meta.length + 40 + 12 + log.chunks.length * CHUNK_BYTES
}

/** Where the header holds the lineage (see the top of this file). */
const LINEAGE_AT = 8

/** The crc32 of the file's first `end` bytes as its check covers them: without the lineage, unless it is 0. */
function bodyCheck(buf: Buffer, end: number): number {
  if (buf.readBigUInt64LE(LINEAGE_AT) === 0n) return crc32(buf.subarray(0, end))
  return crc32(buf.subarray(HEADER_BYTES, end), crc32(buf.subarray(0, LINEAGE_AT)))
}

function headsHeader(lineage: bigint): Buffer {
  const header = encodeHeader('heads')
  header.writeBigUInt64LE(lineage, LINEAGE_AT)
  return header
}

/** A new lineage: random, never 0 (the lineage of files of earlier builds). */
export function newLineage(): bigint {
  let lineage = 0n
  while (lineage === 0n) lineage = randomBytes(8).readBigUInt64LE(0)
  return lineage
}

/** A whole heads file for `logs` (tests; the store streams it, see `HeadsFileWriter`). */
export function encodeHeads(watermark: bigint, logs: readonly HeadsEntry[], lineage = 0n): Buffer {
  const body = Buffer.concat([headsHeader(lineage), encodeHeadsPart(logs), Buffer.alloc(TRAILER_BYTES)])
  writeTrailer(body, body.length - TRAILER_BYTES, watermark, logs.length, bodyCheck(body, body.length - TRAILER_BYTES))
  return body
}

/** Watermark and count at `at`, then the check over everything before it (`crc` covers what precedes `at`). */
function writeTrailer(buf: Buffer, at: number, watermark: bigint, count: number, crc: number): void {
  buf.writeBigUInt64LE(watermark, at)
  buf.writeUInt32LE(count, at + 8)
  buf.writeUInt32LE((crc32(buf.subarray(at, at + 12), crc) ^ SALT) >>> 0, at + 12)
}

/**
 * A count or position (below 2^53) as a 64-bit field, from two 32-bit
 * halves: no BigInt per field (the reading side, `U64Reader`, does the same);
 * a store of 100k logs writes 500k of these each time.
 */
function writeNumber64(buf: Buffer, n: number, at: number): void {
  buf.writeUInt32LE(n % 0x1_0000_0000, at)
  buf.writeUInt32LE(Math.floor(n / 0x1_0000_0000), at + 4)
}

/** The per-log records of `logs`, as they follow the header: in `scratch` when it is large enough (a view of it). */
export function encodeHeadsPart(logs: readonly HeadsEntry[], scratch?: Buffer): Buffer {
  let size = 0
  for (const log of logs) size += logBytes(log)
  const buf = scratch !== undefined && scratch.length >= size ? scratch.subarray(0, size) : Buffer.alloc(size)
  let at = 0
  for (const log of logs) {
    // Shape ids are at most 128 ASCII characters (defaults.ts); the length takes one byte.
    if (log.id.length > 255) throw new RangeError(`shape id of ${log.id.length} characters`)
    buf[at++] = log.id.length
    at += buf.write(log.id, at, 'latin1')
    buf.writeUInt32LE(log.meta.length, at)
    buf.write(log.meta, at + 4, 'latin1')
    at += 4 + log.meta.length
    const h = log.head
    writeNumber64(buf, h.entries, at)
    writeNumber64(buf, h.dataEnd, at + 8)
    buf.writeBigUInt64LE(h.last.tx, at + 16)
    buf.writeBigUInt64LE(h.last.op, at + 24)
    writeNumber64(buf, log.dataIno, at + 32)
    buf.writeUInt32LE(h.closedChunks, at + 40)
    buf.writeUInt32LE(h.snapshotChunks, at + 44)
    buf.writeUInt32LE(log.chunks.length, at + 48)
    at += 52
    for (const c of log.chunks) {
      buf.writeBigUInt64LE(c.end.tx, at)
      buf.writeBigUInt64LE(c.end.op, at + 8)
      writeNumber64(buf, c.endEntry, at + 16)
      writeNumber64(buf, c.endPos, at + 24)
      buf[at + 32] = c.kind
      at += CHUNK_BYTES
    }
  }
  return buf
}

/**
 * The logs of a heads file, or why it cannot be used; `watermark` is the
 * store's durable one (a file written past it describes another store).
 * `previous`: an earlier file of the same store as decoded with `layout`,
 * whose entries are used again (the same objects) where this file's records
 * are byte for byte theirs: a standby reading the writer's next file decodes
 * only the logs that changed. `layout`, when given, gets the entries in the
 * file's order and where each one's record starts.
 */
export function decodeHeads(buf: Buffer, watermark: bigint, previous?: DecodedHeads, layout?: HeadsLayout, listener?: HeadsListener): Map<string, HeadsEntry> | string {
  const problem = checkHeader('heads', buf)
  if (problem) return problem
  if (buf.length < HEADER_BYTES + TRAILER_BYTES) return 'short'
  const check = buf.length - 4
  if (buf.readUInt32LE(check) !== (crc32(buf.subarray(check - 12, check), bodyCheck(buf, check - 12)) ^ SALT) >>> 0) return 'check'
  const end = buf.length - TRAILER_BYTES
  if (buf.readBigUInt64LE(end) > watermark) return 'written past the store\'s watermark'
  const count = buf.readUInt32LE(end + 8)
  listener?.begin(count)
  const logs = new Map<string, HeadsEntry>()
  let at = HEADER_BYTES
  const need = (n: number): boolean => at + n <= end
  const u64 = new U64Reader(buf)
  const ops = new U64Reader(buf)
  const earlier = previous === undefined ? undefined : new EarlierWalk(previous)
  // Each meta is a slice of one string of the whole file: a string that large is made outside the
  // V8 heap, and a slice is a small object pointing into it, so an open of 100k logs hands the
  // young-generation collector 100k small objects to copy, not 100k copies of their metas. The
  // string lives while any log opened from this file does (it is the size of the metas plus ~150
  // bytes a log). A standby's re-read (`previous`) makes few new entries: those copy their metas.
  const text = previous === undefined ? buf.toString('latin1') : undefined
  for (let i = 0; i < count; i++) {
    const same = earlier?.match(buf, at, end)
    if (same !== undefined) {
      listener?.entry(same.id)
      logs.set(same.id, same)
      layout?.order.push(same)
      layout?.starts.push(at)
      at += logBytes(same)
      continue
    }
    const start = at
    if (!need(1)) return 'short'
    const idLength = buf[at++]!
    if (!need(idLength + 4)) return 'short'
    const id = buf.toString('latin1', at, at + idLength)
    listener?.entry(id)
    at += idLength
    const metaLength = buf.readUInt32LE(at)
    at += 4
    if (!need(metaLength + 52)) return 'short'
    const meta = text === undefined ? buf.toString('latin1', at, at + metaLength) : text.slice(at, at + metaLength)
    at += metaLength
    const last: LogOffset = { tx: u64.big(at + 16), op: ops.big(at + 24) }
    const head: HeadState = {
      entries: u64.number(at),
      dataEnd: u64.number(at + 8),
      last,
      closedChunks: buf.readUInt32LE(at + 40),
      snapshotChunks: buf.readUInt32LE(at + 44),
    }
    const dataIno = u64.number(at + 32)
    const chunkCount = buf.readUInt32LE(at + 48)
    at += 52
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
    const entry = { id, meta, head, chunks, dataIno }
    logs.set(id, entry)
    layout?.order.push(entry)
    layout?.starts.push(start)
  }
  if (at !== end) return 'trailing bytes'
  return logs
}

/**
 * Hears a decode's entries as it reaches them (ids in the file's order, the
 * count first): an open starts its stats of their files meanwhile.
 */
export interface HeadsListener {
  begin(count: number): void
  entry(id: string): void
}

/** A heads file's entries in the file's order, and where each one's record starts. */
export interface HeadsLayout {
  readonly order: HeadsEntry[]
  readonly starts: number[]
}

/** A heads file decoded, with its bytes and its layout. */
export interface DecodedHeads {
  readonly logs: ReadonlyMap<string, HeadsEntry>
  readonly bytes: Buffer
  readonly order: readonly HeadsEntry[]
  readonly starts: readonly number[]
}

/**
 * An earlier heads file walked beside a new one (`decodeHeads`). The writer
 * lists its logs in the same order each time, so the new file's next record
 * is first compared with the earlier file's next one, byte for byte, without
 * reading its id; only when that fails is the record's id looked up (a log
 * came, went or changed), and the walk goes on from there.
 */
class EarlierWalk {
  private next = 0
  private index: Map<string, number> | undefined

  constructor(private readonly previous: DecodedHeads) {}

  /** The earlier entry whose record is byte for byte the one at `at`, if there is one. */
  match(buf: Buffer, at: number, end: number): HeadsEntry | undefined {
    if (at >= end) return undefined
    if (this.equalAt(this.next, buf, at, end)) return this.previous.order[this.next++]
    const idLength = buf[at]!
    if (at + 1 + idLength > end) return undefined
    const id = buf.toString('latin1', at + 1, at + 1 + idLength)
    if (this.index === undefined) {
      this.index = new Map()
      this.previous.order.forEach((entry, k) => this.index!.set(entry.id, k))
    }
    const k = this.index.get(id)
    if (k === undefined) return undefined
    this.next = k + 1
    return this.equalAt(k, buf, at, end) ? this.previous.order[k] : undefined
  }

  private equalAt(k: number, buf: Buffer, at: number, end: number): boolean {
    const entry = this.previous.order[k]
    if (entry === undefined) return false
    const size = logBytes(entry)
    const from = this.previous.starts[k]!
    return at + size <= end && buf.compare(this.previous.bytes, from, from + size, at, at + size) === 0
  }
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
    const high = this.buf.readUInt32LE(at + 4)
    const low = this.buf.readUInt32LE(at)
    return high === 0 ? small(low) : high * 0x1_0000_0000 + low
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

/**
 * Writes the heads file as it is encoded, part by part, under a temporary
 * name (the check carried along), then fdatasync, rename over the old file
 * and fsync of the directory: a crash leaves the old file or the new one.
 * Nothing of it is held whole in memory (with 100k logs it is about 15 MB,
 * and buffers that large, counted as V8 external memory, start full
 * collections of the whole heap).
 */
export class HeadsFileWriter {
  private at = 0
  private crc = 0
  private count = 0

  private constructor(
    private readonly fs: FsPort,
    private readonly root: string,
    private readonly fd: number,
  ) {}

  static open(fs: FsPort, root: string, lineage: bigint): HeadsFileWriter {
    let fd: number
    try {
      fd = fs.openSync(`${root}/${TEMP_FILE}`, 'w', 0o644)
    } catch (err) {
      throw fromSystemError(err, 'write the heads file')
    }
    const writer = new HeadsFileWriter(fs, root, fd)
    const header = headsHeader(lineage)
    writer.append(header, 0)
    // The check leaves the lineage out (see the layout at the top), unless it is 0.
    if (lineage !== 0n) writer.crc = crc32(header.subarray(0, LINEAGE_AT))
    return writer
  }

  /** Writes `bytes`, the records of `logs` logs (or the header). */
  append(bytes: Buffer, logs: number): void {
    try {
      writeFully(this.fs, this.fd, bytes, bytes.length, this.at)
    } catch (err) {
      throw fromSystemError(err, 'write the heads file')
    }
    this.crc = crc32(bytes, this.crc)
    this.at += bytes.length
    this.count += logs
  }

  /** Ends the file at `watermark` and puts it in place durably. */
  async finish(watermark: bigint): Promise<void> {
    const trailer = Buffer.alloc(TRAILER_BYTES)
    writeTrailer(trailer, 0, watermark, this.count, this.crc)
    try {
      writeFully(this.fs, this.fd, trailer, trailer.length, this.at)
      await this.fs.fdatasync(this.fd)
      this.fs.closeSync(this.fd)
      // A rename over the old file would free its blocks (15 MB with 100k logs, about 20 ms) on the event
      // loop: it is moved aside and removed on the thread pool. A crash in between leaves only the old
      // one, which an open takes back (`readHeads`): older, not wrong.
      const heads = `${this.root}/${HEADS_FILE}`
      const aside = this.fs.existsSync(heads)
      if (aside) this.fs.renameSync(heads, `${this.root}/${OLD_HEADS_FILE}`)
      this.fs.renameSync(`${this.root}/${TEMP_FILE}`, heads)
      await syncDirectory(this.fs, this.root)
      if (aside) await this.fs.rm(`${this.root}/${OLD_HEADS_FILE}`, { recursive: true, force: true })
    } catch (err) {
      this.abort()
      throw fromSystemError(err, 'write the heads file')
    }
  }

  /** Gives up: the temporary file goes, the file in place stays. */
  abort(): void {
    try {
      this.fs.closeSync(this.fd)
    } catch {
      // Closed by `finish` already.
    }
    try {
      this.fs.unlinkSync(`${this.root}/${TEMP_FILE}`)
    } catch {
      // Renamed already, or never there: nothing to remove.
    }
  }
}

/**
 * Gives the heads file in place (and one a write moved aside) another lineage,
 * durably, without rewriting it: its entries stay true, and a standby that
 * read an earlier file of the old lineage no longer takes this one for a
 * successor of its own (heads-snapshots.ts). A file without a lineage, or
 * none, is left as it is.
 */
export async function patchLineage(fs: FsPort, root: string, lineage: bigint): Promise<void> {
  for (const name of [HEADS_FILE, OLD_HEADS_FILE]) {
    let fd: number
    try {
      fd = fs.openSync(`${root}/${name}`, 'r+')
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue
      throw err
    }
    try {
      const header = Buffer.alloc(HEADER_BYTES)
      if (readFully(fs, fd, header, 0, HEADER_BYTES, 0) !== HEADER_BYTES || checkHeader('heads', header) !== undefined) continue
      if (header.readBigUInt64LE(LINEAGE_AT) === 0n) continue
      const bytes = Buffer.alloc(8)
      bytes.writeBigUInt64LE(lineage, 0)
      writeFully(fs, fd, bytes, 8, LINEAGE_AT)
      await fs.fdatasync(fd)
    } finally {
      fs.closeSync(fd)
    }
  }
}

/** Which heads file is on disk: inode, size and trailer. A new file is a new inode, and its trailer's check tells apart two files that got the same one. */
export interface HeadsVersion {
  readonly ino: number
  readonly size: number
  readonly trailer: string
  /** Its writer's lineage (see the top of this file); 0 when unknown. */
  readonly lineage: bigint
}

/** Whether the entries of file `a` are lower bounds of the logs when file `b` is in place: the same file, or one of the same lineage. */
export function sameHeadsLineage(a: HeadsVersion | undefined, b: HeadsVersion | undefined): boolean {
  return a !== undefined && b !== undefined && a.lineage !== 0n && a.lineage === b.lineage
}

function lineageOf(header: Buffer, got: number): bigint {
  return got >= HEADER_BYTES && checkHeader('heads', header) === undefined ? header.readBigUInt64LE(LINEAGE_AT) : 0n
}

export function sameHeadsVersion(a: HeadsVersion | undefined, b: HeadsVersion | undefined): boolean {
  return a !== undefined && b !== undefined && a.ino === b.ino && a.size === b.size && a.trailer === b.trailer
}

/** A heads file as read: its logs (or why they cannot be used), the watermark it was written at, and which file it was. */
export interface HeadsRead {
  readonly logs: Map<string, HeadsEntry> | string
  readonly watermark: bigint
  readonly version: HeadsVersion
}

/** A usable heads file as `peekHeads` found it. */
export type PeekedHeads = HeadsRead & DecodedHeads & { readonly logs: Map<string, HeadsEntry> }

/** The whole file at `path` with its version, or undefined when there is none. Inode and bytes from one descriptor: the writer may replace the file meanwhile. */
function readHeadsAt(fs: FsPort, path: string, watermark: bigint, previous?: DecodedHeads, layout?: HeadsLayout, listener?: HeadsListener): (HeadsRead & { readonly bytes: Buffer }) | undefined {
  let fd: number
  try {
    fd = fs.openSync(path, 'r')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
  try {
    const { ino, size } = fs.fstatSync(fd)
    const buf = Buffer.allocUnsafe(size)
    const got = readFully(fs, fd, buf, 0, size, 0)
    const bytes = got === size ? buf : buf.subarray(0, got)
    const version = { ino, size: got, trailer: got >= TRAILER_BYTES ? bytes.toString('hex', got - TRAILER_BYTES) : '', lineage: lineageOf(bytes, got) }
    const written = got >= HEADER_BYTES + TRAILER_BYTES ? bytes.readBigUInt64LE(got - TRAILER_BYTES) : 0n
    let logs: Map<string, HeadsEntry> | string
    try {
      logs = decodeHeads(bytes, watermark, previous, layout, listener)
    } catch (err) {
      logs = `unreadable: ${(err as Error).message}`
    }
    return { logs, watermark: written, version, bytes }
  } finally {
    fs.closeSync(fd)
  }
}

/** The version of the heads file in place, without reading it whole; undefined when there is none. */
export function headsVersion(fs: FsPort, root: string): HeadsVersion | undefined {
  let fd: number
  try {
    fd = fs.openSync(`${root}/${HEADS_FILE}`, 'r')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw fromSystemError(err, `open the heads file in ${root}`)
  }
  try {
    const { ino, size } = fs.fstatSync(fd)
    const trailer = Buffer.alloc(TRAILER_BYTES)
    const got = size >= TRAILER_BYTES ? readFully(fs, fd, trailer, 0, TRAILER_BYTES, size - TRAILER_BYTES) : 0
    const header = Buffer.alloc(HEADER_BYTES)
    const headerGot = readFully(fs, fd, header, 0, HEADER_BYTES, 0)
    return { ino, size, trailer: got === TRAILER_BYTES ? trailer.toString('hex') : '', lineage: lineageOf(header, headerGot) }
  } catch (err) {
    throw fromSystemError(err, `read the heads file in ${root}`)
  } finally {
    fs.closeSync(fd)
  }
}

/**
 * Puts the heads file where an open expects it, for the writer that holds the
 * lock: removes a write's temporary file and takes back the file a crash left
 * moved aside (`HeadsFileWriter.finish`).
 */
export function tidyHeads(fs: FsPort, root: string): void {
  const path = `${root}/${HEADS_FILE}`
  const old = `${root}/${OLD_HEADS_FILE}`
  try {
    if (fs.existsSync(`${root}/${TEMP_FILE}`)) fs.unlinkSync(`${root}/${TEMP_FILE}`)
    // Only the file a write moved aside: the crash came before its successor took its name.
    if (fs.existsSync(old)) {
      if (fs.existsSync(path)) fs.unlinkSync(old)
      else fs.renameSync(old, path)
    }
  } catch (err) {
    throw fromSystemError(err, `tidy the heads file in ${root}`)
  }
}

/**
 * The heads file's logs, for the writer (after `tidyHeads`), or undefined
 * when there is none or it cannot be used (such a file is removed: the next
 * writer replaces it anyway). Leaves a good file in place: it stays true of
 * every log it vouches for (see the top of this file), so a crash right after
 * this open still finds it.
 */
export function readHeads(fs: FsPort, root: string, watermark: bigint, previous?: DecodedHeads, listener?: HeadsListener): { logs: Map<string, HeadsEntry>; version: HeadsVersion } | undefined {
  const path = `${root}/${HEADS_FILE}`
  try {
    const read = readHeadsAt(fs, path, watermark, previous, undefined, listener)
    if (read === undefined) return undefined
    if (typeof read.logs !== 'string') return { logs: read.logs, version: read.version }
    fs.unlinkSync(path)
    return undefined
  } catch (err) {
    throw fromSystemError(err, `read the heads file ${path}`)
  }
}

/**
 * The heads file as a process that does not hold the lock finds it (a standby
 * preparing to take over, `FileLogStore.prepare`): changes nothing. Reads the
 * file a write moved aside when there is none in place (the write is between
 * its renames, or a crash came there). Undefined when there is no usable file.
 * Not checked against the store's watermark, which only the lock holder's
 * replay knows: the caller checks `watermark` then.
 */
export function peekHeads(fs: FsPort, root: string, previous?: DecodedHeads): PeekedHeads | undefined {
  for (const name of [HEADS_FILE, OLD_HEADS_FILE]) {
    const layout: HeadsLayout = { order: [], starts: [] }
    let read: (HeadsRead & { readonly bytes: Buffer }) | undefined
    try {
      read = readHeadsAt(fs, `${root}/${name}`, 0xffff_ffff_ffff_ffffn, previous, layout)
    } catch (err) {
      throw fromSystemError(err, `read the heads file in ${root}`)
    }
    if (read === undefined) continue
    const { logs } = read
    // The bytes are kept (the file's size again in memory) so that the next file is compared, not decoded.
    return typeof logs === 'string' ? undefined : { ...read, logs, ...layout }
  }
  return undefined
}
