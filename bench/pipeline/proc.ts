/**
 * The orchestrator's side of the processes it runs: the pipeline worker
 * (JSON-lines requests and answers), plain commands (pg_recvlogical, pgbench)
 * with their wall time, and where processes may run and what the scheduler
 * gave them (CPU affinity with taskset, /proc schedstat; Linux only).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { readFileSync, readdirSync } from 'node:fs'
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
  /** A CPU list (`taskset -c` syntax): the process and every thread it starts run only there. */
  readonly cpus?: string | undefined
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
    const [cmd, args] = withCpus(
      process.execPath,
      // The compiled packages (dist/), as users run them: tsx's transform of the sources renames every
      // closure it creates (esbuild keepNames), which costs the hot path several per cent and each shape
      // a few hundred bytes. BENCH_SOURCE=1 runs the TypeScript sources instead.
      ['--expose-gc', ...(BENCH_SOURCE ? ['--conditions=sluice-source'] : []), '--import', tsx, ...EXTRA_NODE_ARGS, ...(options.nodeArgs ?? []), workerPath],
      options.cpus,
    )
    // taskset execs node, so child.pid is the pipeline process itself.
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], env: process.env })
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

// ---- CPU placement and scheduler time (Linux) ----

/**
 * `cmd args` run on `cpus` only (a `taskset -c` list such as "1" or "0-1"), or
 * as is when `cpus` is undefined. taskset sets the affinity and execs the
 * command (same pid); threads and children inherit it.
 */
export function withCpus(cmd: string, args: readonly string[], cpus: string | undefined): [string, string[]] {
  return cpus === undefined ? [cmd, [...args]] : ['taskset', ['-c', cpus, cmd, ...args]]
}

/** The CPUs a process may run on (`Cpus_allowed_list` of /proc/<pid>/status, e.g. "0-1"); undefined off Linux or once it is gone. */
export function cpusAllowed(pid: number | 'self' = 'self'): string | undefined {
  try {
    return /^Cpus_allowed_list:\s*(\S+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
  } catch {
    return undefined
  }
}

/** "0-2,5" -> [0, 1, 2, 5]. */
export function parseCpuList(list: string): number[] {
  const out: number[] = []
  for (const part of list.split(',')) {
    const [lo, hi] = part.split('-').map(Number)
    for (let c = lo!; c <= (hi ?? lo!); c++) out.push(c)
  }
  return out
}

/**
 * Two CPUs this process may use, to give Postgres one and the sync engine the
 * other; or why that cannot be done here (not Linux, no taskset, one CPU).
 */
export function twoCpus(): { readonly cpus: readonly [number, number] } | { readonly reason: string } {
  const allowed = cpusAllowed()
  if (allowed === undefined) return { reason: 'no /proc/self/status (not Linux)' }
  const cpus = parseCpuList(allowed)
  if (cpus.length < 2) return { reason: `only CPU ${allowed} available` }
  const probe = spawnSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' })
  if (probe.error !== undefined || probe.status !== 0) return { reason: 'taskset (util-linux) not found or not working' }
  return { cpus: [cpus[0]!, cpus[1]!] }
}

/**
 * Restricts every thread of `pid` to `cpus` (`taskset -a -p -c`). False when
 * the process has already gone (a backend may exit between listing and pinning).
 */
export async function setCpus(pid: number, cpus: string): Promise<boolean> {
  const r = await runTimed('taskset', ['-a', '-p', '-c', cpus, String(pid)])
  if (r.code === 0) return true
  if (!existsProc(pid)) return false
  throw new Error(`taskset -a -p -c ${cpus} ${pid} failed: ${r.stderr}`)
}

/**
 * Restricts `root` and every process descending from it to `cpus`. The root
 * goes first: whatever it forks from then on inherits the new affinity, so the
 * listing that follows cannot miss a child born in between.
 */
export async function setTreeCpus(root: number, cpus: string): Promise<void> {
  if (!(await setCpus(root, cpus))) throw new Error(`process ${root} is gone`)
  for (const pid of descendants(root)) await setCpus(pid, cpus)
}

/** Every live process below `root`, from the parent pids in /proc/<pid>/stat. */
export function descendants(root: number): number[] {
  const children = new Map<number, number[]>()
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    const stat = procStat(Number(name))
    if (stat === undefined) continue
    const ppid = Number(stat[1])
    const list = children.get(ppid) ?? []
    list.push(Number(name))
    children.set(ppid, list)
  }
  const out: number[] = []
  const stack = [...(children.get(root) ?? [])]
  while (stack.length > 0) {
    const pid = stack.pop()!
    out.push(pid)
    stack.push(...(children.get(pid) ?? []))
  }
  return out
}

/**
 * CPU time (user + system) in ms of `root` and everything below it, including
 * children that have exited: a process's cutime/cstime hold its reaped
 * children's (Postgres's postmaster reaps its backends at once), so the
 * difference of two readings covers backends that came and went in between.
 */
export function treeCpuMs(root: number): number | undefined {
  let ticks = 0
  for (const pid of [root, ...descendants(root)]) {
    const f = procStat(pid)
    if (f === undefined) {
      if (pid === root) return undefined
      continue
    }
    // utime, stime, cutime, cstime: fields 14-17 of the line, 12-15 after the command (index 11-14 here, state first).
    ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])
  }
  return (ticks * 1000) / CLOCK_TICKS
}

/** CPU time (user + system) of a process in ms, from /proc; undefined once it is gone. */
export function processCpuMs(pid: number): number | undefined {
  const f = procStat(pid)
  return f === undefined ? undefined : ((Number(f[11]) + Number(f[12])) * 1000) / CLOCK_TICKS
}

/** USER_HZ: the unit of /proc/<pid>/stat times; 100 on every Linux the bench runs on. */
const CLOCK_TICKS = 100

/** The fields of /proc/<pid>/stat after the command name (state first), or undefined. */
function procStat(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  } catch {
    return undefined
  }
}

/** Alive: neither gone nor a zombie waiting to be reaped. */
function existsProc(pid: number): boolean {
  const state = procStat(pid)?.[0]
  return state !== undefined && state !== 'Z' && state !== 'X'
}

/** Scheduler time of a task or process since it started. */
export interface SchedTimes {
  /** On a CPU. */
  readonly runNs: number
  /** Runnable but waiting on a run queue for a CPU. */
  readonly waitNs: number
}

/**
 * /proc/<pid>/task/<tid>/schedstat (fields 1 and 2: ns on a CPU, ns waiting on
 * a run queue), summed over every thread of `pid`, or of thread `tid` alone
 * (`tid === pid`: the main thread). Undefined off Linux or once it is gone.
 * Threads that exited are no longer counted, so compare readings of a process
 * whose threads live as long as the window (Node's and Postgres's do).
 */
export function schedStat(pid: number, tid?: number): SchedTimes | undefined {
  try {
    const tids = tid === undefined ? readdirSync(`/proc/${pid}/task`) : [String(tid)]
    let runNs = 0
    let waitNs = 0
    for (const t of tids) {
      let fields: string[]
      try {
        fields = readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')
      } catch (error) {
        if (tid === undefined) continue // a thread that exited since the listing
        throw error
      }
      runNs += Number(fields[0])
      waitNs += Number(fields[1])
    }
    return { runNs, waitNs }
  } catch {
    return undefined
  }
}
