import { spawn, type ChildProcess } from 'node:child_process'
import { createRequire } from 'node:module'
import { createInterface } from 'node:readline'
import { pathToFileURL } from 'node:url'
import { onProcessExit } from './exit-hooks.js'

export interface SpawnNodeOptions {
  /** Merged over the parent's environment (a value of undefined removes a variable). */
  env?: Record<string, string | undefined>
  cwd?: string
  /** Extra node flags, placed before the script. */
  nodeArgs?: readonly string[]
}

export interface ExitStatus {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

export type LinePredicate = string | RegExp | ((line: string) => boolean)

/** A child node process running a TypeScript file. */
export interface NodeProcess extends AsyncIterable<string> {
  readonly pid: number
  readonly child: ChildProcess
  /** Every stdout line so far. */
  readonly lines: readonly string[]
  /** Everything written to stderr so far. */
  readonly stderr: string
  /** Settles once the process has exited and its output is fully read. */
  readonly exited: Promise<ExitStatus>
  /** Undefined while running. */
  readonly exitStatus: ExitStatus | undefined
  /**
   * Resolves with the first stdout line, after the line matched by the previous
   * `waitForLine`, that matches; rejects if the process exits first or on timeout.
   * A string matches a line that contains it.
   */
  waitForLine(predicate: LinePredicate, options?: { timeoutMs?: number }): Promise<string>
  /** Writes `text` and a newline to the child's stdin. */
  send(text: string): void
  /** Sends `signal` (default SIGKILL) unless already exited; resolves when it has exited. */
  kill(signal?: NodeJS.Signals): Promise<ExitStatus>
}

let tsxLoaderUrl: string | undefined

/** Resolved from this package (tsx is its dependency), so the child's cwd can be anywhere. */
function tsxLoader(): string {
  tsxLoaderUrl ??= pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
  return tsxLoaderUrl
}

function matcher(predicate: LinePredicate): (line: string) => boolean {
  if (typeof predicate === 'string') return (line) => line.includes(predicate)
  if (predicate instanceof RegExp) return (line) => predicate.test(line)
  return predicate
}

function tail(text: string, max = 2000): string {
  return text.length > max ? `...${text.slice(-max)}` : text
}

/**
 * Runs `scriptPath` (TypeScript or JavaScript) in a fresh node process through
 * tsx, with workspace packages resolved to their sources (the `sluice-source`
 * export condition), exactly as the tests see them. Children still alive when
 * the test process exits are SIGKILLed.
 */
export function spawnNode(scriptPath: string, args: readonly string[] = [], options: SpawnNodeOptions = {}): NodeProcess {
  const env: NodeJS.ProcessEnv = { ...process.env }
  for (const [key, value] of Object.entries(options.env ?? {})) {
    if (value === undefined) delete env[key]
    else env[key] = value
  }
  const nodeArgs = ['--conditions=sluice-source', '--import', tsxLoader(), ...(options.nodeArgs ?? [])]
  const child = spawn(process.execPath, [...nodeArgs, scriptPath, ...args], {
    cwd: options.cwd ?? process.cwd(),
    env,
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  const lines: string[] = []
  let stderr = ''
  let exitStatus: ExitStatus | undefined
  let cursor = 0
  const listeners = new Set<() => void>()
  const notify = (): void => {
    for (const listener of [...listeners]) listener()
  }

  const unregister = onProcessExit(() => {
    if (exitStatus === undefined) child.kill('SIGKILL')
  })

  const exited = new Promise<ExitStatus>((resolve, reject) => {
    child.once('error', (error) => {
      unregister()
      reject(error)
    })
    // 'close' rather than 'exit': by then every stdout line has been seen.
    child.once('close', (code, signal) => {
      unregister()
      exitStatus = { code, signal }
      notify()
      resolve(exitStatus)
    })
  })
  exited.catch(() => {})

  if (child.pid === undefined) throw new Error(`spawnNode: could not start ${process.execPath} for ${scriptPath}`)
  const pid = child.pid

  createInterface({ input: child.stdout }).on('line', (line) => {
    lines.push(line)
    notify()
  })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk
  })
  // A child that died leaves a broken pipe; writing to it must not crash the test.
  child.stdin.on('error', () => {})

  const describe = (): string =>
    `${scriptPath} (pid ${pid}${exitStatus ? `, exited code=${exitStatus.code} signal=${exitStatus.signal}` : ''})\n` +
    `stdout:\n${tail(lines.join('\n'))}\nstderr:\n${tail(stderr)}`

  const handle: NodeProcess = {
    pid,
    child,
    lines,
    get stderr() {
      return stderr
    },
    exited,
    get exitStatus() {
      return exitStatus
    },
    waitForLine(predicate, { timeoutMs = 30_000 } = {}) {
      const test = matcher(predicate)
      return new Promise<string>((resolve, reject) => {
        const check = (): void => {
          while (cursor < lines.length) {
            const line = lines[cursor++] as string
            if (test(line)) {
              done()
              resolve(line)
              return
            }
          }
          if (exitStatus !== undefined) {
            done()
            reject(new Error(`waitForLine: process exited before a matching line: ${describe()}`))
          }
        }
        const timer = setTimeout(() => {
          done()
          reject(new Error(`waitForLine: no matching line within ${timeoutMs} ms: ${describe()}`))
        }, timeoutMs)
        const done = (): void => {
          clearTimeout(timer)
          listeners.delete(check)
        }
        listeners.add(check)
        check()
      })
    },
    send(text) {
      child.stdin.write(`${text}\n`)
    },
    kill(signal = 'SIGKILL') {
      if (exitStatus === undefined) child.kill(signal)
      return exited
    },
    async *[Symbol.asyncIterator]() {
      let next = 0
      for (;;) {
        while (next < lines.length) yield lines[next++] as string
        if (exitStatus !== undefined) return
        await new Promise<void>((resolve) => {
          const wake = (): void => {
            listeners.delete(wake)
            resolve()
          }
          listeners.add(wake)
        })
      }
    },
  }
  return handle
}
