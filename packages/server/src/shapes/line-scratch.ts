/**
 * Memory for the encoded JSON lines of one routed transaction.
 *
 * Why not `TextEncoder.encode` per line: each call allocates an ArrayBuffer,
 * which V8 counts as external memory, and once enough external memory has
 * been allocated since the last full collection V8 runs a mark-compact of the
 * whole heap. With 100k shapes the heap holds about 500 MiB of shape state,
 * so a stream of ~400-byte lines set off a full collection every few tens of
 * MiB of changes, and garbage collection took a third of the pipeline's main
 * thread (bench:pipeline profile, eq100k). Fresh memory also costs a page
 * fault per 4 KiB on first touch (about 4.5 ms per MiB on the benchmark VM).
 *
 * Lines are written into a few reusable slabs instead; each line is a view of
 * its slab. The router resets the scratch when its transaction is done, which
 * is safe because no line outlives it: the storage engine copies what it
 * appends, and a shape's queue copies what it keeps (`QueueTarget`).
 *
 *   slabs   [ line line line … ][ line line … ][ (unused, kept warm) ]
 *                                      ^ slab, at
 *
 * A transaction whose lines pass `MAX_RETAINED_BYTES` (a huge streamed one)
 * gets buffers of its own past that point, so the scratch never holds more.
 */

const SLAB_BYTES = 256 * 1024
/** Slabs kept across transactions: enough for any ordinary transaction's lines. */
const MAX_RETAINED_BYTES = 8 * 1024 * 1024
/** UTF-16 code units encode to at most 3 UTF-8 bytes each. */
const MAX_UTF8_PER_UNIT = 3

export class LineScratch {
  private readonly slabs: Buffer[] = []
  /** Slab being filled (an index into `slabs`), and the first free byte in it. */
  private slab = -1
  private at = 0
  /** The buffer `open` handed out and where the line starts in it. */
  private openBuf: Buffer | undefined = undefined
  private openAt = 0

  /** The UTF-8 bytes of `text`, valid until `reset()`. */
  put(text: string): Uint8Array {
    const buf = this.open(text.length * MAX_UTF8_PER_UNIT)
    return this.take(this.openAt + buf.write(text, this.openAt, 'utf8'))
  }

  /**
   * Room for a line of at most `worst` bytes: the caller writes it into the
   * returned buffer from `start` on, then calls `take(end)`. Lines written
   * straight into memory this way need no string of their own.
   */
  open(worst: number): Buffer {
    let buf = worst > SLAB_BYTES ? undefined : this.slabs[this.slab]
    if (buf !== undefined && this.at + worst > buf.length) buf = this.nextSlab()
    else if (buf === undefined && worst <= SLAB_BYTES) buf = this.nextSlab()
    if (buf === undefined) {
      // Past the bound, or bigger than a slab: a buffer of its own.
      this.openBuf = Buffer.allocUnsafe(worst)
      this.openAt = 0
      return this.openBuf
    }
    this.openBuf = buf
    this.openAt = this.at
    return buf
  }

  /** Where the line `open` made room for starts in its buffer. */
  get start(): number {
    return this.openAt
  }

  /** The line written since `open`, ending at `end`: valid until `reset()`. */
  take(end: number): Uint8Array {
    const buf = this.openBuf!
    this.openBuf = undefined
    if (buf === this.slabs[this.slab]) this.at = end
    return buf.subarray(this.openAt, end)
  }

  /** Every line handed out so far is dead: their memory is reused. */
  reset(): void {
    this.slab = this.slabs.length > 0 ? 0 : -1
    this.at = 0
  }

  /** Bytes of slabs held (for tests). */
  get retainedBytes(): number {
    return this.slabs.length * SLAB_BYTES
  }

  private nextSlab(): Buffer | undefined {
    this.slab++
    this.at = 0
    const have = this.slabs[this.slab]
    if (have !== undefined) return have
    if (this.slabs.length * SLAB_BYTES >= MAX_RETAINED_BYTES) {
      this.slab = this.slabs.length - 1
      this.at = SLAB_BYTES
      return undefined
    }
    const fresh = Buffer.allocUnsafeSlow(SLAB_BYTES)
    this.slabs.push(fresh)
    return fresh
  }
}
