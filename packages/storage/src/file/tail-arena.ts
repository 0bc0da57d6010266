/**
 * Memory for what logs hold between their appends and their write-back: the
 * write-behind bytes of log.dat and the staged entry records.
 *
 * Why not plain Buffers: V8 counts every ArrayBuffer's bytes as external
 * memory, and once the external memory allocated since the last full
 * collection passes its limit (a few tens of MiB) it starts a full
 * mark-compact of the whole heap. With 100k shapes the heap holds hundreds of
 * MiB of shape state, so each such collection costs most of a second of the
 * main thread, and write-behind tails, which live until a checkpoint, would
 * set one off every few seconds of a busy stream. Blocks here are carved from
 * slabs that are never given back: after the first checkpoint the store
 * allocates nothing external for its tails. The first slab is reserved at
 * open; zero-filled memory from the allocator is only address space until a
 * page is touched, so an idle store's RSS does not grow with it. The store
 * reserves its whole tail budget (file-store.ts): a restarted writer with
 * many logs fills a large part of it before its first checkpoint, and
 * growing a smaller reserve slab by slab would set off full collections of
 * the whole heap while it does.
 *
 * Blocks come in power-of-two sizes (256 B to 1 MiB), each size with its own
 * free list and no merging: the free lists hold at most what the peak held.
 * Bigger requests (a huge transaction's tail) get a slab of their own, also a
 * power of two, kept on a free list of its size when released: such a tail
 * grows by doubling and is given up whenever a write-back empties it, many
 * times over one transaction, and fresh slabs each time were hundreds of MiB
 * of garbage per million rows, which V8 frees late and malloc keeps. A burst
 * (a backlog caught up with 100k logs, each holding its tail until a
 * checkpoint) can grow the arena to hundreds of MiB, so `trim` gives back
 * slabs past the reserve whose blocks are all free again: the store calls it
 * after each checkpoint, when write-back has emptied the tails. It keeps as
 * much as the cycle just ended used at its peak, so a steady stream, which
 * fills the same tails again before the next checkpoint, keeps its memory,
 * and what a burst added goes one checkpoint after the burst. Why keep it:
 * memory given back is fresh again when taken anew, and each first touch of a
 * page costs a fault (costly where a virtual machine's host backs guest
 * memory lazily and takes freed pages back): giving the tails back after
 * every checkpoint would make a steady stream fault in every byte of them
 * again each cycle.
 *
 * A released block is reused at once, so nothing may keep a view of it:
 * readers copy what they take from a tail, and a log defers releasing a block
 * while a write-back reads from it.
 *
 * A block is a number, not an object: its slab, its offset in the slab and its
 * size class packed into a handle (`bufOf`, `baseOf`, `sizeOf` take it
 * apart). With 100k logs each holding a tail block and a block of staged
 * records, an object per block (with its Buffer view and DataView) would be
 * two long-lived objects per log made while a fresh store warms up: they
 * outlive scavenges, are promoted, and full collections of the heap trace them.
 * Each slab has one Buffer and one DataView, shared by its blocks.
 */

/** One ArrayBuffer blocks are carved from, with what `trim` needs to know it is unused. */
export interface Slab {
  readonly buf: Buffer
  /** Where it sits in the arena's slab table (the high part of its blocks' handles). */
  readonly index: number
  /** Bytes carved into blocks so far. */
  carved: number
  /** Bytes of its blocks sitting in the free lists. */
  free: number
  view: DataView | undefined
}

const MIN_SHIFT = 8
const MAX_SHIFT = 20
/** Slabs after the reserved one. */
const SLAB_BYTES = 4 * 1024 * 1024
export const DEFAULT_ARENA_RESERVE_BYTES = 64 * 1024 * 1024
/** What one turn of a `prefault` touches: about 2 ms of writing here. */
const PREFAULT_STEP = 16 * 1024 * 1024
/**
 * A handle is `slab index * SLAB_SPAN + offset + class`: offsets are multiples
 * of 256 (the smallest block), so the class fits below them, and a slab (the
 * reserve included) is under 2 GiB. Handles stay below 2^53.
 */
const SLAB_SPAN = 2 ** 31
/** The class of a block past the largest size: a slab of its own. */
const OWN = 255
/** No block (a log without a tail). */
export const NO_BLOCK = -1

function classOf(size: number): number {
  const shift = Math.max(MIN_SHIFT, 32 - Math.clz32(size - 1))
  return shift - MIN_SHIFT
}

export class TailArena {
  /** Free handles per size class. */
  private readonly free: number[][] = Array.from({ length: MAX_SHIFT - MIN_SHIFT + 1 }, () => [])
  /** Every slab held, by index; holes where one was given back (their indexes are reused). */
  private readonly slabs: (Slab | undefined)[] = []
  private readonly holes: number[] = []
  /** Never given back: what a busy store uses anyway, and what `prefault` touched. */
  private readonly reserve: Slab
  /** Where new blocks are carved (undefined once trimmed away, until the next is needed). */
  private slab: Slab | undefined
  private readonly extra = new Set<Slab>()
  /** Bytes of all slabs held (the arena's share of external memory). */
  slabBytes: number
  /** Bytes of slab blocks handed out and not released. */
  private inUse = 0
  /** Bytes of blocks past the largest size, each a slab of its own (a huge transaction's tail). */
  private outside = 0
  /** Released slabs of their own, by size, for the next big block; and their bytes. */
  private readonly ownFree = new Map<number, Slab[]>()
  private ownFreeBytes = 0
  /** The most `inUse` and `outside` reached since the last `trim`. */
  private peak = 0
  private peakOutside = 0
  /** The next step of a `prefault` under way, and what ends it. */
  private prefaulting: NodeJS.Immediate | undefined
  private endPrefault: (() => void) | undefined

  constructor(reserveBytes = DEFAULT_ARENA_RESERVE_BYTES) {
    const bytes = Math.max(reserveBytes, 1 << MAX_SHIFT)
    if (bytes >= SLAB_SPAN) throw new RangeError(`tail arena reserve of ${bytes} bytes: at most ${SLAB_SPAN - 1}`)
    this.reserve = this.addSlab(bytes)
    this.slab = this.reserve
    this.slabBytes = this.reserve.buf.length
  }

  /**
   * Touches the pages of the reserve's first `bytes` (all of it by default),
   * so the tails written there never take a page fault on the append path
   * (the kernel maps zero pages lazily; the first write to each costs far
   * more than the copy). Makes them resident: a store that will use them
   * anyway pays once, after its open.
   *
   * In steps of PREFAULT_STEP bytes, one per turn of the event loop: an open
   * does not wait for it (a gigabyte took 130 ms here, on the path of every
   * start and takeover), and nothing waits long behind a step. Pages carved
   * into blocks meanwhile are left alone (only bytes past `carved` are
   * written, and they are zero). Resolves when done or stopped
   * (`stopPrefault`, the store's close).
   */
  prefault(bytes = Infinity): Promise<void> {
    this.stopPrefault()
    const reserve = this.reserve
    const end = Math.min(reserve.buf.length, bytes)
    let at = 0
    return new Promise<void>((resolve) => {
      const step = (): void => {
        this.prefaulting = undefined
        const from = Math.max(at, reserve.carved)
        const to = Math.min(end, from + PREFAULT_STEP)
        if (from < to) reserve.buf.fill(0, from, to)
        at = to
        if (to >= end) {
          this.endPrefault = undefined
          resolve()
          return
        }
        // Not a reason to stay alive: a process done with its store exits without waiting for this.
        this.prefaulting = setImmediate(step).unref()
      }
      this.endPrefault = resolve
      this.prefaulting = setImmediate(step).unref()
    })
  }

  /** Stops a `prefault` under way (its promise resolves). */
  stopPrefault(): void {
    if (this.prefaulting !== undefined) clearImmediate(this.prefaulting)
    this.prefaulting = undefined
    const end = this.endPrefault
    this.endPrefault = undefined
    end?.()
  }

  /** Bytes of blocks handed out and not released, big ones of their own included: what the store's tail budget counts. */
  get bytesInUse(): number {
    return this.inUse + this.outside
  }

  /** A block of at least `size` bytes (exactly a power of two up to 1 MiB). */
  alloc(size: number): number {
    const c = classOf(Math.max(size, 1))
    if (c >= this.free.length) {
      // Offset 0 in a slab of its own: any size a Buffer can have fits the handle.
      const bytes = 2 ** Math.ceil(Math.log2(size))
      let own = this.ownFree.get(bytes)?.pop()
      if (own !== undefined) {
        own.free = 0
        this.ownFreeBytes -= bytes
      } else {
        own = this.addSlab(bytes, true)
      }
      this.outside += bytes
      if (this.outside > this.peakOutside) this.peakOutside = this.outside
      return own.index * SLAB_SPAN + OWN
    }
    const bytes = 1 << (c + MIN_SHIFT)
    this.inUse += bytes
    if (this.inUse > this.peak) this.peak = this.inUse
    const reused = this.free[c]!.pop()
    if (reused !== undefined) {
      this.slabOf(reused).free -= bytes
      return reused
    }
    let slab = this.slab
    if (slab === undefined || slab.carved + bytes > slab.buf.length) slab = this.nextSlab()
    const at = slab.carved
    slab.carved += bytes
    return slab.index * SLAB_SPAN + at + c
  }

  /** Takes a block back; it may be handed out again by the next `alloc`. */
  release(h: number): void {
    const slab = this.slabOf(h)
    const c = h & 0xff
    if (c === OWN) {
      const bytes = slab.buf.length
      this.outside -= bytes
      slab.free = bytes
      let list = this.ownFree.get(bytes)
      if (list === undefined) this.ownFree.set(bytes, (list = []))
      list.push(slab)
      this.ownFreeBytes += bytes
      return
    }
    const bytes = 1 << (c + MIN_SHIFT)
    slab.free += bytes
    this.inUse -= bytes
    this.free[c]!.push(h)
  }

  /** The Buffer a block lies in (its slab's; the block starts at `baseOf`). */
  bufOf(h: number): Buffer {
    return this.slabOf(h).buf
  }

  /** A DataView over the block's slab (offsets as in `bufOf`). */
  viewOf(h: number): DataView {
    const slab = this.slabOf(h)
    return (slab.view ??= new DataView(slab.buf.buffer, slab.buf.byteOffset, slab.buf.length))
  }

  /** Where the block starts in `bufOf(h)`. */
  baseOf(h: number): number {
    const c = h & 0xff
    return c === OWN ? 0 : (h % SLAB_SPAN) - c
  }

  /** The block's length in bytes. */
  sizeOf(h: number): number {
    const c = h & 0xff
    return c === OWN ? this.slabOf(h).buf.length : 1 << (c + MIN_SHIFT)
  }

  /** A view of exactly the block (allocates one: for the rare paths and tests). */
  block(h: number): Buffer {
    const base = this.baseOf(h)
    return this.bufOf(h).subarray(base, base + this.sizeOf(h))
  }

  /**
   * Gives back slabs past the reserve whose every block is free (the garbage
   * collector then frees their memory), keeping as many bytes of slabs as were
   * in use at once since the previous call; the same for free slabs of their
   * own (big blocks). Costs a pass over the free lists,
   * only when a slab goes. Returns the bytes given back.
   */
  trim(): number {
    const own = this.trimOwn()
    const keep = this.peak
    this.peak = this.inUse
    const idle = new Set<number>()
    let held = this.slabBytes
    for (const slab of this.extra) {
      if (held - slab.buf.length < keep) break
      if (slab.free !== slab.carved) continue
      idle.add(slab.index)
      held -= slab.buf.length
    }
    if (idle.size === 0) return own
    for (let c = 0; c < this.free.length; c++) {
      const list = this.free[c]!
      let kept = 0
      for (const h of list) if (!idle.has(Math.floor(h / SLAB_SPAN))) list[kept++] = h
      list.length = kept
    }
    let bytes = 0
    for (const index of idle) {
      const slab = this.slabs[index]!
      this.extra.delete(slab)
      bytes += slab.buf.length
      if (this.slab === slab) this.slab = undefined
      this.dropSlab(slab)
    }
    this.slabBytes -= bytes
    return bytes + own
  }

  /** Slabs of their own on the free lists past what was in use at once since the last `trim`, largest first, go. */
  private trimOwn(): number {
    const keep = this.peakOutside
    this.peakOutside = this.outside
    let held = this.outside + this.ownFreeBytes
    let given = 0
    for (const bytes of [...this.ownFree.keys()].sort((a, b) => b - a)) {
      const list = this.ownFree.get(bytes)!
      while (held > keep && list.length > 0) {
        this.dropSlab(list.pop()!)
        held -= bytes
        given += bytes
      }
      if (list.length === 0) this.ownFree.delete(bytes)
    }
    this.ownFreeBytes -= given
    return given
  }

  private slabOf(h: number): Slab {
    return this.slabs[Math.floor(h / SLAB_SPAN)]!
  }

  private addSlab(bytes: number, own = false): Slab {
    const index = this.holes.pop() ?? this.slabs.length
    // A block of its own is written whole before it is read: no need to zero it.
    const buf = own ? Buffer.allocUnsafeSlow(bytes) : Buffer.from(new ArrayBuffer(bytes))
    const slab: Slab = { buf, index, carved: own ? bytes : 0, free: 0, view: undefined }
    this.slabs[index] = slab
    return slab
  }

  private dropSlab(slab: Slab): void {
    this.slabs[slab.index] = undefined
    this.holes.push(slab.index)
  }

  private nextSlab(): Slab {
    const old = this.slab
    if (old !== undefined) {
      // What is left of the old slab goes to the free lists, largest blocks first;
      // slab offsets stay multiples of the smallest size, so it splits exactly.
      for (let c = this.free.length - 1; c >= 0; c--) {
        const bytes = 1 << (c + MIN_SHIFT)
        while (old.buf.length - old.carved >= bytes) {
          this.free[c]!.push(old.index * SLAB_SPAN + old.carved + c)
          old.carved += bytes
          old.free += bytes
        }
      }
    }
    const slab = this.addSlab(SLAB_BYTES)
    this.extra.add(slab)
    this.slab = slab
    this.slabBytes += SLAB_BYTES
    return slab
  }
}
