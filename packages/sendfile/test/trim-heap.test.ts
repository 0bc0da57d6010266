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
