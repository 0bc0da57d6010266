/**
 * Memory for what logs hold between their appends and their write-back: the
 * write-behind bytes of log.dat and the staged entry records.
 *
 * Why not plain Buffers: V8 counts every ArrayBuffer's bytes as external
 * memory, and once the external memory allocated since the last full
 * collection passes its limit (a few tens of MiB) it starts a full
 * mark-compact of the whole heap. With 100k shapes the heap holds hundreds of
 * MiB of shape state, so each such collection costs most of a second of the
 * main thread, and write-behind tails, which live until a checkpoint, used to
 * set one off every few seconds of a busy stream. Blocks here are carved from
 * slabs that are never given back: after the first checkpoint the store
 * allocates nothing external for its tails. The first slab is reserved at
 * open; zero-filled memory from the allocator is only address space until a
 * page is touched, so an idle store's RSS does not grow with it.
 *
 * Blocks come in power-of-two sizes (256 B to 1 MiB), each size with its own
 * free list and no merging: the free lists hold at most what the peak held.
 * Bigger requests (a huge transaction's tail) get an ordinary Buffer.
 *
 * A released block is reused at once, so nothing may keep a view of it:
 * readers copy what they take from a tail, and a log defers releasing a block
 * while a write-back reads from it.
 */

export interface ArenaBlock {
  readonly buf: Buffer
  readonly view: DataView
}

const MIN_SHIFT = 8
const MAX_SHIFT = 20
/** Slabs after the reserved one. */
const SLAB_BYTES = 4 * 1024 * 1024
export const DEFAULT_ARENA_RESERVE_BYTES = 64 * 1024 * 1024

function block(buf: Buffer): ArenaBlock {
  return { buf, view: new DataView(buf.buffer, buf.byteOffset, buf.length) }
}

function classOf(size: number): number {
  const shift = Math.max(MIN_SHIFT, 32 - Math.clz32(size - 1))
  return shift - MIN_SHIFT
}

export class TailArena {
  private readonly free: ArenaBlock[][] = Array.from({ length: MAX_SHIFT - MIN_SHIFT + 1 }, () => [])
  private slab: Buffer
  private used = 0
  /** Bytes of all slabs carved so far (the arena's share of external memory). */
  slabBytes: number

  constructor(reserveBytes = DEFAULT_ARENA_RESERVE_BYTES) {
    this.slab = Buffer.from(new ArrayBuffer(Math.max(reserveBytes, 1 << MAX_SHIFT)))
    this.slabBytes = this.slab.length
  }

  /**
   * Touches every page of the reserve, so the tails written into it never
   * take a page fault on the append path (the kernel maps zero pages lazily;
   * the first write to each costs far more than the copy). Makes the reserve
   * resident: a store that will use it anyway pays once, at open.
   */
  prefault(): void {
    this.slab.fill(0, this.used)
  }

  /** A block of at least `size` bytes (exactly a power of two up to 1 MiB). */
  alloc(size: number): ArenaBlock {
    const c = classOf(Math.max(size, 1))
    if (c >= this.free.length) return block(Buffer.allocUnsafeSlow(size))
    const reused = this.free[c]!.pop()
    if (reused !== undefined) return reused
    const bytes = 1 << (c + MIN_SHIFT)
    if (this.used + bytes > this.slab.length) this.nextSlab()
    const buf = this.slab.subarray(this.used, this.used + bytes)
    this.used += bytes
    return block(buf)
  }

  /** Takes a block back; it may be handed out again by the next `alloc`. */
  release(b: ArenaBlock): void {
    const n = b.buf.length
    // Blocks of a power-of-two size up to the largest class came from here.
    if (n < 1 << MIN_SHIFT || n > 1 << MAX_SHIFT || (n & (n - 1)) !== 0) return
    this.free[classOf(n)]!.push(b)
  }

  private nextSlab(): void {
    // What is left of the old slab goes to the free lists, largest blocks first;
    // slab offsets stay multiples of the smallest size, so it splits exactly.
    for (let c = this.free.length - 1; c >= 0; c--) {
      const bytes = 1 << (c + MIN_SHIFT)
      while (this.slab.length - this.used >= bytes) {
        this.free[c]!.push(block(this.slab.subarray(this.used, this.used + bytes)))
        this.used += bytes
      }
    }
    this.slab = Buffer.from(new ArrayBuffer(SLAB_BYTES))
    this.used = 0
    this.slabBytes += SLAB_BYTES
  }
}
