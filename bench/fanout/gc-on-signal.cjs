'use strict'
/**
 * Preloaded (`--expose-gc --require`) into both servers of bench:fanout. On
 * SIGUSR2: a full collection, then the process's memory figures written to
 * `$BENCH_FANOUT_GC_DIR/gc-<pid>.json`. Resident memory read right after a
 * collection counts what the parked requests hold, not how much garbage the
 * collector has let pile up since its last full run, which varies from run to
 * run by more than the difference being measured.
 */
const { renameSync, writeFileSync } = require('node:fs')
const { join } = require('node:path')

const dir = process.env.BENCH_FANOUT_GC_DIR
/** BENCH_FANOUT_HEAP_SNAPSHOTS=1: a heap snapshot next to each report too (to compare by constructor). */
const snapshots = process.env.BENCH_FANOUT_HEAP_SNAPSHOTS === '1'
let taken = 0
if (dir !== undefined && typeof globalThis.gc === 'function') {
  process.on('SIGUSR2', () => {
    globalThis.gc()
    if (snapshots) require('node:v8').writeHeapSnapshot(join(dir, `heap-${process.pid}-${taken++}.heapsnapshot`))
    const file = join(dir, `gc-${process.pid}.json`)
    writeFileSync(`${file}.tmp`, JSON.stringify({ ...process.memoryUsage(), resident: residentByKind(), v8Spaces: v8Spaces() }))
    renameSync(`${file}.tmp`, file)
  })
}

/**
 * Resident bytes by kind of mapping (/proc/self/smaps): glibc's main arena
 * (`[heap]`), anonymous mappings (V8's pages, glibc's other arenas, large
 * allocations) and the rest (code and files). Which kind grows with the
 * parked requests says whose memory they hold.
 */
function residentByKind() {
  const kinds = { mallocHeap: 0, anonymous: 0, other: 0 }
  let kind = 'other'
  let text
  try {
    text = require('node:fs').readFileSync('/proc/self/smaps', 'utf8')
  } catch {
    return undefined
  }
  for (const line of text.split('\n')) {
    const mapping = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line)
    if (mapping !== null) {
      const path = mapping[1]
      kind = path === '[heap]' ? 'mallocHeap' : path === '' ? 'anonymous' : 'other'
    } else if (line.startsWith('Rss:')) {
      kinds[kind] += Number(line.split(/\s+/)[1]) * 1024
    }
  }
  return kinds
}

/** Resident bytes of each of V8's heap spaces (pages it holds, used or not). */
function v8Spaces() {
  const spaces = {}
  for (const space of require('node:v8').getHeapSpaceStatistics()) spaces[space.space_name] = space.physical_space_size
  return spaces
}
