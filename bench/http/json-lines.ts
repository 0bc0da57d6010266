/**
 * The two ends of the JSON-lines channel between the HTTP benchmark's
 * orchestrator and its processes (ceiling server, live clients, writer): each
 * request is one line on the child's stdin, `{"id","cmd","args"}`, answered by
 * one line on its stdout, `{"id","ok":true,"result"}` or `{"id","ok":false,"error"}`.
 * The child announces itself with `{"event":"ready"}`; lines that are not JSON
 * (a stray log) are passed through to the orchestrator's stdout.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { createInterface } from 'node:readline'
import { pathToFileURL } from 'node:url'

type Handler = (args: Record<string, unknown>) => unknown

/** The child's side: answers each command with its handler's (awaited) result. */
export function serveCommands(handlers: Record<string, Handler>, ready: Record<string, unknown> = {}): void {
  const send = (message: object): void => {
    process.stdout.write(`${JSON.stringify(message, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}\n`)
  }
  createInterface({ input: process.stdin }).on('line', (line) => {
    const { id, cmd, args } = JSON.parse(line) as { id: number; cmd: string; args: Record<string, unknown> }
    const handler = handlers[cmd]
    Promise.resolve()
      .then(() => {
        if (handler === undefined) throw new Error(`unknown command ${cmd}`)
        return handler(args)
      })
      .then(
        (result) => send({ id, ok: true, result: result ?? null }),
        (error: unknown) => send({ id, ok: false, error: error instanceof Error ? (error.stack ?? error.message) : String(error) }),
      )
  })
  // The orchestrator going away (stdin closed) ends the child too: nothing is left running.
  process.stdin.on('end', () => process.exit(0))
  send({ event: 'ready', pid: process.pid, ...ready })
}

/** The orchestrator's side: one child process running a TypeScript entry point. */
export class CommandChild {
  private nextId = 1
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>()
  private stderrTail = ''
  readonly exited: Promise<number | null>
  readyInfo: Record<string, unknown> = {}

  private constructor(
    readonly child: ChildProcess,
    readonly label: string,
    onReady: (info: Record<string, unknown>) => void,
  ) {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      let msg: Record<string, unknown>
      try {
        msg = JSON.parse(line) as Record<string, unknown>
      } catch {
        process.stdout.write(`[${label}] ${line}\n`)
        return
      }
      if (msg.event === 'ready') onReady(msg)
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
      child.on('exit', (code, signal) => {
        for (const p of this.pending.values()) p.reject(new Error(`${label} exited (${code ?? signal}): ${this.stderrTail.slice(-1000)}`))
        this.pending.clear()
        resolve(code)
      })
    })
  }

  static async spawn(label: string, script: string, nodeArgs: readonly string[] = []): Promise<CommandChild> {
    const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
    const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', tsx, ...nodeArgs, script], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: process.env,
    })
    let ready!: (info: Record<string, unknown>) => void
    const readyPromise = new Promise<Record<string, unknown>>((resolve) => {
      ready = resolve
    })
    const c = new CommandChild(child, label, ready)
    c.readyInfo = await Promise.race([readyPromise, c.exited.then((code) => Promise.reject(new Error(`${label} exited early (${code}): ${c.stderrTail}`)))])
    return c
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

  /** Closes stdin (the child exits on its own) and waits; kills it if it lingers. */
  async close(graceMs = 5_000): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return
    this.child.stdin!.end()
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs)
    await this.exited
    clearTimeout(timer)
  }
}
