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
 * Bigger requests (a huge transaction's tail) get an ordinary Buffer. A burst
 * (a backlog caught up with 100k logs, each holding its tail until a
 * checkpoint) can grow the arena to hundreds of MiB, so `trim` gives back
 * slabs past the reserve whose blocks are all free again: the store calls it
 * after each checkpoint, when write-back has emptied the tails. It keeps as
 * much as the cycle just ended used at its peak, so a steady stream, which
 * fills the same tails again before the next checkpoint, keeps its memory,
 * and what a burst added goes one checkpoint after the burst. Why keep it:
 * memory given back is fresh again when taken anew, and each first touch of a
 * page costs a fault (about 15 µs per 4 KiB on the benchmark VM, whose host
 * backs guest memory lazily and takes freed pages back; `bench:pipeline`
 * counts them): giving the tails back after every checkpoint made a steady
 * stream fault in every byte of them again each cycle.
 *
 * A released block is reused at once, so nothing may keep a view of it:
 * readers copy what they take from a tail, and a log defers releasing a block
 * while a write-back reads from it.
 */

export class ArenaBlock {
  private dataView: DataView | undefined = undefined
  constructor(
    readonly buf: Buffer,
    /** The slab it was carved from; undefined for a buffer of its own. */
    readonly slab: Slab | undefined,
  ) {}

  /**
   * Made on first use: staged records need one, tails never do. A block lives
   * as long as the arena, so at 100k logs a view made for every tail block was
   * promoted garbage the full collections had to trace.
   */
  get view(): DataView {
    return (this.dataView ??= new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.length))
  }
}

/** One ArrayBuffer blocks are carved from, with what `trim` needs to know it is unused. */
export interface Slab {
  readonly buf: Buffer
  /** Bytes carved into blocks so far. */
  carved: number
  /** Bytes of its blocks sitting in the free lists. */
  free: number
}

const MIN_SHIFT = 8
const MAX_SHIFT = 20
/** Slabs after the reserved one. */
const SLAB_BYTES = 4 * 1024 * 1024
export const DEFAULT_ARENA_RESERVE_BYTES = 64 * 1024 * 1024

function block(buf: Buffer, slab: Slab | undefined): ArenaBlock {
  return new ArenaBlock(buf, slab)
}

function newSlab(bytes: number): Slab {
  return { buf: Buffer.from(new ArrayBuffer(bytes)), carved: 0, free: 0 }
}

function classOf(size: number): number {
  const shift = Math.max(MIN_SHIFT, 32 - Math.clz32(size - 1))
  return shift - MIN_SHIFT
}

export class TailArena {
  private readonly free: ArenaBlock[][] = Array.from({ length: MAX_SHIFT - MIN_SHIFT + 1 }, () => [])
  /** Never given back: what a busy store uses anyway, and what `prefault` touched. */
  private readonly reserve: Slab
  /** Where new blocks are carved (undefined once trimmed away, until the next is needed). */
  private slab: Slab | undefined
  private readonly extra = new Set<Slab>()
  /** Bytes of all slabs held (the arena's share of external memory). */
  slabBytes: number
  /** Bytes of slab blocks handed out and not released. */
  private inUse = 0
  /** Bytes of blocks past the largest size, each a Buffer of its own (a huge transaction's tail). */
  private outside = 0
  /** The most `inUse` reached since the last `trim`. */
  private peak = 0

  constructor(reserveBytes = DEFAULT_ARENA_RESERVE_BYTES) {
    this.reserve = newSlab(Math.max(reserveBytes, 1 << MAX_SHIFT))
    this.slab = this.reserve
    this.slabBytes = this.reserve.buf.length
  }

  /**
   * Touches every page of the reserve, so the tails written into it never
   * take a page fault on the append path (the kernel maps zero pages lazily;
   * the first write to each costs far more than the copy). Makes the reserve
   * resident: a store that will use it anyway pays once, at open.
   */
  prefault(): void {
    this.reserve.buf.fill(0, this.reserve.carved)
  }

  /** Bytes of blocks handed out and not released, big ones of their own included: what the store's tail budget counts. */
  get bytesInUse(): number {
    return this.inUse + this.outside
  }

  /** A block of at least `size` bytes (exactly a power of two up to 1 MiB). */
  alloc(size: number): ArenaBlock {
    const c = classOf(Math.max(size, 1))
    if (c >= this.free.length) {
      this.outside += size
      return block(Buffer.allocUnsafeSlow(size), undefined)
    }
    const bytes = 1 << (c + MIN_SHIFT)
    this.inUse += bytes
    if (this.inUse > this.peak) this.peak = this.inUse
    const reused = this.free[c]!.pop()
    if (reused !== undefined) {
      reused.slab!.free -= bytes
      return reused
    }
    let slab = this.slab
    if (slab === undefined || slab.carved + bytes > slab.buf.length) slab = this.nextSlab()
    const buf = slab.buf.subarray(slab.carved, slab.carved + bytes)
    slab.carved += bytes
    return block(buf, slab)
  }

  /** Takes a block back; it may be handed out again by the next `alloc`. */
  release(b: ArenaBlock): void {
    if (b.slab === undefined) {
      this.outside -= b.buf.length
      return
    }
    b.slab.free += b.buf.length
    this.inUse -= b.buf.length
    this.free[classOf(b.buf.length)]!.push(b)
  }

  /**
   * Gives back slabs past the reserve whose every block is free (the garbage
   * collector then frees their memory), keeping as many bytes of slabs as were
   * in use at once since the previous call. Costs a pass over the free lists,
   * only when a slab goes. Returns the bytes given back.
   */
  trim(): number {
    const keep = this.peak
    this.peak = this.inUse
    const idle = new Set<Slab>()
    let held = this.slabBytes
    for (const slab of this.extra) {
      if (held - slab.buf.length < keep) break
      if (slab.free !== slab.carved) continue
      idle.add(slab)
      held -= slab.buf.length
    }
    if (idle.size === 0) return 0
    for (let c = 0; c < this.free.length; c++) {
      const list = this.free[c]!
      let kept = 0
      for (const b of list) if (!idle.has(b.slab!)) list[kept++] = b
      list.length = kept
    }
    let bytes = 0
    for (const slab of idle) {
      this.extra.delete(slab)
      bytes += slab.buf.length
    }
    if (this.slab !== undefined && idle.has(this.slab)) this.slab = undefined
    this.slabBytes -= bytes
    return bytes
  }

  private nextSlab(): Slab {
    const old = this.slab
    if (old !== undefined) {
      // What is left of the old slab goes to the free lists, largest blocks first;
      // slab offsets stay multiples of the smallest size, so it splits exactly.
      for (let c = this.free.length - 1; c >= 0; c--) {
        const bytes = 1 << (c + MIN_SHIFT)
        while (old.buf.length - old.carved >= bytes) {
          this.free[c]!.push(block(old.buf.subarray(old.carved, old.carved + bytes), old))
          old.carved += bytes
          old.free += bytes
        }
      }
    }
    const slab = newSlab(SLAB_BYTES)
    this.extra.add(slab)
    this.slab = slab
    this.slabBytes += SLAB_BYTES
    return slab
  }
}
