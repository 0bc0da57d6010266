/**
 * bench:checkpoint: what a journal checkpoint costs with many logs, without
 * Postgres. Two parts, side by side in one run:
 *
 * 1. `files`: the raw cost of making N small writes durable, N files of one
 *    directory each: an fdatasync per file (4 and 32 at a time, Node's default
 *    thread pool being 4) against one syncfs (`sync -f`); and of writing a
 *    small tail into each of N logs' two files, on the event loop against the
 *    thread pool (open, fstat, write, close per file, as the engine does when
 *    the descriptor LRU cannot hold them all).
 * 2. `store`: a FileLogStore with N logs taking RATE one-row transactions a
 *    second to random logs for SECONDS; prints the store's `checkpointStats`
 *    every 5 s (logs, written back, write-back and sync milliseconds), then
 *    the event loop's busy share, the process's CPU and the closing
 *    checkpoint's time. Once per write-back path (WRITE_BACK=thread,pool:
 *    the store's write-back thread, or the thread pool), on the same logs.
 *
 * With COLD=1 the store part drops the kernel's page cache (root only)
 * before each reopen, as after a reboot: a write into the last block of a
 * file whose pages are not cached reads that block first.
 *
 * Usage: `pnpm --filter @sluice/bench run bench:checkpoint` (ONLY=files|store,
 * N=100000, RATE=8000, SECONDS=120, WRITE_BACK=thread,pool, COLD=1, BENCH_DIR: where the data goes, default the
 * OS temp dir; the store part needs about 3 minutes to create 100k logs).
 * Figures go to stdout only: machine-dependent diagnosis, not a report.
 */
import { execFileSync } from 'node:child_process'
import * as fs from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { forEachConcurrently, openFileLogStore } from '@sluice/storage'
import type { FileLogStore } from '@sluice/storage'

const N = Number(process.env.N ?? 100_000)
const RATE = Number(process.env.RATE ?? 8000)
const SECONDS = Number(process.env.SECONDS ?? 120)
const ONLY = new Set((process.env.ONLY ?? 'files,store').split(','))
// How the store part's checkpoints write back: its write-back thread, or the thread pool (writeBackThread: false).
const WRITE_BACKS = (process.env.WRITE_BACK ?? 'thread,pool').split(',')
const COLD = process.env.COLD === '1'
const root = fs.mkdtempSync(join(process.env.BENCH_DIR ?? tmpdir(), 'sluice-checkpoint-bench-'))

const done = (fd: number): Promise<void> => new Promise((resolve, reject) => fs.fdatasync(fd, (e) => (e ? reject(e) : resolve())))
const written = (fd: number, b: Buffer, at: number): Promise<number> =>
  new Promise((resolve, reject) => fs.write(fd, b, 0, b.length, at, (e, n) => (e ? reject(e) : resolve(n))))


const cpuMs = (since: NodeJS.CpuUsage): number => {
  const u = process.cpuUsage(since)
  return (u.user + u.system) / 1000
}

async function files(): Promise<void> {
  // Bounded by the descriptor limit: this part keeps every file open.
  const count = Math.min(N, 8000)
  const dir = join(root, 'files')
  fs.mkdirSync(dir)
  const fds: number[] = []
  for (let i = 0; i < count / 2; i++) {
    fs.mkdirSync(`${dir}/${i}`)
    for (const f of ['a', 'b']) fds.push(fs.openSync(`${dir}/${i}/${f}`, 'w+'))
  }
  const buf = Buffer.alloc(200, 1)
  let pos = 0
  const dirty = (): void => {
    for (const fd of fds) fs.writeSync(fd, buf, 0, buf.length, pos)
    pos += buf.length
  }
  for (let round = 0; round < 3; round++) {
    const t: number[] = []
    for (const how of ['c4', 'c32', 'syncfs'] as const) {
      dirty()
      const t0 = performance.now()
      if (how === 'syncfs') execFileSync('sync', ['-f', dir])
      else await forEachConcurrently(fds, how === 'c4' ? 4 : 32, done)
      t.push(performance.now() - t0)
    }
    console.log(`files: ${fds.length} files of 200 dirty bytes: fdatasync 4 at a time ${t[0]!.toFixed(0)} ms, 32 at a time ${t[1]!.toFixed(0)} ms, one syncfs ${t[2]!.toFixed(0)} ms`)
  }
  for (const fd of fds) fs.closeSync(fd)

  // Write-back: one small write into each of two files per log, the files opened and closed each time.
  const logs = Array.from({ length: count / 2 }, (_, i) => `${dir}/${i}`)
  const tail = Buffer.alloc(3000, 97)
  const records = Buffer.alloc(128, 1)
  for (let round = 0; round < 3; round++) {
    let c0 = process.cpuUsage()
    let t0 = performance.now()
    for (const log of logs) {
      for (const [f, b] of [['a', tail], ['b', records]] as const) {
        const fd = fs.openSync(`${log}/${f}`, 'r+')
        fs.writeSync(fd, b, 0, b.length, fs.fstatSync(fd).size)
        fs.closeSync(fd)
      }
    }
    const loop = [performance.now() - t0, cpuMs(c0)]
    c0 = process.cpuUsage()
    t0 = performance.now()
    await forEachConcurrently(logs, 64, async (log) => {
      for (const [f, b] of [['a', tail], ['b', records]] as const) {
        const fd = fs.openSync(`${log}/${f}`, 'r+')
        await written(fd, b, fs.fstatSync(fd).size)
        fs.closeSync(fd)
      }
    })
    const pool = [performance.now() - t0, cpuMs(c0)]
    console.log(`files: write-back of ${logs.length} logs: event loop ${loop[0]!.toFixed(0)} ms wall / ${loop[1]!.toFixed(0)} ms CPU, thread pool ${pool[0]!.toFixed(0)} ms wall / ${pool[1]!.toFixed(0)} ms CPU`)
  }
}

async function store(): Promise<void> {
  const dir = join(root, 'store')
  const created = await openFileLogStore({ dir })
  const t0 = performance.now()
  const end = new TextEncoder().encode('{"headers":{"control":"snapshot-end","xmin":"1","xmax":"2","xip_list":[]}}')
  let batch: Promise<unknown>[] = []
  for (let i = 0; i < N; i++) {
    batch.push(created.createShape(`s${i}`, {}).finish(end))
    if (batch.length === 500) {
      await Promise.all(batch)
      batch = []
    }
  }
  await Promise.all(batch)
  await created.close()
  console.log(`store: ${N} logs created in ${((performance.now() - t0) / 1000).toFixed(1)} s`)
  let lsn = 1000n
  // Each variant reopens the same store, so they write back the same logs one after the other.
  for (const how of WRITE_BACKS) {
    if (COLD) dropPageCache()
    const s = await openFileLogStore({ dir, writeBackThread: how === 'thread' })
    lsn = await feedStore(s, how, lsn)
  }
}

/** Empties the kernel's page cache (dirty pages written first); says so when not allowed. */
function dropPageCache(): void {
  execFileSync('sync')
  try {
    fs.writeFileSync('/proc/sys/vm/drop_caches', '1')
    console.log('store: page cache dropped')
  } catch (err) {
    console.log(`store: cannot drop the page cache (${(err as Error).message}): the run is warm`)
  }
}

/** RATE one-row transactions a second to random logs for SECONDS, then a close (a checkpoint of every log written). */
async function feedStore(s: FileLogStore, how: string, from: bigint): Promise<bigint> {
  const enc = new TextEncoder()
  let lsn = from
  const line = (i: number, l: bigint): Uint8Array =>
    enc.encode(JSON.stringify({ key: `"public"."t"/"${i}"`, value: { id: String(i), v: 'x'.repeat(150) }, headers: { operation: 'insert', lsn: String(l), op_position: 0 } }))
  const start = performance.now()
  const elu0 = performance.eventLoopUtilization()
  const cpu0 = process.cpuUsage()
  let sent = 0
  const feed = setInterval(() => {
    const due = Math.floor(((performance.now() - start) / 1000) * RATE)
    for (; sent < due; sent++) {
      lsn += 10n
      const i = Math.floor(Math.random() * N)
      s.get(`s${i}`)!.appendTransaction([{ offset: { tx: lsn, op: 0n }, json: line(i, lsn) }])
      s.advance(lsn)
    }
  }, 5)
  const checkpoints: string[] = []
  const report = setInterval(() => {
    const c = s.checkpointStats
    const note = `${c.writtenBack}/${c.logs} logs, write-back ${c.writeBackMs.toFixed(0)} ms, sync ${c.syncMs.toFixed(0)} ms, total ${c.totalMs.toFixed(0)} ms${c.syncfs ? ' (syncfs)' : ''}`
    if (!c.running && c.logs > 0 && checkpoints.at(-1) !== note) checkpoints.push(note)
    console.log(`store (${how}): ${((performance.now() - start) / 1000).toFixed(0)} s, ${sent} changes; checkpoint ${c.running ? 'running' : 'last'}: ${note}`)
  }, 5000)
  await new Promise((resolve) => setTimeout(resolve, SECONDS * 1000))
  clearInterval(feed)
  clearInterval(report)
  const elu = performance.eventLoopUtilization(elu0)
  const cpu = cpuMs(cpu0)
  const c0 = performance.now()
  const loopBefore = performance.eventLoopUtilization()
  await s.close()
  const closeMs = performance.now() - c0
  const closeLoop = performance.eventLoopUtilization(loopBefore)
  console.log(
    `store (${how}): ${sent} changes in ${SECONDS} s: event loop busy ${(elu.utilization * 100).toFixed(0)}%, process CPU ${((cpu / (SECONDS * 1000)) * 100).toFixed(0)}% of a core; ` +
      `checkpoints done meanwhile: ${checkpoints.length === 0 ? 'none' : checkpoints.join('; ')}; ` +
      `close (final checkpoint, heads file) ${closeMs.toFixed(0)} ms, event loop busy ${(closeLoop.utilization * 100).toFixed(0)}% of it`,
  )
  return lsn
}

try {
  if (ONLY.has('files')) await files()
  if (ONLY.has('store')) await store()
} finally {
  fs.rmSync(root, { recursive: true, force: true })
}
