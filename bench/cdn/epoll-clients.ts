/**
 * The C clients (`epoll-clients.c`) from TypeScript: compiled once per run with the system's C
 * compiler into a temp dir, and one instance driven over its stdin/stdout line protocol. Where
 * there is no compiler, `compileEpollClients` says so and the benchmark uses the Node clients.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

/** The compiled binary's path, or undefined (with the compiler's complaint logged) when it cannot be built. */
export function compileEpollClients(): string | undefined {
  const source = fileURLToPath(new URL('./epoll-clients.c', import.meta.url))
  const binary = join(mkdtempSync(join(tmpdir(), 'sluice-cdn-clients-')), 'epoll-clients')
  const cc = process.env.CC ?? 'cc'
  const r = spawnSync(cc, ['-O2', '-Wall', '-o', binary, source], { encoding: 'utf8' })
  if (r.status !== 0) {
    console.log(`cannot build the C clients (${cc}: ${r.error?.message ?? r.stderr.trim()}); using the Node clients`)
    return undefined
  }
  return binary
}

export interface NativeStart {
  readonly binary: string
  readonly host: string
  readonly port: number
  readonly localAddress: string | undefined
  readonly clients: number
  readonly syncConcurrency: number
  readonly table: string
}

/** One running instance: `synced` resolves with its initial-sync figures; `command` sends one command and resolves with its JSON answer. */
export class NativeClients {
  private readonly child: ChildProcess
  private readonly waiting: Array<(value: Record<string, unknown>) => void> = []
  private stderr = ''
  readonly synced: Promise<Record<string, unknown>>

  constructor(o: NativeStart) {
    this.child = spawn(o.binary, [o.host, String(o.port), o.localAddress ?? '-', String(o.clients), String(o.syncConcurrency), o.table], {
      stdio: ['pipe', 'pipe', 'pipe'],
    })
    this.child.stderr!.on('data', (c: Buffer) => (this.stderr = (this.stderr + c.toString('utf8')).slice(-2000)))
    let onSynced!: (value: Record<string, unknown>) => void
    let onFailed!: (error: Error) => void
    this.synced = new Promise((resolve, reject) => {
      onSynced = resolve
      onFailed = reject
    })
    this.child.once('exit', (code) => onFailed(new Error(`epoll-clients exited (${code}): ${this.stderr}`)))
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      const message = JSON.parse(line) as Record<string, unknown>
      if (message.event === 'synced') onSynced(message)
      else this.waiting.shift()?.(message)
    })
  }

  command(line: string): Promise<Record<string, unknown>> {
    return new Promise((resolve) => {
      this.waiting.push(resolve)
      this.child.stdin!.write(`${line}\n`)
    })
  }

  kill(): void {
    this.child.kill('SIGKILL')
  }
}
