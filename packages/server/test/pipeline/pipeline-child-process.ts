import { createInterface } from 'node:readline'
import { type NodeProcess, spawnNode } from '@sluice/test-utils'

/**
 * A pipeline in a child process (fixtures/pipeline-child.ts) that a crash test
 * SIGKILLs; lines are seen as they arrive (our own reader beside spawnNode's).
 * Every line but progress goes to `transcript` (for a post-mortem), and the
 * child is in `registry` until it is killed (the test's afterEach kills what
 * is left).
 */
export class PipelineChild {
  readonly proc: NodeProcess
  readonly lines: string[] = []
  private readonly waiters = new Set<() => void>()
  private exited = false

  private readonly transcript: string[]
  private readonly registry: Set<PipelineChild>

  constructor(
    fixture: string,
    cwd: string,
    private readonly onLine: (line: string, child: PipelineChild) => void,
    options: { transcript?: string[]; registry?: Set<PipelineChild> } = {},
  ) {
    this.transcript = options.transcript ?? []
    this.registry = options.registry ?? new Set()
    const transcript = this.transcript
    this.proc = spawnNode(fixture, [], { cwd })
    this.registry.add(this)
    createInterface({ input: this.proc.child.stdout! }).on('line', (line) => {
      this.lines.push(line)
      if (!line.startsWith('progress ')) transcript.push(`${Date.now()} ${this.proc.pid} ${line}`)
      this.onLine(line, this)
      for (const wake of [...this.waiters]) wake()
    })
    void this.proc.exited.then(() => {
      this.exited = true
      for (const wake of [...this.waiters]) wake()
    })
  }

  get alive(): boolean {
    return !this.exited && this.proc.exitStatus === undefined
  }

  send(line: string): void {
    this.proc.send(line)
  }

  /** The first line at index >= `from` that matches; rejects on exit or timeout. */
  waitFor(match: (line: string) => boolean, options: { from?: number; timeoutMs?: number } = {}): Promise<{ index: number; line: string }> {
    const timeoutMs = options.timeoutMs ?? 60_000
    return new Promise((resolve, reject) => {
      let scanned = options.from ?? 0
      const check = (): void => {
        for (; scanned < this.lines.length; scanned++) {
          const line = this.lines[scanned]!
          if (match(line)) {
            done()
            resolve({ index: scanned, line })
            return
          }
        }
        if (this.exited) {
          done()
          reject(new Error(`child ${this.proc.pid} exited before the awaited line\n${this.describe()}`))
        }
      }
      const timer = setTimeout(() => {
        done()
        reject(new Error(`child ${this.proc.pid}: no awaited line within ${timeoutMs} ms\n${this.describe()}`))
      }, timeoutMs)
      const done = (): void => {
        clearTimeout(timer)
        this.waiters.delete(check)
      }
      this.waiters.add(check)
      check()
    })
  }

  async kill(): Promise<void> {
    this.transcript.push(`${Date.now()} ${this.proc.pid} KILL`)
    const status = await this.proc.kill('SIGKILL')
    this.registry.delete(this)
    if (status.signal !== 'SIGKILL') throw new Error(`child ${this.proc.pid} had exited on its own (code ${status.code})\n${this.describe()}`)
  }

  describe(): string {
    return `last lines:\n${this.lines.filter((l) => !l.startsWith('progress ')).slice(-25).join('\n')}\nstderr:\n${this.proc.stderr.slice(-3000)}`
  }
}

