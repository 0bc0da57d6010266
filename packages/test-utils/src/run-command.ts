import { spawn, spawnSync } from 'node:child_process'
import type { OsUser } from './os-user.js'

export interface RunOptions {
  /** Run as this user (we must be root); undefined runs as ourselves. */
  readonly as?: OsUser | undefined
  readonly cwd?: string
}

export interface RunResult {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

/**
 * The environment for Postgres binaries: ours minus every PG* variable, so a
 * developer's PGDATA/PGPORT/PGHOST can never point a test at a real cluster.
 */
export function postgresEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith('PG')) env[key] = value
  }
  return env
}

function identity(as: OsUser | undefined): { uid?: number; gid?: number } {
  return as === undefined ? {} : { uid: as.uid, gid: as.gid }
}

export function runCommand(command: string, args: readonly string[], options: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      ...identity(options.as),
      // A cwd the target user cannot enter makes initdb and postgres complain.
      cwd: options.cwd ?? '/',
      env: postgresEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
    child.once('error', reject)
    child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr }))
  })
}

export function runCommandSync(command: string, args: readonly string[], options: RunOptions = {}): RunResult {
  const result = spawnSync(command, args, {
    ...identity(options.as),
    cwd: options.cwd ?? '/',
    env: postgresEnv(),
    encoding: 'utf8',
    timeout: 30_000,
  })
  if (result.error !== undefined) throw result.error
  return { code: result.status, signal: result.signal, stdout: result.stdout, stderr: result.stderr }
}

/** Like runCommand, but a non-zero exit is an error that carries the command's output. */
export async function mustRun(command: string, args: readonly string[], options: RunOptions = {}): Promise<RunResult> {
  const result = await runCommand(command, args, options)
  if (result.code !== 0) {
    const who = options.as === undefined ? '' : ` (as ${options.as.name})`
    throw new Error(
      `${command} ${args.join(' ')}${who} failed (code ${result.code}, signal ${result.signal}):\n${result.stdout}${result.stderr}`,
    )
  }
  return result
}
