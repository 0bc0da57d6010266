/**
 * The ceiling: what the hardware and Node give for the same bytes with no
 * engine at all. Appends copy a transaction's `json,` lines into one staging
 * buffer and write it with a single positional `fs.writeSync` (plus
 * `fdatasync` when durable); reads `pread` a byte range into a fresh buffer.
 *
 * It keeps no file format: no index file, no chunk records, no watermark. To
 * answer "the same byte ranges" as the engines it keeps a perfect index in
 * memory (every entry's offset and end position, every chunk's end), which the
 * real engines must instead persist and, for a mid-chunk offset, look up on
 * disk. That index is kept only when `indexEntries` is set (the read log), so the
 * append workloads time the write alone.
 */
import { closeSync, fdatasync, fdatasyncSync, openSync, read as readCb, readSync, writeSync } from 'node:fs'
import type { LogOffset } from '@sluice/protocol'
import { compareOffsets } from '@sluice/protocol'
import type { LogEntryInput } from '@sluice/storage'
import type { ReadBuffer } from './materialise.js'

const SEPARATOR = 0x2c

export interface RawRange {
  readonly position: number
  readonly length: number
  readonly nextOffset: LogOffset
  readonly reachedHead: boolean
}

export class RawLog {
  private readonly fd: number
  private end = 0
  private stage = Buffer.allocUnsafe(1 << 20)
  private fill = 0
  // The perfect in-memory index (read log only).
  private readonly keys: LogOffset[] = []
  private readonly ends: number[] = []
  private readonly chunkEnds: number[] = []

  constructor(
    path: string,
    private readonly chunkBytes: number,
    private readonly indexEntries: boolean,
  ) {
    this.fd = openSync(path, 'w+')
  }

  /** One transaction, one positional write. */
  append(entries: readonly LogEntryInput[]): number {
    let size = 0
    for (const e of entries) size += e.json.length + 1
    if (size > this.stage.length) this.stage = Buffer.allocUnsafe(Math.max(size, this.stage.length * 2))
    const stage = this.stage
    let at = 0
    for (const e of entries) {
      stage.set(e.json, at)
      stage[at + e.json.length] = SEPARATOR
      at += e.json.length + 1
    }
    let done = 0
    while (done < size) done += writeSync(this.fd, stage, done, size - done, this.end + done)
    if (this.indexEntries) this.index(entries)
    this.end += size
    return entries.length
  }

  /** Append, then `fdatasync` before returning: the durable ceiling. */
  async appendDurable(entries: readonly LogEntryInput[]): Promise<void> {
    this.append(entries)
    await new Promise<void>((resolve, reject) => fdatasync(this.fd, (err) => (err ? reject(err) : resolve())))
  }

  private index(entries: readonly LogEntryInput[]): void {
    let pos = this.end
    for (const e of entries) {
      pos += e.json.length + 1
      this.keys.push(e.offset)
      this.ends.push(pos)
      this.fill += e.json.length + 1
      if (this.fill >= this.chunkBytes) {
        this.chunkEnds.push(this.keys.length)
        this.fill = 0
      }
    }
  }

  /** The byte range a read after `after` covers: to the end of the chunk of the first entry above it. */
  locate(after: LogOffset): RawRange | undefined {
    const keys = this.keys
    let lo = 0
    let hi = keys.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (compareOffsets(keys[mid]!, after) > 0) hi = mid
      else lo = mid + 1
    }
    const first = lo
    if (first >= keys.length) return undefined
    lo = 0
    hi = this.chunkEnds.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (this.chunkEnds[mid]! > first) hi = mid
      else lo = mid + 1
    }
    const endEntry = lo < this.chunkEnds.length ? this.chunkEnds[lo]! : keys.length
    const position = first > 0 ? this.ends[first - 1]! : 0
    return {
      position,
      length: this.ends[endEntry - 1]! - position,
      nextOffset: keys[endEntry - 1]!,
      reachedHead: endEntry === keys.length,
    }
  }

  /** `pread` of a range into the reader's buffer (or a fresh one, as `readSpans` does). */
  readSync(range: RawRange, into?: ReadBuffer): Buffer {
    const out = into ? into.take(range.length) : Buffer.allocUnsafe(range.length)
    let done = 0
    while (done < range.length) {
      const n = readSync(this.fd, out, done, range.length - done, range.position + done)
      if (n === 0) throw new Error('short read')
      done += n
    }
    return out.subarray(0, range.length)
  }

  /** The same on libuv's thread pool (`fs.read` with a callback). */
  read(range: RawRange, into?: ReadBuffer): Promise<Buffer> {
    const out = into ? into.take(range.length) : Buffer.allocUnsafe(range.length)
    return new Promise((resolve, reject) => {
      const step = (done: number): void => {
        if (done >= range.length) return resolve(out.subarray(0, range.length))
        readCb(this.fd, out, done, range.length - done, range.position + done, (err, n) => {
          if (err) return reject(err)
          if (n === 0) return reject(new Error('short read'))
          step(done + n)
        })
      }
      step(0)
    })
  }

  sync(): void {
    fdatasyncSync(this.fd)
  }

  close(): void {
    closeSync(this.fd)
  }
}
