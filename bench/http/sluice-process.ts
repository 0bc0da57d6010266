/**
 * The Sluice server of the HTTP benchmark: the `sluice start` CLI of
 * `@sluice/server` (bin/sluice.js: the compiled dist/ when the build is
 * current, else the sources through tsx; see docs/operations.md), in a
 * process of its own, on a port the kernel picks (read from its banner).
 */
import { appendFileSync } from 'node:fs'
import { type ChildProcess, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

const SLUICE_BIN = fileURLToPath(new URL('../../packages/server/bin/sluice.js', import.meta.url))
/** Longest wait for the banner (start-up restores shapes and connects the slot). */
const START_TIMEOUT_MS = 120_000

export interface SluiceProcess {
  readonly url: string
  readonly pid: number
  /** SIGTERM (drain, flush, acknowledge), then SIGKILL if it hangs. */
  stop(): Promise<void>
}

export async function startSluice(options: {
  databaseUrl: string
  storageDir: string
  flags: readonly string[]
  env?: NodeJS.ProcessEnv
  /** Node's own flags for the server process (those NODE_OPTIONS refuses, such as --cpu-prof). */
  nodeArgs?: readonly string[]
}): Promise<SluiceProcess> {
  // BENCH_CPU_PROF=<dir>: the server writes a V8 CPU profile there when it stops (summarise with pipeline/profile-summary.ts).
  const profile = process.env.BENCH_CPU_PROF
  const nodeFlags = profile === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${profile}`, '--cpu-prof-interval=200']
  // BENCH_SLUICE_NODE_ARGS='--trace-gc ...': more Node flags for every server a benchmark starts (a probe, not a setting
  // to report: results files do not record it); BENCH_SLUICE_STDOUT=<file> appends the server's stdout there.
  const extra = process.env.BENCH_SLUICE_NODE_ARGS?.split(' ').filter((a) => a !== '') ?? []
  nodeFlags.push(...extra)
  const child: ChildProcess = spawn(
    process.execPath,
    [...nodeFlags, ...(options.nodeArgs ?? []), SLUICE_BIN, 'start', '--database-url', options.databaseUrl, '--port', '0', '--host', '127.0.0.1', '--storage-dir', options.storageDir, ...options.flags],
    { stdio: ['ignore', 'pipe', 'pipe'], env: options.env ?? process.env },
  )
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  let tail = ''
  child.stderr!.on('data', (c: Buffer) => {
    tail = (tail + c.toString('utf8')).slice(-4000)
    process.stderr.write(c.toString('utf8').replace(/^(?=.)/gm, '[sluice] '))
  })
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`sluice did not start within ${START_TIMEOUT_MS} ms: ${tail}`)), START_TIMEOUT_MS)
    let found = false
    const copyTo = process.env.BENCH_SLUICE_STDOUT
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (copyTo !== undefined) appendFileSync(copyTo, `${line}\n`)
      const m = /HTTP:\s+(http:\/\/\S+)/.exec(line)
      if (m !== null && !found) {
        found = true
        clearTimeout(timer)
        resolve(m[1]!)
      } else if (line.includes('"level":50') || line.includes('"level":40')) {
        // Warnings and errors are worth seeing; the banner and info lines are not.
        process.stdout.write(`[sluice] ${line}\n`)
      }
    })
    void exited.then((code) => {
      clearTimeout(timer)
      if (!found) reject(new Error(`sluice exited (${code}) before listening: ${tail}`))
    })
  })
  return {
    url,
    pid: child.pid!,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000)
      await exited
      clearTimeout(timer)
    },
  }
}
