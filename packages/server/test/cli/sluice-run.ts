/**
 * The `sluice` command as a user runs it, for the CLI tests: bin/sluice.js in
 * a child process with a clean environment, its output collected. Children a
 * test leaves running are killed after it.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { afterEach } from 'vitest'

export const BIN = fileURLToPath(new URL('../../bin/sluice.js', import.meta.url))

export interface Run {
  readonly child: ChildProcess
  stdout: string
  stderr: string
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpExecArray>
}

const children: ChildProcess[] = []
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
})

/**
 * The environment without anything that would configure sluice. The command runs from the sources
 * (SLUICE_FROM_SOURCE=1), as every test here does, whether or not a build exists: start-compiled.pg.test.ts
 * checks the compiled one.
 */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {}
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('SLUICE_') && k !== 'DATABASE_URL') env[k] = v
  return { ...env, SLUICE_FROM_SOURCE: '1', ...extra }
}

export function sluice(args: readonly string[], options: { cwd?: string; env?: Record<string, string>; detached?: boolean; nodeArgs?: readonly string[] } = {}): Run {
  // detached: a process group of its own, as a supervisor or a terminal would start it.
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), BIN, ...args], {
    cwd: options.cwd ?? process.cwd(),
    env: cleanEnv(options.env),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.detached === true,
  })
  children.push(child)
  const run: Run = {
    child,
    stdout: '',
    stderr: '',
    exited: new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal }))),
    waitFor: (pattern, timeoutMs = 60_000) =>
      new Promise((resolve, reject) => {
        const check = (): boolean => {
          const m = pattern.exec(run.stdout)
          if (m === null) return false
          cleanup()
          resolve(m)
          return true
        }
        const timer = setTimeout(() => {
          cleanup()
          reject(new Error(`timed out waiting for ${pattern}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`))
        }, timeoutMs)
        const onExit = (): void => {
          setImmediate(() => {
            if (check()) return
            cleanup()
            reject(new Error(`exited before ${pattern}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`))
          })
        }
        const cleanup = (): void => {
          clearTimeout(timer)
          child.stdout!.off('data', check)
          child.off('exit', onExit)
        }
        child.stdout!.on('data', check)
        child.on('exit', onExit)
        check()
      }),
  }
  child.stdout!.on('data', (d: Buffer) => (run.stdout += d.toString()))
  child.stderr!.on('data', (d: Buffer) => (run.stderr += d.toString()))
  return run
}

