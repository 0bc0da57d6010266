import { describe, expect, it } from 'vitest'
import { TailArena } from '../src/tail-arena.js'

describe('TailArena', () => {
  it('hands out power-of-two blocks of at least the size asked, from 256 bytes', () => {
    const arena = new TailArena(0)
    expect(arena.alloc(1).buf.length).toBe(256)
    expect(arena.alloc(256).buf.length).toBe(256)
    expect(arena.alloc(257).buf.length).toBe(512)
    expect(arena.alloc(300_000).buf.length).toBe(512 * 1024)
    expect(arena.alloc(1 << 20).buf.length).toBe(1 << 20)
  })

  it('reuses a released block for the next request of its size, and no other', () => {
    const arena = new TailArena(0)
    const a = arena.alloc(400)
    a.buf.fill(7)
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
    for (let i = 0; i < blocks.length; i++) blocks[i]!.buf.fill(i & 0xff)
    for (let i = 0; i < blocks.length; i++) expect(blocks[i]!.buf.every((b) => b === (i & 0xff))).toBe(true)
    expect(arena.slabBytes).toBeGreaterThan(4 * 1024 * 1024)
    // A block's view covers exactly its bytes.
    const b = blocks[3]!
    b.view.setUint32(0, 0xdeadbeef)
    expect(b.buf.readUInt32BE(0)).toBe(0xdeadbeef)
    expect(b.view.byteLength).toBe(b.buf.length)
  })

  it('gives requests above 1 MiB a buffer of their own and ignores their release', () => {
    const arena = new TailArena(0)
    const big = arena.alloc(3_000_000)
    expect(big.buf.length).toBe(3_000_000)
    arena.release(big)
    // Identity by ===: vitest's toBe on a failure would diff 3 MB buffers.
    expect(arena.alloc(3_000_000) === big).toBe(false)
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
  it('leaves the reserve zeroed and usable, and blocks handed out before it untouched', () => {
    const arena = new TailArena(2 * 1024 * 1024)
    const before = arena.alloc(1000)
    before.buf.fill(9)
    arena.prefault()
    expect(before.buf.every((b) => b === 9)).toBe(true)
    const after = arena.alloc(4096)
    expect(after.buf.every((b) => b === 0)).toBe(true)
    expect(arena.slabBytes).toBe(2 * 1024 * 1024)
  })
})
