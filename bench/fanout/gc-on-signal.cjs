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
    writeFileSync(`${file}.tmp`, JSON.stringify(process.memoryUsage()))
    renameSync(`${file}.tmp`, file)
  })
}
