/**
 * Where write-behind tails are written into their logs' files: on a thread of
 * the process's own (`WriteBackThread`, the engine's default), or through the
 * store's `FsPort` on the thread pool (`PortWriter`, for ports that are not
 * the real file system: the fault-injection tests).
 *
 * Why a thread: with 100k logs every checkpoint writes back nearly every log,
 * most with a few hundred bytes to a couple of KiB, and each write-back is an
 * open, a write and a close of two files. On the event loop that takes the
 * writer's one thread away from the replication stream: under a saturating
 * Postgres on the same cores a checkpoint of many logs outlasts the interval
 * at which checkpoints fall due, and the stream is held back behind it. On
 * the libuv pool each write queues behind the journal's fdatasyncs. A thread that
 * does nothing else takes its own share of the CPUs, does the system calls
 * back to back, and leaves the loop the copy of the bytes and the bookkeeping.
 *
 * One thread serves every store of the process; it starts at the first write
 * and holds the process open only while writes are in flight. Its work is
 * stateless (it opens each file by path, writes, closes), so nothing is lost
 * if it dies: the writes in flight fail, their bytes stay in memory and in
 * the journal, and the next write starts a new thread.
 */
import { Worker } from 'node:worker_threads'
import { forEachConcurrently } from '../concurrently.js'
import { StorageError } from '../errors.js'
import type { FdCache, FileRef } from './fd-cache.js'
import type { FsPort } from '../fs-port.js'
import { writeFullyAsync } from '../fs-port.js'

/** Bytes for a log's file, at a position. */
export interface FileWrite {
  readonly ref: FileRef
  readonly bytes: Uint8Array
  readonly position: number
}

/** Writes bytes into logs' files; resolves once written (not synced). */
export interface FileWriter {
  /** Every write of a write-back (a log's data and its records) as one job: one promise, failed by the first failure. */
  writeAll(writes: readonly FileWrite[]): Promise<void>
  /**
   * Many jobs (a checkpoint's write-backs of many logs) behind one promise,
   * which resolves once all are done with each job's failure, if any, at its
   * index: no promise per job, whose state (with everything it keeps) would
   * otherwise live until its job landed.
   */
  writeJobs(jobs: readonly (readonly FileWrite[])[]): Promise<readonly (Error | undefined)[]>
  /** Writes a checkpoint may keep in flight at once through this writer. */
  readonly concurrency: number
}

/** Through the store's port, on the thread pool, with the descriptor cache's descriptors. */
export class PortWriter implements FileWriter {
  // Each write pins a descriptor; the pool runs four at a time anyway.
  readonly concurrency = 8
  constructor(
    private readonly fs: FsPort,
    private readonly fds: FdCache,
  ) {}

  async writeAll(writes: readonly FileWrite[]): Promise<void> {
    for (const { ref, bytes, position } of writes) await this.fds.useAsync(ref, (fd) => writeFullyAsync(this.fs, fd, bytes, bytes.length, position))
  }

  async writeJobs(jobs: readonly (readonly FileWrite[])[]): Promise<readonly (Error | undefined)[]> {
    const failures = new Array<Error | undefined>(jobs.length).fill(undefined)
    // As many at once as a checkpoint kept in flight through this writer one log at a time.
    await forEachConcurrently(jobs.map((_, i) => i), this.concurrency, async (i) => {
      try {
        await this.writeAll(jobs[i]!)
      } catch (err) {
        failures[i] = err as Error
      }
    })
    return failures
  }
}

/*
 * Runs on the thread. Plain JavaScript evaluated as the worker's script, so
 * that the same code runs from the compiled package and from the TypeScript
 * sources under test. A batch's bytes are one shared buffer, job after job.
 */
const THREAD_SOURCE = `
const { parentPort } = require('node:worker_threads')
const fs = require('node:fs')
parentPort.on('message', ({ id, buffer, paths, inos, positions, lengths, jobs }) => {
  const bytes = new Uint8Array(buffer)
  const errors = []
  const found = new Array(paths.length).fill(-1)
  let at = 0
  for (let i = 0; i < paths.length; i++) {
    const n = lengths[i]
    let fd = -1
    try {
      fd = fs.openSync(paths[i], 'r+')
      const ino = fs.fstatSync(fd).ino
      if (inos[i] >= 0 && ino !== inos[i]) throw Object.assign(new Error('another file is at ' + paths[i]), { code: 'ESTALE' })
      found[i] = ino
      let done = 0
      while (done < n) {
        const w = fs.writeSync(fd, bytes, at + done, n - done, positions[i] + done)
        if (w <= 0) throw Object.assign(new Error('write made no progress'), { code: 'EIO' })
        done += w
      }
    } catch (err) {
      // The job's first failure is what it reports; its other files are written all the same.
      if (errors.length === 0 || errors[errors.length - 1].index !== jobs[i]) errors.push({ index: jobs[i], code: err && err.code, message: String(err && err.message) })
    } finally {
      if (fd >= 0) try { fs.closeSync(fd) } catch {}
      at += n
    }
  }
  parentPort.postMessage({ id, errors, found })
})
`

interface Job {
  readonly writes: readonly FileWrite[]
  /** Bytes of all its writes. */
  readonly length: number
  /** The `writeJobs` call it came in (a lone `writeAll` is a group of one), and its index there. */
  readonly group: JobGroup
  readonly index: number
}

/** The jobs of one `writeJobs` call: one promise for all of them. */
interface JobGroup {
  readonly failures: (Error | undefined)[]
  left: number
  readonly resolve: (failures: readonly (Error | undefined)[]) => void
}

/** A job's part is done; the job's first failure is what it reports. */
function settle(job: Job, err: Error | undefined): void {
  const group = job.group
  if (err !== undefined) group.failures[job.index] ??= err
  if (--group.left === 0) group.resolve(group.failures)
}

/**
 * A job bigger than a block (a huge transaction's tail) as parts that each fit
 * one: its writes cut at block boundaries, each piece at its own position. The
 * parts may land in any order (the writes are positional, to ranges of their
 * own). Why not a buffer of its own: a SharedArrayBuffer lives until the
 * thread's heap lets go of it too, and the thread, which allocates next to
 * nothing, collects its garbage rarely; each write-back of a big tail left its
 * bytes behind, hundreds of MiB over a transaction of a few million rows.
 */
function blockSized(writes: readonly FileWrite[]): FileWrite[][] {
  const parts: FileWrite[][] = []
  let part: FileWrite[] = []
  let used = 0
  for (const w of writes) {
    for (let at = 0; at < w.bytes.length; ) {
      if (used === BLOCK_BYTES) {
        parts.push(part)
        part = []
        used = 0
      }
      const n = Math.min(BLOCK_BYTES - used, w.bytes.length - at)
      part.push({ ref: w.ref, bytes: w.bytes.subarray(at, at + n), position: w.position + at })
      used += n
      at += n
    }
  }
  if (part.length > 0) parts.push(part)
  return parts
}

interface SharedBlock {
  readonly buffer: SharedArrayBuffer
  readonly view: Uint8Array
}

interface Batch {
  readonly jobs: Job[]
  /** The files written, in the order sent. */
  readonly refs: FileRef[]
  /** Given back to the free list when the batch returns. */
  readonly block: SharedBlock
}

interface BatchResult {
  readonly id: number
  /** Each file's inode as the thread found it (-1 where it could not open it). */
  readonly found: readonly number[]
  readonly errors: readonly { readonly index: number; readonly code: string | undefined; readonly message: string }[]
}

// A batch's bytes travel in a shared block (a few of them, kept for good:
// fresh ArrayBuffers per batch would count as V8 external memory and bring on
// full collections of the writer's heap; see tail-arena.ts). A few in flight
// keep the thread busy while the loop fills the next.
const BLOCK_BYTES = 1024 * 1024
const BLOCKS = 4
const BATCH_JOBS = 256

export class WriteBackThread implements FileWriter {
  // Enough to keep two batches queued behind the one the thread writes. Not
  // more: each write-back's plan and promise live until it lands, and with
  // thousands waiting under load they outlive young-generation collections
  // and are left for full collections of the writer's heap.
  readonly concurrency = 3 * BATCH_JOBS
  private worker: Worker | undefined
  private queue: Job[] = []
  private queueHead = 0
  private readonly free: SharedBlock[] = []
  private blocks = 0
  private readonly inFlight = new Map<number, Batch>()
  private nextId = 1
  private scheduled = false

  async writeAll(writes: readonly FileWrite[]): Promise<void> {
    const [failure] = await this.writeJobs([writes])
    if (failure !== undefined) throw failure
  }

  writeJobs(jobs: readonly (readonly FileWrite[])[]): Promise<readonly (Error | undefined)[]> {
    if (jobs.length === 0) return Promise.resolve([])
    return new Promise((resolve) => {
      const group: JobGroup = { failures: new Array<Error | undefined>(jobs.length).fill(undefined), left: 0, resolve }
      for (let i = 0; i < jobs.length; i++) {
        const writes = jobs[i]!
        const length = lengthOf(writes)
        if (length <= BLOCK_BYTES) {
          group.left++
          this.queue.push({ writes, length, group, index: i })
        } else {
          for (const part of blockSized(writes)) {
            group.left++
            this.queue.push({ writes: part, length: lengthOf(part), group, index: i })
          }
        }
      }
      this.schedule()
    })
  }

  private schedule(): void {
    if (this.scheduled) return
    // Gathered until the loop turns: a checkpoint asks for hundreds in one go.
    this.scheduled = true
    setImmediate(() => {
      this.scheduled = false
      this.post()
    })
  }

  /** Posts what is queued, as long as there are blocks for it. */
  private post(): void {
    while (this.queueHead < this.queue.length) {
      const block = this.takeBlock()
      if (block === undefined) break // posted again when a batch returns
      const { buffer, view } = block
      const jobs: Job[] = []
      const paths: string[] = []
      const inos: number[] = []
      const positions: number[] = []
      const lengths: number[] = []
      const owners: number[] = []
      const refs: FileRef[] = []
      let used = 0
      while (this.queueHead < this.queue.length && jobs.length < BATCH_JOBS) {
        const job = this.queue[this.queueHead]!
        const closed = job.writes.find((w) => w.ref.retired)
        if (closed !== undefined) {
          this.queueHead++
          settle(job, new StorageError('store_closed', `write to ${closed.ref.path}: the log is closed`))
          continue
        }
        // One that does not fit goes first in the next batch (every job fits an empty block: see blockSized).
        if (used + job.length > view.length) break
        this.queueHead++
        for (const w of job.writes) {
          view.set(w.bytes, used)
          used += w.bytes.length
          paths.push(w.ref.path)
          inos.push(w.ref.ino)
          positions.push(w.position)
          lengths.push(w.bytes.length)
          owners.push(jobs.length)
          refs.push(w.ref)
        }
        jobs.push(job)
      }
      if (jobs.length === 0) {
        this.free.push(block)
        continue
      }
      let worker: Worker
      try {
        worker = this.thread()
      } catch (err) {
        // No thread to be had (out of memory, threads): these fail, their bytes stay with their logs.
        this.free.push(block)
        for (const job of jobs) settle(job, Object.assign(new Error(`no write-back thread: ${String(err)}`), { code: 'EIO' }))
        continue
      }
      const id = this.nextId++
      this.inFlight.set(id, { jobs, refs, block })
      worker.ref()
      worker.postMessage({ id, buffer, paths, inos, positions, lengths, jobs: owners })
    }
    if (this.queueHead === this.queue.length) {
      this.queue = []
      this.queueHead = 0
    }
  }

  /**
   * Stops the thread: writes in flight fail (their bytes stay with their
   * logs) and a later write starts a new one. The shared thread needs no
   * closing (it holds the process open only while writing).
   */
  async close(): Promise<void> {
    const worker = this.worker
    if (worker === undefined) return
    this.worker = undefined
    // Stopped first: its blocks are reused only once it can no longer be writing from them.
    await worker.terminate()
    this.failInFlight(new Error('write-back thread closed'))
  }

  private takeBlock(): SharedBlock | undefined {
    const block = this.free.pop()
    if (block !== undefined || this.blocks === BLOCKS) return block
    this.blocks++
    const buffer = new SharedArrayBuffer(BLOCK_BYTES)
    return { buffer, view: new Uint8Array(buffer) }
  }

  private thread(): Worker {
    if (this.worker !== undefined) return this.worker
    const worker = new Worker(THREAD_SOURCE, { eval: true, name: 'sluice-write-back' })
    worker.on('message', (result: BatchResult) => this.landed(result))
    // A thread that failed or exited fails what it held; the next write starts another.
    worker.on('error', (err) => this.lost(worker, err))
    worker.on('exit', (code) => this.lost(worker, new Error(`write-back thread exited with code ${code}`)))
    // Held open only while writes are in flight (post, landed).
    worker.unref()
    this.worker = worker
    return worker
  }

  private landed(result: BatchResult): void {
    const batch = this.inFlight.get(result.id)
    if (batch === undefined) return
    this.inFlight.delete(result.id)
    this.free.push(batch.block)
    // From now on the thread, and the descriptor cache on reopen, refuse another file put at the same path.
    batch.refs.forEach((ref, i) => {
      if (ref.ino < 0 && result.found[i]! >= 0) ref.ino = result.found[i]!
    })
    const failed = new Map(result.errors.map((e) => [e.index, e]))
    batch.jobs.forEach((job, i) => {
      const err = failed.get(i)
      settle(job, err === undefined ? undefined : Object.assign(new Error(err.message), { code: err.code }))
    })
    if (this.inFlight.size === 0) this.worker?.unref()
    if (this.queueHead < this.queue.length) this.post()
  }

  /** The thread failed or exited on its own (it runs no more). */
  private lost(worker: Worker, cause: Error): void {
    if (this.worker !== worker) return
    this.worker = undefined
    this.failInFlight(cause)
  }

  private failInFlight(cause: Error): void {
    const batches = [...this.inFlight.values()]
    this.inFlight.clear()
    for (const batch of batches) {
      this.free.push(batch.block)
      for (const job of batch.jobs) settle(job, Object.assign(new Error(`write-back thread lost: ${cause.message}`), { code: 'EIO' }))
    }
    if (this.queueHead < this.queue.length) this.post()
  }
}

function lengthOf(writes: readonly FileWrite[]): number {
  let length = 0
  for (const w of writes) length += w.bytes.length
  return length
}

let shared: WriteBackThread | undefined

/** The process's write-back thread, shared by its stores. */
export function writeBackThread(): WriteBackThread {
  return (shared ??= new WriteBackThread())
}
