/**
 * The orchestrator's side of the processes it runs: the pipeline worker
 * (JSON-lines requests and answers) and plain commands (pg_recvlogical,
 * pgbench) with their wall time.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { performance } from 'node:perf_hooks'
import { createInterface } from 'node:readline'
import { fileURLToPath, pathToFileURL } from 'node:url'

const workerPath = fileURLToPath(new URL('./worker.ts', import.meta.url))

/** Run the pipeline from the TypeScript sources rather than the built packages. */
export const BENCH_SOURCE = process.env.BENCH_SOURCE === '1'
/** BENCH_NODE_ARGS='--trace-gc ...': extra Node flags for every pipeline process (diagnostics; not for reported runs). */
const EXTRA_NODE_ARGS = (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter((a) => a !== '')

export interface WorkerOptions {
  /** Extra node flags (e.g. --cpu-prof). */
  readonly nodeArgs?: readonly string[]
  readonly label: string
}

/** A pipeline process. */
export class PipelineWorker {
  private nextId = 1
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>()
  private stderrTail = ''
  readonly exited: Promise<number | null>
  private readyPromise: Promise<void>

  private constructor(
    readonly child: ChildProcess,
    readonly label: string,
    onEvent: (event: Record<string, unknown>) => void,
  ) {
    let resolveReady!: () => void
    this.readyPromise = new Promise((resolve) => {
      resolveReady = resolve
    })
    createInterface({ input: child.stdout! }).on('line', (line) => {
      let msg: Record<string, unknown>
      try {
        msg = JSON.parse(line) as Record<string, unknown>
      } catch {
        process.stdout.write(`[${label}] ${line}\n`)
        return
      }
      if (msg.event === 'ready') resolveReady()
      else if (typeof msg.event === 'string') onEvent(msg)
      else if (typeof msg.id === 'number') {
        const p = this.pending.get(msg.id)
        this.pending.delete(msg.id)
        if (msg.ok === true) p?.resolve(msg.result)
        else p?.reject(new Error(`${label}: ${String(msg.error)}`))
      }
    })
    child.stderr!.on('data', (chunk: Buffer) => {
      const text = chunk.toString('utf8')
      this.stderrTail = (this.stderrTail + text).slice(-4000)
      process.stderr.write(text.replace(/^(?=.)/gm, `[${label}] `))
    })
    this.exited = new Promise((resolve) => {
      child.on('exit', (code) => {
        for (const p of this.pending.values()) p.reject(new Error(`${label} exited (code ${code}): ${this.stderrTail.slice(-1000)}`))
        this.pending.clear()
        resolve(code)
      })
    })
  }

  static async spawn(options: WorkerOptions, onEvent: (event: Record<string, unknown>) => void = () => {}): Promise<PipelineWorker> {
    const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
    const child = spawn(
      process.execPath,
      // The compiled packages (dist/), as users run them: tsx's transform of the sources renames every
      // closure it creates (esbuild keepNames), which costs the hot path several per cent and each shape
      // a few hundred bytes. BENCH_SOURCE=1 runs the TypeScript sources instead.
      ['--expose-gc', ...(BENCH_SOURCE ? ['--conditions=sluice-source'] : []), '--import', tsx, ...(options.nodeArgs ?? []), ...EXTRA_NODE_ARGS, workerPath],
      { stdio: ['pipe', 'pipe', 'pipe'], env: process.env },
    )
    const worker = new PipelineWorker(child, options.label, onEvent)
    await Promise.race([worker.readyPromise, worker.exited.then((code) => Promise.reject(new Error(`${options.label} exited early (${code})`)))])
    return worker
  }

  get pid(): number {
    return this.child.pid!
  }

  call<T = Record<string, unknown>>(cmd: string, args: Record<string, unknown> = {}): Promise<T> {
    const id = this.nextId++
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject })
      this.child.stdin!.write(`${JSON.stringify({ id, cmd, args })}\n`)
    })
  }

  /** Stops the pipeline cleanly and waits for the process to exit. */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return
    await this.call('stop').catch(() => {})
    await this.exited
  }

  /** Ends the process at once (its store is thrown away afterwards). */
  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return
    this.child.kill('SIGKILL')
    await this.exited
  }
}

export interface CommandResult {
  readonly code: number | null
  readonly ms: number
  readonly stdout: string
  readonly stderr: string
}

/** Runs a command to completion, timing it from spawn to exit. */
export function runTimed(cmd: string, args: readonly string[], options: { uid?: number; gid?: number; env?: NodeJS.ProcessEnv } = {}): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now()
    const child = spawn(cmd, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(options.uid === undefined ? {} : { uid: options.uid }),
      ...(options.gid === undefined ? {} : { gid: options.gid }),
      env: options.env ?? process.env,
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString('utf8')
    })
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString('utf8')
    })
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, ms: performance.now() - t0, stdout, stderr }))
  })
}
