import { spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { ADDON_PATH, loadSendfile } from '../src/index.js'

// A child process with --expose-gc fills the C heap with 190 MiB of 32 KiB
// buffers (below glibc's mmap threshold, so they come from the heap), keeps
// every 50th so the freed ones are holes glibc does not return by itself, and
// collects the rest: resident memory stays high until trimHeap.
const CHILD = `
const addon = require(process.argv[1])
const rss = () => Number(/VmRSS:\\s+(\\d+)/.exec(require('fs').readFileSync('/proc/self/status', 'utf8'))[1]) / 1024
let list = []
for (let i = 0; i < 6000; i++) list.push(Buffer.alloc(32 * 1024, 1))
const kept = list.filter((_, i) => i % 50 === 0)
list = null
global.gc(); global.gc()
const before = rss()
const trimmed = addon.trimHeap()
const after = rss()
process.stdout.write(JSON.stringify({ before, after, trimmed, kept: kept.length }))
`

describe('trimHeap', () => {
  it('gives freed C-heap pages back to the kernel: resident memory falls by most of what was freed', () => {
    const load = loadSendfile()
    if (!load.available) throw new Error(`the addon is not available: ${load.reason}`)
    expect(typeof load.sendfile.trimHeap()).toBe('boolean')
    const child = spawnSync(process.execPath, ['--expose-gc', '-e', CHILD, ADDON_PATH], { encoding: 'utf8' })
    expect(child.status, child.stderr).toBe(0)
    const { before, after, trimmed, kept } = JSON.parse(child.stdout) as { before: number; after: number; trimmed: boolean; kept: number }
    expect(kept).toBe(120)
    expect(trimmed).toBe(true)
    // About 186 MiB were freed; at least 100 MiB of it must leave the process.
    expect(before - after).toBeGreaterThan(100)
  })
})

// A child process builds ~250 MiB of small objects, drops them and goes idle.
// Whether V8 collects an idle heap by itself depends on its heuristics (in the
// server, 20,000 expired shapes' state stayed resident for minutes); the child
// turns the memory reducer off and has no marking under way when the objects
// die, so that the dead heap stays, as it did there. The memory pressure
// notification must make it collect at once.
const PRESSURE_CHILD = `
const addon = require(process.argv[1])
const v8 = require('v8')
const used = () => v8.getHeapStatistics().used_heap_size / 2 ** 20
let list = []
for (let i = 0; i < 1500000; i++) list.push({ a: 'x' + i, b: [i, i + 1] })
// Collected while still referenced: no marking is under way when they die, so nothing finishes one while idle.
global.gc(); global.gc()
list = null
setTimeout(() => {
  const idle = used()
  const notified = addon.memoryPressure(false)
  setTimeout(() => process.stdout.write(JSON.stringify({ idle, after: used(), notified })), 1500)
}, 1500)
`

describe('memoryPressure', () => {
  it('makes an idle process collect the garbage V8 would otherwise keep', () => {
    const child = spawnSync(process.execPath, ['--expose-gc', '--no-memory-reducer', '-e', PRESSURE_CHILD, ADDON_PATH], { encoding: 'utf8' })
    expect(child.status, child.stderr).toBe(0)
    const { idle, after, notified } = JSON.parse(child.stdout) as { idle: number; after: number; notified: boolean }
    expect(notified).toBe(true)
    // Idle, the dead objects were still there (otherwise this test shows nothing)...
    expect(idle).toBeGreaterThan(150)
    // ...and the notification collected them.
    expect(after).toBeLessThan(idle / 4)
  })
})

// The same dead heap, and the low memory notification instead: full collections at once.
const LOW_MEMORY_CHILD = `
const addon = require(process.argv[1])
const v8 = require('v8')
const used = () => v8.getHeapStatistics().used_heap_size / 2 ** 20
const oldSpace = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'old_space').space_size / 2 ** 20
let list = []
for (let i = 0; i < 1500000; i++) list.push({ a: 'x' + i, b: [i, i + 1] })
global.gc(); global.gc()
list = null
setTimeout(() => {
  const idle = used()
  const notified = addon.lowMemory()
  // No waiting: the collections ran within the call.
  process.stdout.write(JSON.stringify({ idle, after: used(), oldSpace: oldSpace(), notified }))
}, 1500)
`

describe('lowMemory', () => {
  it('collects the dead heap of an idle process within the call and gives its pages back', () => {
    const child = spawnSync(process.execPath, ['--expose-gc', '--no-memory-reducer', '-e', LOW_MEMORY_CHILD, ADDON_PATH], { encoding: 'utf8' })
    expect(child.status, child.stderr).toBe(0)
    const { idle, after, oldSpace, notified } = JSON.parse(child.stdout) as { idle: number; after: number; oldSpace: number; notified: boolean }
    expect(notified).toBe(true)
    expect(idle).toBeGreaterThan(150)
    expect(after).toBeLessThan(idle / 4)
    expect(oldSpace).toBeLessThan(idle / 4)
  })
})

// Threads that allocate after the cap share the arenas there are: four worker
// threads allocating at once leave at most the cap of malloc heaps (glibc
// maps each thread arena as a 64 MiB-aligned reservation, the main arena is
// the [heap]).
const ARENAS_CHILD = `
const addon = require(process.argv[1])
const { Worker } = require('node:worker_threads')
const fs = require('node:fs')
const cap = Number(process.argv[2])
const limited = cap > 0 ? addon.limitArenas(cap) : false
const arenas = () => {
  let n = 0
  const lines = fs.readFileSync('/proc/self/maps', 'utf8').split('\\n')
  for (let i = 0; i + 1 < lines.length; i++) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) rw-p 00000000 00:00 0\\s*$/.exec(lines[i])
    const next = /^([0-9a-f]+)-([0-9a-f]+) ---p 00000000 00:00 0\\s*$/.exec(lines[i + 1])
    if (m && next && m[2] === next[1] && BigInt('0x' + m[1]) % 67108864n === 0n && BigInt('0x' + next[2]) - BigInt('0x' + m[1]) === 67108864n) n++
  }
  return n
}
const before = arenas()
const src = "const b = []; for (let i = 0; i < 2000; i++) b.push(Buffer.alloc(1024 + (i % 7)));  require('node:worker_threads').parentPort.postMessage(b.length)"
Promise.all(Array.from({ length: 4 }, () => new Promise((resolve) => new Worker(src, { eval: true }).once('message', resolve)))).then(() => {
  process.stdout.write(JSON.stringify({ limited, before, after: arenas() }))
  process.exit(0)
})
`

describe('limitArenas', () => {
  it('caps the malloc arenas threads allocating later get', () => {
    const run = (cap: number): { limited: boolean; before: number; after: number } => {
      const child = spawnSync(process.execPath, ['-e', ARENAS_CHILD, ADDON_PATH, String(cap)], { encoding: 'utf8', env: { ...process.env, MALLOC_ARENA_MAX: '' } })
      expect(child.status, child.stderr).toBe(0)
      return JSON.parse(child.stdout) as { limited: boolean; before: number; after: number }
    }
    const free = run(0)
    const capped = run(1)
    expect(capped.limited).toBe(true)
    // Without a cap the four threads made arenas of their own; with one, no thread arena was added.
    expect(free.after).toBeGreaterThan(free.before)
    expect(capped.after).toBe(capped.before)
  })
})
