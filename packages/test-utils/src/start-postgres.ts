import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, readFileSync, rmSync } from 'node:fs'
import { appendFile, chmod, chown, mkdir, mkdtemp, readFile, rm, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import type { Client, ClientConfig, QueryResult, QueryResultRow } from 'pg'
import { onProcessExit } from './exit-hooks.js'
import { freePort } from './free-port.js'
import { postgresOsUser, type OsUser } from './os-user.js'
import { findPostgresBinaries, type PostgresBinaries, type PostgresBinarySource } from './pg-binaries.js'
import { formatSettings, type PostgresSettings } from './pg-settings.js'
import { ensureTemplate } from './pg-template.js'
import { mustRun, runCommand, runCommandSync } from './run-command.js'
import { assertServiceAllowed } from './test-scope.js'

export interface StartPostgresOptions {
  /** Extra server settings for this cluster, on top of the test defaults (which they may override). */
  settings?: PostgresSettings
  /** The database `url` and `query` point at; created at start unless it is 'postgres' (the default). */
  database?: string
  /** Use the binaries in this directory (wins over SLUICE_PG_BIN and the search). */
  binDir?: string
  /** Where to look for binaries when neither binDir nor SLUICE_PG_BIN is set; default 'auto'. */
  binaries?: PostgresBinarySource
  /**
   * Keep the cluster's data here between runs (for benchmarks whose setup
   * takes many minutes): made from the template if absent, started as it is
   * otherwise; `settings` apply only when it is made. `stop()` drops the slots
   * and stops the server but leaves this directory; so does a process that
   * dies without stopping it.
   */
  persistentDir?: string
}

export interface StopReport {
  /** Replication slots that still existed and were dropped. */
  readonly droppedSlots: readonly string[]
  /** Set when dropping the slots failed; the cluster and its WAL were removed all the same. */
  readonly slotError?: Error
}

/** A running throwaway cluster; superuser `postgres`, trust auth, on 127.0.0.1 and a unix socket. */
export interface PostgresCluster {
  /** TCP connection string for `database`. */
  readonly url: string
  /** Unix-socket connection string for `database` (socket dir percent-encoded as the host). */
  readonly socketUrl: string
  /** The unix socket directory (what libpq and pg call `host` for sockets). */
  readonly host: string
  readonly port: number
  readonly user: string
  readonly database: string
  readonly dataDir: string
  readonly logFile: string
  readonly binDir: string
  /** Server version, e.g. "15.18". */
  readonly version: string
  readonly major: number
  readonly binarySource: PostgresBinaries['source']
  readonly stopped: boolean
  /** TCP connection string for another database of this cluster. */
  urlFor(database: string): string
  /** Runs one query on a small pool connected to `database`. */
  query<R extends QueryResultRow = QueryResultRow>(text: string, values?: readonly unknown[]): Promise<QueryResult<R>>
  /** A new connected client; ended by `stop()` if still open. */
  connect(options?: { database?: string; socket?: boolean }): Promise<Client>
  /** Creates a database and returns its TCP connection string. */
  createDatabase(name: string): Promise<string>
  /** Terminates whatever uses a replication slot, drops every slot; returns their names. */
  dropReplicationSlots(): Promise<string[]>
  /** Drops all slots, stops the server, removes its directories. Idempotent. */
  stop(): Promise<StopReport>
}

const USER = 'postgres'
const START_ATTEMPTS = 8
const PORT_TAKEN = /could not bind|Address already in use|could not create any TCP\/IP sockets/i

/**
 * Runs beside every cluster, outside our process group, as the cluster's owner.
 * If we die without stopping the cluster (even by SIGKILL), our end of its stdin
 * closes and it stops the server and removes the root directory (the socket's;
 * a persistent cluster's data lies elsewhere and stays); after a normal stop
 * we tell it so and it just exits.
 */
const WATCHDOG_SCRIPT = `read -r line
[ "$line" = stopped ] && exit 0
"$SLUICE_PG_CTL" stop -D "$SLUICE_PG_DATA" -m immediate -w -t 20 >/dev/null 2>&1
rm -rf "$SLUICE_PG_ROOT"
`

function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`
}

function tail(text: string, lines = 30): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n')
}

function withTimeout(promise: Promise<unknown>, ms: number): Promise<void> {
  return Promise.race([promise.then(() => undefined, () => undefined), sleep(ms, undefined, { ref: false })])
}

function startWatchdog(pgCtl: string, dataDir: string, rootDir: string, as: OsUser | undefined): ChildProcess {
  const child = spawn('/bin/sh', ['-c', WATCHDOG_SCRIPT], {
    ...(as === undefined ? {} : { uid: as.uid, gid: as.gid }),
    cwd: '/',
    detached: true,
    stdio: ['pipe', 'ignore', 'ignore'],
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', SLUICE_PG_CTL: pgCtl, SLUICE_PG_DATA: dataDir, SLUICE_PG_ROOT: rootDir },
  })
  child.on('error', () => {})
  child.stdin?.on('error', () => {})
  // Neither the watchdog nor the pipe to it may keep the test process alive.
  child.unref()
  ;(child.stdin as unknown as { unref?: () => void } | null)?.unref?.()
  return child
}

/** The blunt, synchronous teardown used when the process is going away. */
function stopNow(pgCtl: string, dataDir: string, rootDir: string, as: OsUser | undefined): void {
  if (existsSync(join(dataDir, 'postmaster.pid'))) {
    try {
      runCommandSync(pgCtl, ['stop', '-D', dataDir, '-m', 'immediate', '-w', '-t', '10', '-s'], { as })
    } catch {
      // Removing the directory below still frees the disk; the server dies with its data dir's lock gone.
    }
  }
  rmSync(rootDir, { recursive: true, force: true })
}

async function startServer(pgCtl: string, dataDir: string, socketDir: string, logFile: string, as: OsUser | undefined): Promise<number> {
  let lastFailure = ''
  for (let attempt = 0; attempt < START_ATTEMPTS; attempt++) {
    const port = await freePort()
    const logStart = (await stat(logFile).catch(() => undefined))?.size ?? 0
    const result = await runCommand(pgCtl, ['start', '-D', dataDir, '-l', logFile, '-w', '-t', '60', '-s', '-o', `-p ${port} -k ${socketDir}`], { as })
    if (result.code === 0) return port
    const log = (await readFile(logFile, 'utf8').catch(() => '')).slice(logStart)
    lastFailure = `${result.stdout}${result.stderr}\n${tail(log)}`
    // Someone took the port between our probe and the server's bind: try another.
    if (!PORT_TAKEN.test(log)) break
  }
  throw new Error(`startPostgres: the server did not start (log ${logFile}):\n${lastFailure}`)
}

class Cluster implements PostgresCluster {
  readonly user = USER
  private pool: pg.Pool | undefined
  private readonly clients = new Set<Client>()
  private stopping: Promise<StopReport> | undefined

  constructor(
    private readonly binaries: PostgresBinaries,
    private readonly rootDir: string,
    /** Where the data lives: under rootDir, or a persistent directory stop() leaves alone. */
    private readonly dataRoot: string,
    readonly port: number,
    readonly database: string,
    private readonly as: OsUser | undefined,
    private readonly watchdog: ChildProcess,
    private readonly unregister: () => void,
  ) {}

  get host(): string {
    return this.rootDir
  }
  get dataDir(): string {
    return join(this.dataRoot, 'data')
  }
  get logFile(): string {
    return join(this.dataRoot, 'postgres.log')
  }
  get binDir(): string {
    return this.binaries.binDir
  }
  get version(): string {
    return this.binaries.version
  }
  get major(): number {
    return this.binaries.major
  }
  get binarySource(): PostgresBinaries['source'] {
    return this.binaries.source
  }
  get url(): string {
    return this.urlFor(this.database)
  }
  get socketUrl(): string {
    return `postgres://${USER}@${encodeURIComponent(this.rootDir)}:${this.port}/${encodeURIComponent(this.database)}`
  }
  get stopped(): boolean {
    return this.stopping !== undefined
  }

  urlFor(database: string): string {
    return `postgres://${USER}@127.0.0.1:${this.port}/${encodeURIComponent(database)}`
  }

  private config(database: string, socket = false): ClientConfig {
    return { host: socket ? this.rootDir : '127.0.0.1', port: this.port, user: USER, database }
  }

  private checkRunning(): void {
    if (this.stopping !== undefined) throw new Error(`the Postgres cluster on port ${this.port} has been stopped`)
  }

  async query<R extends QueryResultRow = QueryResultRow>(text: string, values?: readonly unknown[]): Promise<QueryResult<R>> {
    this.checkRunning()
    if (this.pool === undefined) {
      this.pool = new pg.Pool({ ...this.config(this.database), max: 4 })
      // An idle pooled connection dropped by the server must not crash the test process.
      this.pool.on('error', () => {})
    }
    return this.pool.query<R>(text, values === undefined ? undefined : [...values])
  }

  async connect(options: { database?: string; socket?: boolean } = {}): Promise<Client> {
    this.checkRunning()
    const client = new pg.Client(this.config(options.database ?? this.database, options.socket ?? false))
    this.clients.add(client)
    client.once('end', () => this.clients.delete(client))
    try {
      await client.connect()
    } catch (error) {
      this.clients.delete(client)
      throw error
    }
    return client
  }

  /** A short-lived admin connection; kept out of the pool so it works whatever `database` is. */
  private async withAdmin<T>(run: (client: Client) => Promise<T>): Promise<T> {
    const client = new pg.Client(this.config('postgres'))
    client.on('error', () => {})
    await client.connect()
    try {
      return await run(client)
    } finally {
      await client.end().catch(() => {})
    }
  }

  async createDatabase(name: string): Promise<string> {
    this.checkRunning()
    await this.withAdmin((client) => client.query(`CREATE DATABASE ${quoteIdent(name)}`))
    return this.urlFor(name)
  }

  dropReplicationSlots(): Promise<string[]> {
    return this.withAdmin(async (client) => {
      const dropped: string[] = []
      // A slot in use cannot be dropped; its user is terminated first, which takes a moment to land.
      for (let attempt = 0; ; attempt++) {
        const { rows } = await client.query<{ slot_name: string; active_pid: number | null }>(
          'SELECT slot_name, active_pid FROM pg_replication_slots',
        )
        if (rows.length === 0) return dropped
        for (const { slot_name: slot, active_pid: pid } of rows) {
          if (pid !== null) await client.query('SELECT pg_terminate_backend($1)', [pid])
          try {
            await client.query('SELECT pg_drop_replication_slot($1)', [slot])
            dropped.push(slot)
          } catch (error) {
            if (attempt >= 50 && (error as { code?: string }).code !== '42704') throw error
          }
        }
        await sleep(100)
      }
    })
  }

  stop(): Promise<StopReport> {
    this.stopping ??= this.teardown()
    return this.stopping
  }

  private async teardown(): Promise<StopReport> {
    // Our own connections first, so a fast shutdown has nothing to terminate under them.
    const closing = [...this.clients].map((client) => client.end())
    if (this.pool !== undefined) closing.push(this.pool.end())
    await withTimeout(Promise.all(closing), 2_000)

    let droppedSlots: string[] = []
    let slotError: Error | undefined
    try {
      droppedSlots = await this.dropReplicationSlots()
    } catch (error) {
      slotError = error as Error
    }

    const pgCtl = join(this.binDir, 'pg_ctl')
    const result = await runCommand(pgCtl, ['stop', '-D', this.dataDir, '-m', 'fast', '-w', '-t', '30', '-s'], { as: this.as }).catch(
      () => undefined,
    )
    if (result?.code !== 0) this.killPostmaster()
    await rm(this.rootDir, { recursive: true, force: true, maxRetries: 3 })
    this.watchdog.stdin?.end('stopped\n')
    this.unregister()
    return slotError === undefined ? { droppedSlots } : { droppedSlots, slotError }
  }

  private killPostmaster(): void {
    try {
      const pid = Number(readFileSync(join(this.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0])
      if (pid > 0) process.kill(pid, 'SIGKILL')
    } catch {
      // No pid file or no such process: nothing left to kill.
    }
  }
}

/**
 * Starts a throwaway Postgres cluster: a copy of a per-machine template cluster
 * (initdb'd once), with logical replication on, listening on 127.0.0.1 at a free
 * port and on a unix socket in a short directory under /tmp. As root the server
 * runs as the `postgres` OS user. `stop()` it when done; if the process exits
 * first, it is stopped anyway.
 */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<PostgresCluster> {
  assertServiceAllowed('Postgres')
  const as = postgresOsUser()
  const binaries = await findPostgresBinaries({
    ...(options.binDir === undefined ? {} : { binDir: options.binDir }),
    ...(options.binaries === undefined ? {} : { source: options.binaries }),
    runAs: as,
  })
  const template = await ensureTemplate(binaries, as)
  const pgCtl = join(binaries.binDir, 'pg_ctl')

  // Short on purpose: the socket path (dir + "/.s.PGSQL.<port>") must fit in ~107 bytes.
  const rootDir = await mkdtemp('/tmp/sluice-pg-')
  const dataRoot = options.persistentDir ?? rootDir
  const dataDir = join(dataRoot, 'data')
  const unregister = onProcessExit(() => stopNow(pgCtl, dataDir, rootDir, as))
  let watchdog: ChildProcess | undefined
  try {
    // Traversable by everyone (clients reach the socket through it); the data dir inside stays 0700.
    for (const dir of new Set([rootDir, dataRoot])) {
      await mkdir(dir, { recursive: true })
      await chmod(dir, 0o755)
      if (as !== undefined) await chown(dir, as.uid, as.gid)
    }
    if (!existsSync(join(dataDir, 'PG_VERSION'))) {
      // Copied as the owner so every file belongs to the server's user with the template's modes.
      await mustRun('cp', ['-a', template, dataDir], { as })
      await appendFile(join(dataDir, 'postgresql.conf'), `\n# this cluster\n${formatSettings({ ...options.settings })}`)
    }
    watchdog = startWatchdog(pgCtl, dataDir, rootDir, as)
    const port = await startServer(pgCtl, dataDir, rootDir, join(dataRoot, 'postgres.log'), as)
    const database = options.database ?? 'postgres'
    const cluster = new Cluster(binaries, rootDir, dataRoot, port, database, as, watchdog, unregister)
    if (database !== 'postgres') {
      try {
        await cluster.createDatabase(database)
      } catch (error) {
        await cluster.stop()
        throw error
      }
    }
    return cluster
  } catch (error) {
    stopNow(pgCtl, dataDir, rootDir, as)
    watchdog?.stdin?.end('stopped\n')
    unregister()
    throw error
  }
}
