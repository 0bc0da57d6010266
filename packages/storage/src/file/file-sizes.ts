/**
 * The size and inode of many files at once, for the clean open's check of
 * every log's files (store-directory.ts). A store of 100k logs means 300k
 * `stat` calls; on a worker thread they run on the second core while the
 * opening thread builds the logs, and their 300k `Stats` objects never reach
 * the opening thread's heap.
 */
import type { FsPort } from '../fs-port.js'
import { nodeFs } from '../fs-port.js'

/** `sizes[2i]` and `sizes[2i + 1]`: the size and inode of `paths[i]`, both NaN where the stat failed. */
export type FileSizes = Float64Array

/** Below this many files a worker's start-up (tens of ms) costs more than the stats it takes off the thread. */
const WORKER_FROM_FILES = 3_000

/*
 * CommonJS evaluated in the worker: no module file to resolve, so the same
 * code runs from dist/ and from the TypeScript sources.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads')
const { statSync } = require('node:fs')
const { dirs, names } = workerData
const out = new Float64Array(dirs.length * names.length * 2)
let i = 0
for (const dir of dirs) {
  for (const name of names) {
    const st = statSync(dir + '/' + name, { throwIfNoEntry: false })
    out[i++] = st === undefined ? NaN : st.size
    out[i++] = st === undefined ? NaN : st.ino
  }
}
parentPort.postMessage(out, [out.buffer])
`

/**
 * The sizes and inodes of `names` in each of `dirs` (in that order: dir by
 * dir, name by name). On a worker thread when the port is the real file
 * system and there are enough files; through `fs` on this thread otherwise
 * (a test's faulty port sees every call), or if the worker cannot run.
 */
export async function fileSizes(fs: FsPort, dirs: readonly string[], names: readonly string[]): Promise<FileSizes> {
  if (fs === nodeFs && dirs.length * names.length >= WORKER_FROM_FILES) {
    try {
      return await statOnWorker(dirs, names)
    } catch {
      // No thread to be had (resource limits): the same stats, here.
    }
  }
  const out = new Float64Array(dirs.length * names.length * 2)
  let i = 0
  for (const dir of dirs) {
    for (const name of names) {
      try {
        const st = fs.statSync(`${dir}/${name}`)
        out[i] = st.size
        out[i + 1] = st.ino
      } catch {
        out[i] = Number.NaN
        out[i + 1] = Number.NaN
      }
      i += 2
    }
  }
  return out
}

async function statOnWorker(dirs: readonly string[], names: readonly string[]): Promise<FileSizes> {
  const { Worker } = await import('node:worker_threads')
  return await new Promise<FileSizes>((resolve, reject) => {
    const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { dirs, names } })
    worker.once('message', (sizes: FileSizes) => {
      resolve(sizes)
      void worker.terminate()
    })
    worker.once('error', reject)
    worker.once('exit', (code) => reject(new Error(`the stat worker exited with code ${code} before answering`)))
  })
}
