import { describe, expect, it } from 'vitest'
import { TailArena } from '../src/file/tail-arena.js'

describe('TailArena', () => {
  it('hands out power-of-two blocks of at least the size asked, from 256 bytes', () => {
    const arena = new TailArena(0)
    expect(arena.sizeOf(arena.alloc(1))).toBe(256)
    expect(arena.sizeOf(arena.alloc(256))).toBe(256)
    expect(arena.sizeOf(arena.alloc(257))).toBe(512)
    expect(arena.sizeOf(arena.alloc(300_000))).toBe(512 * 1024)
    expect(arena.sizeOf(arena.alloc(1 << 20))).toBe(1 << 20)
  })

  it('reuses a released block for the next request of its size, and no other', () => {
    const arena = new TailArena(0)
    const a = arena.alloc(400)
    arena.block(a).fill(7)
    arena.release(a)
    expect(arena.alloc(200)).not.toBe(a)
    expect(arena.alloc(500)).toBe(a)
    expect(arena.alloc(500)).not.toBe(a)
  })

  it('never hands out overlapping blocks, across slabs', () => {
    const arena = new TailArena(0)
    const blocks = []
    // Mixed sizes past several 4 MiB slabs, so the leftovers of each slab are split into the free lists.
    for (let i = 0; i < 400; i++) blocks.push(arena.alloc(((i * 7919) % 60_000) + 1))
    for (let i = 0; i < blocks.length; i++) arena.block(blocks[i]!).fill(i & 0xff)
    for (let i = 0; i < blocks.length; i++) expect(arena.block(blocks[i]!).every((b) => b === (i & 0xff))).toBe(true)
    expect(arena.slabBytes).toBeGreaterThan(4 * 1024 * 1024)
    // A block is its slab's buffer and view from its base on.
    const b = blocks[3]!
    arena.viewOf(b).setUint32(arena.baseOf(b), 0xdeadbeef)
    expect(arena.block(b).readUInt32BE(0)).toBe(0xdeadbeef)
    expect(arena.bufOf(b).readUInt32BE(arena.baseOf(b))).toBe(0xdeadbeef)
    expect(arena.viewOf(b).byteLength).toBe(arena.bufOf(b).length)
    expect(arena.baseOf(b) + arena.sizeOf(b)).toBeLessThanOrEqual(arena.bufOf(b).length)
  })

  it('gives requests above 1 MiB a power-of-two slab of their own, counted in use until released', () => {
    const arena = new TailArena(0)
    const small = arena.alloc(1000)
    const big = arena.alloc(3_000_000)
    expect(arena.sizeOf(big)).toBe(4 * 1024 * 1024)
    expect(arena.baseOf(big)).toBe(0)
    expect(arena.bufOf(big).length).toBe(4 * 1024 * 1024)
    expect(arena.bytesInUse).toBe(1024 + 4 * 1024 * 1024)
    arena.release(big)
    expect(arena.bytesInUse).toBe(1024)
    arena.release(small)
    expect(arena.bytesInUse).toBe(0)
  })

  it('reuses a released big slab for the next big block of its size, and trim gives back those the last cycle did not need', () => {
    const arena = new TailArena(0)
    const MiB = 1024 * 1024
    const a = arena.alloc(3 * MiB)
    const aBuf = arena.bufOf(a)
    arena.release(a)
    // Identity by ===: vitest's toBe on a failure would diff 4 MiB buffers.
    const again = arena.alloc(4 * MiB)
    expect(arena.bufOf(again) === aBuf).toBe(true)
    expect(arena.bufOf(arena.alloc(2 * MiB)) === aBuf).toBe(false)
    arena.release(again)
    // This cycle had 6 MiB in use at once: the free 4 MiB slab stays for the next one.
    expect(arena.trim()).toBe(0)
    expect(arena.bufOf(arena.alloc(4 * MiB)) === aBuf).toBe(true)
  })

  it('trim gives back free big slabs past what was in use at once since the last trim', () => {
    const arena = new TailArena(0)
    const MiB = 1024 * 1024
    const a = arena.alloc(8 * MiB)
    const aBuf = arena.bufOf(a)
    arena.release(a)
    expect(arena.trim()).toBe(0)
    // A cycle that used no big block: the free one goes, and the next big block is a fresh slab.
    expect(arena.trim()).toBe(8 * MiB)
    expect(arena.bufOf(arena.alloc(8 * MiB)) === aBuf).toBe(false)
  })

  it('serves from the reserve before adding slabs', () => {
    const arena = new TailArena(8 * 1024 * 1024)
    for (let i = 0; i < 16; i++) arena.alloc(512 * 1024)
    expect(arena.slabBytes).toBe(8 * 1024 * 1024)
    arena.alloc(256)
    expect(arena.slabBytes).toBe(12 * 1024 * 1024)
  })
})

describe('TailArena.prefault', () => {
  const MiB = 1024 * 1024

  it('leaves the reserve zeroed and usable, and blocks handed out before it untouched', async () => {
    const arena = new TailArena(2 * MiB)
    const before = arena.alloc(1000)
    arena.block(before).fill(9)
    await arena.prefault()
    expect(arena.block(before).every((b) => b === 9)).toBe(true)
    const after = arena.alloc(4096)
    expect(arena.block(after).every((b) => b === 0)).toBe(true)
    expect(arena.slabBytes).toBe(2 * MiB)
  })

  it('touches only the first bytes asked for, and no more than the reserve', async () => {
    const arena = new TailArena(2 * MiB)
    const before = arena.alloc(1000)
    arena.block(before).fill(9)
    // Past the reserve's end: clamped, not an error.
    await arena.prefault(64 * MiB)
    await arena.prefault(4096)
    expect(arena.block(before).every((b) => b === 9)).toBe(true)
    const blocks = Array.from({ length: 8 }, () => arena.alloc(256 * 1024))
    for (const b of blocks) arena.block(b).fill(1)
    expect(arena.slabBytes).toBe(2 * MiB + 4 * MiB)
  })

  it('runs a step per turn, leaves alone the blocks carved between its steps, and stops when asked', async () => {
    const arena = new TailArena(256 * MiB)
    const done = arena.prefault()
    // Nothing is touched before the first turn: the open that asked for it goes on.
    const early = arena.alloc(1024 * 1024)
    arena.block(early).fill(7)
    let turns = 0
    let finished = false
    void done.then(() => (finished = true))
    const carved: number[] = []
    while (!finished) {
      await new Promise((r) => setImmediate(r))
      turns++
      // Blocks handed out while it runs, each filled as a tail would be.
      const b = arena.alloc(1024 * 1024)
      arena.block(b).fill(5)
      carved.push(b)
    }
    // 256 MiB in 16 MiB steps, less what was carved meanwhile: several turns, not one.
    expect(turns).toBeGreaterThan(4)
    expect(arena.block(early).every((b) => b === 7)).toBe(true)
    for (const b of carved) expect(arena.block(b).every((x) => x === 5)).toBe(true)

    const other = new TailArena(256 * MiB)
    const stopped = other.prefault()
    other.stopPrefault()
    await stopped
    // Stopped before its first step: a block carved now is the reserve's start, zero as ever.
    expect(other.block(other.alloc(4096)).every((b) => b === 0)).toBe(true)
  })
})

describe('TailArena.trim', () => {
  const MiB = 1024 * 1024

  it('gives back slabs past the reserve once all their blocks are free, one cycle after the peak that needed them, and never the reserve', () => {
    const arena = new TailArena(MiB)
    const blocks = Array.from({ length: 40 }, () => arena.alloc(256 * 1024))
    // 1 MiB reserve + 9 MiB of 256 KiB blocks in 4 MiB slabs: 3 extra slabs.
    expect(arena.slabBytes).toBe(13 * MiB)
    expect(arena.trim()).toBe(0)
    // Everything but one block of the last slab and one of the reserve back: the middle slabs are idle, but
    // this cycle (since the last trim) had 10 MiB in use at once, so they stay for the next one.
    for (const b of blocks.slice(1, -1)) arena.release(b)
    expect(arena.trim()).toBe(0)
    expect(arena.slabBytes).toBe(13 * MiB)
    // A cycle that needed only 512 KiB: the idle slabs go.
    expect(arena.trim()).toBe(8 * MiB)
    expect(arena.slabBytes).toBe(5 * MiB)
    // The blocks still held stay intact and usable; freed ones are not handed out twice.
    const first = blocks[0]!
    const last = blocks.at(-1)!
    arena.block(first).fill(1)
    arena.block(last).fill(2)
    const again = Array.from({ length: 20 }, () => arena.alloc(256 * 1024))
    again.forEach((b, i) => arena.block(b).fill(i + 3))
    expect(arena.block(first).every((x) => x === 1)).toBe(true)
    expect(arena.block(last).every((x) => x === 2)).toBe(true)
    again.forEach((b, i) => expect(arena.block(b).every((x) => x === i + 3)).toBe(true))
    for (const b of [first, last, ...again]) arena.release(b)
    arena.trim()
    arena.trim()
    expect(arena.slabBytes).toBe(MiB)
    // Trimmed down to the reserve, the arena still serves requests of every size.
    for (let size = 1; size <= 1 << 20; size *= 4) expect(arena.sizeOf(arena.alloc(size))).toBeGreaterThanOrEqual(size)
  })

  it('keeps what a steady stream uses from one checkpoint to the next', () => {
    const arena = new TailArena(MiB)
    // Each cycle: tails fill 9 MiB past the reserve, a checkpoint writes them back and frees every block.
    for (let cycle = 0; cycle < 5; cycle++) {
      const tails = Array.from({ length: 40 }, () => arena.alloc(256 * 1024))
      for (const t of tails) arena.release(t)
      expect(arena.trim()).toBe(0)
      expect(arena.slabBytes).toBe(13 * MiB)
    }
    // The stream stops: one quiet cycle later, the arena is back to its reserve.
    expect(arena.trim()).toBe(12 * MiB)
    expect(arena.slabBytes).toBe(MiB)
  })

  it('keeps only as many idle slabs as the last peak needs', () => {
    const arena = new TailArena(MiB)
    const big = Array.from({ length: 40 }, () => arena.alloc(256 * 1024))
    for (const b of big) arena.release(b)
    arena.trim()
    // The next cycle peaks at 4.5 MiB: the reserve and one slab cover it, the other two go.
    const some = Array.from({ length: 18 }, () => arena.alloc(256 * 1024))
    for (const b of some) arena.release(b)
    expect(arena.trim()).toBe(8 * MiB)
    expect(arena.slabBytes).toBe(5 * MiB)
  })
})
