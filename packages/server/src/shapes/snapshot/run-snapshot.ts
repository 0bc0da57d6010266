import { connect as netConnect } from 'node:net'
import { parseLsn } from '@sluice/protocol'
import type pg from 'pg'
import Cursor from 'pg-cursor'
import { DISPLAY_SETTINGS } from '../../replication/display-settings.js'
import { tableByOidSql, tableFromCatalogRows } from '../table-catalog.js'
import type { TableInfo } from '../table-catalog.js'
import { parsePgSnapshot } from './pg-snapshot.js'
import type { PgSnapshot } from './pg-snapshot.js'
import { SnapshotError, snapshotErrorFrom } from './snapshot-error.js'
import { buildSnapshotQuery } from './snapshot-query.js'

/**
 * What to snapshot: a table with an optional where clause and column
 * selection (the query is built by `buildSnapshotQuery`), or a query built
 * already (`text`, from `buildSnapshotQuery`, with `values` for its `$n`) and
 * the table it reads.
 */
export type SnapshotRequest = SnapshotTableRequest | SnapshotTextRequest

export interface SnapshotTableRequest extends SnapshotOptions {
  readonly table: TableInfo
  /** The where clause's canonical text (see buildSnapshotQuery). */
  readonly where?: string | undefined
  /** Values of `$1..$n` in `where`, as text (sent untyped, like quoted literals). */
  readonly params?: readonly string[] | undefined
  /** Selected columns; undefined means all. */
  readonly columns?: readonly string[] | undefined
  readonly text?: undefined
}

export interface SnapshotTextRequest extends SnapshotOptions {
  /** The table the query reads: it is locked and checked against the catalog before the rows are read. */
  readonly table: TableInfo
  /** A query from `buildSnapshotQuery`. */
  readonly text: string
  /** Values of its `$1..$n`, as text. */
  readonly values?: readonly string[] | undefined
}

export interface SnapshotOptions {
  /** Aborting cancels the running query, rolls back, and closes the connection. */
  readonly signal?: AbortSignal | undefined
  /** Most rows per batch handed to the sink (default 1000). */
  readonly batchRows?: number | undefined
  /** Batches are sized to stay near this many bytes when rows are large (default 4 MiB). */
  readonly batchBytes?: number | undefined
  /**
   * `SET LOCAL statement_timeout` in milliseconds; 0 or undefined leaves the
   * server's setting. With a cursor the timer runs from the first fetch to the
   * last (Postgres only resets it at Sync), so this bounds the whole row
   * stream, time spent waiting on the sink included.
   */
  readonly statementTimeoutMs?: number | undefined
  /**
   * `SET LOCAL lock_timeout` for the table lock, in milliseconds (default
   * DEFAULT_SNAPSHOT_LOCK_TIMEOUT_MS; 0 waits for ever). The lock queues
   * behind any waiting ACCESS EXCLUSIVE request (an ALTER TABLE stuck behind
   * a long transaction): without a bound every snapshot of that table would
   * wait as long, each holding a connection and a snapshot slot.
   */
  readonly lockTimeoutMs?: number | undefined
  /**
   * Runs in the snapshot's transaction once the snapshot is fixed, before the
   * rows: what else must be read at the same snapshot (a subquery shape's views).
   */
  readonly prepare?: ((client: pg.ClientBase) => Promise<void>) | undefined
}

export interface SnapshotStart {
  readonly snapshot: PgSnapshot
  /** `pg_current_wal_insert_lsn()` just after the snapshot was taken: above every visible transaction's commit LSN. */
  readonly insertLsn: bigint
}

/**
 * Where the rows go. On abort `runSnapshot` does not wait for
 * a sink call in progress: it ends the transaction at once (an open snapshot
 * holds back Postgres's xmin horizon) and settles; a sink that can block for
 * long should watch the same signal.
 */
export interface SnapshotSink {
  /** Called once, when the snapshot is fixed and before any rows. */
  start?(info: SnapshotStart): void | Promise<void>
  /** One batch of row lines (JSON, no newline). Awaited: a slow sink slows the query down, nothing piles up. */
  rows(lines: Uint8Array[]): void | Promise<void>
}

export interface SnapshotResult {
  readonly snapshot: PgSnapshot
  readonly insertLsn: bigint
  readonly rows: number
}

export const DEFAULT_SNAPSHOT_BATCH_ROWS = 1000
/** How long a snapshot waits for its table lock before it fails with `lock_timeout` (a 503 the client retries). */
export const DEFAULT_SNAPSHOT_LOCK_TIMEOUT_MS = 10_000
export const DEFAULT_SNAPSHOT_BATCH_BYTES = 4 * 1024 * 1024
/** Rows of a snapshot read in one round trip with its set-up, at most (`wholeRows`). */
const WHOLE_MAX_ROWS = 100
/** Rows of a streamed snapshot's first fetch, before any row's size is known. */
const FIRST_FETCH_ROWS = 16
/** How long a rollback after a failure may take before the connection is closed instead. */
const ROLLBACK_TIMEOUT_MS = 5_000

const utf8 = new TextEncoder()

const SNAPSHOT_SQL = 'SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text AS snapshot, pg_catalog.pg_current_wal_insert_lsn()::pg_catalog.text AS lsn'

/**
 * Runs the initial snapshot of a shape (docs/protocol.md §9, docs/architecture.md §2) on a
 * connection from `pool` (the caller sizes it: a bounded pool shared by all
 * the snapshots that start at once) and streams its rows to `sink`.
 *
 *   BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL <display settings>;
 *     LOCK TABLE … IN ACCESS SHARE MODE                 -- none of these takes the snapshot
 *   SELECT pg_current_snapshot(), pg_current_wal_insert_lsn()   -- first snapshot: fixes it
 *   <catalog check: the table is still the one in `request.table`>
 *   <row query through a cursor, batch by batch, each batch awaited in the sink>
 *   COMMIT
 *
 * A query without parameters first tries all of it in one round trip, the
 * rows capped at one batch plus one (`LIMIT`); a shape with more rows than a
 * batch, or a failure, starts over as above (see `#whole`).
 *
 * The lock comes before the snapshot so that the table cannot change between
 * the catalog check and the end of the stream, and a DROP or ALTER committed
 * before it is seen by both. The insert LSN (not pg_current_wal_lsn, which
 * lags behind commits under synchronous_commit=off) is read after the
 * snapshot: every transaction visible in the snapshot wrote its commit record
 * before that point.
 *
 * Every failure is a SnapshotError; the connection goes back to the pool after
 * a clean ROLLBACK, or is closed (abort, a broken connection, a rollback that
 * fails) — never left checked out.
 */
export async function runSnapshot(pool: pg.Pool, request: SnapshotRequest, sink: SnapshotSink): Promise<SnapshotResult> {
  const { signal } = request
  if (signal?.aborted === true) throw abortedError(signal)
  const batchRows = positiveInteger(request.batchRows, DEFAULT_SNAPSHOT_BATCH_ROWS, 'batchRows')
  const batchBytes = positiveInteger(request.batchBytes, DEFAULT_SNAPSHOT_BATCH_BYTES, 'batchBytes')
  const timeout = request.statementTimeoutMs ?? 0
  if (!Number.isSafeInteger(timeout) || timeout < 0) throw new SnapshotError('invalid_request', `statementTimeoutMs must be a non-negative integer, not ${timeout}`)
  const lockTimeout = request.lockTimeoutMs ?? DEFAULT_SNAPSHOT_LOCK_TIMEOUT_MS
  if (!Number.isSafeInteger(lockTimeout) || lockTimeout < 0) throw new SnapshotError('invalid_request', `lockTimeoutMs must be a non-negative integer, not ${lockTimeout}`)
  const query = request.text ?? buildSnapshotQuery(request.table, { where: request.where, columns: request.columns })
  const params = request.text === undefined ? request.params : request.values

  const client = await connect(pool, signal)
  const run = new SnapshotRun(client, request, query, [...(params ?? [])], sink, batchRows, batchBytes, timeout, lockTimeout)
  let onAbort: (() => void) | undefined
  const aborted =
    signal === undefined
      ? undefined
      : new Promise<never>((_, reject) => {
          onAbort = () => reject(abortedError(signal))
          signal.addEventListener('abort', onAbort, { once: true })
          // Aborted while the connection was being handed over: the event has fired already.
          if (isAborted(signal)) onAbort()
        })
  const work = run.execute()
  try {
    const result = await (aborted === undefined ? work : Promise.race([work, aborted]))
    run.release()
    return result
  } catch (error) {
    // The loser of the race settles later; nobody else waits for it.
    work.catch(() => {})
    if (signal !== undefined && isAborted(signal)) {
      // A statement may be running: cancel it, and close the connection (a
      // late cancel must never hit the connection's next user).
      run.cancelAndClose()
      throw abortedError(signal)
    }
    await run.rollbackAndRelease()
    throw error instanceof SnapshotError ? error : snapshotErrorFrom(error, 'snapshot')
  } finally {
    if (onAbort !== undefined) signal?.removeEventListener('abort', onAbort)
    aborted?.catch(() => {})
  }
}

class SnapshotRun {
  #released = false
  #connectionError: unknown
  readonly #onError = (error: unknown): void => {
    // While we hold the client the pool listens for nothing; a lost connection also fails the pending query.
    this.#connectionError = error
  }

  constructor(
    readonly client: pg.PoolClient,
    readonly request: SnapshotRequest,
    readonly query: string,
    readonly params: readonly string[],
    readonly sink: SnapshotSink,
    readonly batchRows: number,
    readonly batchBytes: number,
    readonly statementTimeoutMs: number,
    readonly lockTimeoutMs: number,
  ) {
    client.on('error', this.#onError)
  }

  async execute(): Promise<SnapshotResult> {
    // A backslash is read per the session's standard_conforming_strings, which one simple query lexes before its
    // SET LOCAL runs; and a semicolon, however quoted, stays out of a simple query, which would run a second
    // statement where the cursor's extended protocol refuses one.
    if (this.request.text === undefined && this.request.prepare === undefined && this.params.length === 0 && this.statementTimeoutMs === 0 && !/[\\;]/.test(this.query)) {
      const whole = await this.#whole()
      if (whole !== undefined) return whole
    }
    return this.#streamed()
  }

  #setup(): string[] {
    const info = this.request.table
    return [
      'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY',
      ...Object.entries({ ...DISPLAY_SETTINGS, standard_conforming_strings: 'on' }).map(([name, value]) => `SET LOCAL ${settingName(name)} = ${literal(value)}`),
      ...(this.statementTimeoutMs > 0 ? [`SET LOCAL statement_timeout = ${this.statementTimeoutMs}`] : []),
      `SET LOCAL lock_timeout = ${this.lockTimeoutMs}`,
      `LOCK TABLE ONLY ${quoteIdent(info.schema)}.${quoteIdent(info.name)} IN ACCESS SHARE MODE`,
    ]
  }

  /**
   * A small shape in one round trip: the set-up, the snapshot, the catalog
   * check, at most one batch of rows and the COMMIT in one simple query. Each
   * round trip wakes a Postgres backend, and on a busy machine the waker
   * often loses its core to it; a burst of new shapes paid four of them per
   * shape. Undefined when the shape has more rows than one batch, or when the
   * query failed (rolled back): the streamed path then starts over, with a
   * snapshot of its own, and reports the failure precisely. Only for
   * parameterless queries (a simple query cannot bind parameters) without a
   * backslash or a semicolon.
   */
  async #whole(): Promise<SnapshotResult | undefined> {
    const { client, request } = this
    const info = request.table
    const statements = [
      ...this.#setup(),
      SNAPSHOT_SQL,
      tableByOidSql(info.oid),
      `${this.query} LIMIT ${this.wholeRows() + 1}`,
      'COMMIT',
    ]
    let results: pg.QueryResult[]
    try {
      results = await this.#step('begin', async () => (await client.query(statements.join('; '))) as unknown as pg.QueryResult[])
    } catch (error) {
      if (this.#connectionError !== undefined || this.#released) throw error
      await this.#step('rollback', () => client.query('ROLLBACK'))
      return undefined
    }
    const n = statements.length
    if (!Array.isArray(results) || results.length !== n) throw new SnapshotError('protocol_error', 'the snapshot query returned fewer results than statements')
    const { snapshot, insertLsn } = this.#snapshotOf(results[n - 4]!, results[n - 3]!)
    const rows = results[n - 2]!.rows as Array<{ line?: unknown }>
    if (rows.length > this.wholeRows()) return undefined
    const lines = rows.map(({ line }) => {
      if (typeof line !== 'string') throw new SnapshotError('protocol_error', 'the snapshot query returned a NULL line')
      return utf8.encode(line)
    })
    await this.#sink('start', () => this.sink.start?.({ snapshot, insertLsn }))
    if (lines.length > 0) await this.#sink('rows', () => this.sink.rows(lines))
    return { snapshot, insertLsn, rows: lines.length }
  }

  /**
   * Rows the one-round-trip form reads at most: they are all held at once
   * whatever their size (a table of megabyte documents), so fewer than a
   * streamed batch, which is sized by the rows it has seen.
   */
  wholeRows(): number {
    return Math.min(this.batchRows, WHOLE_MAX_ROWS)
  }

  /** The snapshot and insert LSN from their query's result, once the catalog's answer shows the table unchanged. */
  #snapshotOf(snapshotResult: pg.QueryResult, catalogResult: pg.QueryResult): SnapshotStart {
    const info = this.request.table
    const row = snapshotResult.rows[0] as { snapshot?: unknown; lsn?: unknown } | undefined
    if (row === undefined || typeof row.snapshot !== 'string' || typeof row.lsn !== 'string') {
      throw new SnapshotError('protocol_error', 'pg_current_snapshot() returned no row')
    }
    const snapshot = parsePgSnapshot(row.snapshot)
    const insertLsn = parseLsn(row.lsn)
    const current = tableFromCatalogRows(catalogResult.rows)
    const change = describeChange(info, current)
    if (change !== undefined) {
      throw new SnapshotError('table_changed', `${JSON.stringify(info.schema)}.${JSON.stringify(info.name)} changed since it was loaded: ${change}`)
    }
    return { snapshot, insertLsn }
  }

  async #streamed(): Promise<SnapshotResult> {
    const { client } = this
    const setup = this.#setup()
    // One round trip for the set-up, the snapshot and the catalog check: on a
    // busy machine each round trip costs a context switch to the backend and
    // back, and shapes are created by the thousand. The statements run in
    // order, so the snapshot is still taken after the lock.
    const results = await this.#step('begin', async () => {
      const answer: unknown = await client.query([...setup, SNAPSHOT_SQL, tableByOidSql(this.request.table.oid)].join('; '))
      return answer as pg.QueryResult[]
    })
    const snapshotResult = results[results.length - 2]
    const catalogResult = results[results.length - 1]
    if (!Array.isArray(results) || snapshotResult === undefined || catalogResult === undefined) {
      throw new SnapshotError('protocol_error', 'the snapshot set-up returned fewer results than statements')
    }
    const { snapshot, insertLsn } = this.#snapshotOf(snapshotResult, catalogResult)

    const prepare = this.request.prepare
    if (prepare !== undefined) await this.#step('prepare', () => prepare(client))
    await this.#sink('start', () => this.sink.start?.({ snapshot, insertLsn }))
    const rows = await this.#stream()
    await this.#step('commit', () => client.query('COMMIT'))
    return { snapshot, insertLsn, rows }
  }

  /** Reads the cursor, one batch ahead of the sink: a fetch runs while the sink takes the previous batch. */
  async #stream(): Promise<number> {
    const cursor = this.client.query(new Cursor<[string]>(this.query, [...this.params], { rowMode: 'array' }))
    let count = 0
    let largest = 0
    let asked = 0
    let pending: Promise<[string][]> | undefined
    const read = (): Promise<[string][]> => {
      // Sized by the largest row of the last batch, the first fetch small: a table of large rows must not come
      // a thousand at a time, all held at once, and one large row must not shrink every later fetch.
      asked = count === 0 ? Math.min(this.batchRows, FIRST_FETCH_ROWS) : Math.max(1, Math.min(this.batchRows, Math.floor(this.batchBytes / Math.max(1, largest))))
      const next = cursor.read(asked)
      next.catch(() => {})
      return next
    }
    try {
      pending = read()
      for (;;) {
        const fetching = pending as Promise<[string][]>
        const batch = await this.#step('rows', () => fetching)
        pending = undefined
        if (batch.length === 0) break
        const lines = batch.map(([line]) => {
          if (typeof line !== 'string') throw new SnapshotError('protocol_error', 'the snapshot query returned a NULL line')
          return utf8.encode(line)
        })
        count += lines.length
        largest = 0
        for (const line of lines) if (line.length > largest) largest = line.length
        // Fewer rows than asked for means the query completed: no empty fetch needed.
        const done = batch.length < asked
        if (!done) pending = read()
        await this.#sink('rows', () => this.sink.rows(lines))
        if (done) break
      }
    } catch (error) {
      // Leave the connection ready for ROLLBACK: wait out a fetch in flight, then close an open portal.
      // (A cursor that failed has already sent Sync; closing it again would put a stray Close on the wire.)
      if (pending !== undefined) await pending.catch(() => {})
      const state = (cursor as unknown as { state?: string }).state
      if (!this.#released && (state === 'idle' || state === 'submitted')) await cursor.close().catch(() => {})
      throw error
    }
    await this.#step('rows', () => cursor.close())
    return count
  }

  async #step<T>(what: string, action: () => Promise<T>): Promise<T> {
    if (this.#released) throw new SnapshotError('aborted', 'snapshot aborted')
    try {
      return await action()
    } catch (error) {
      throw snapshotErrorFrom(this.#connectionError ?? error, `snapshot of ${JSON.stringify(this.request.table.schema)}.${JSON.stringify(this.request.table.name)} (${what})`)
    }
  }

  async #sink(what: string, action: () => void | Promise<void>): Promise<void> {
    if (this.#released) throw new SnapshotError('aborted', 'snapshot aborted')
    try {
      await action()
    } catch (error) {
      throw new SnapshotError('sink_failed', `snapshot sink failed (${what}): ${error instanceof Error ? error.message : String(error)}`, { cause: error })
    }
  }

  release(destroy?: Error): void {
    if (this.#released) return
    this.#released = true
    this.client.removeListener('error', this.#onError)
    // Errors from a client being destroyed must not go unheard.
    if (destroy !== undefined) this.client.on('error', () => {})
    this.client.release(destroy)
  }

  async rollbackAndRelease(): Promise<void> {
    if (this.#connectionError !== undefined) {
      this.release(asError(this.#connectionError))
      return
    }
    let timer: NodeJS.Timeout | undefined
    try {
      await Promise.race([
        this.client.query('ROLLBACK'),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error('ROLLBACK timed out')), ROLLBACK_TIMEOUT_MS)
        }),
      ])
      this.release()
    } catch (error) {
      this.release(asError(error))
    } finally {
      clearTimeout(timer)
    }
  }

  cancelAndClose(): void {
    if (this.#released) return
    sendCancelRequest(this.client)
    this.release(new Error('snapshot aborted'))
  }
}

/** A connection from the pool, or the abort: a connection that arrives after the abort goes straight back. */
async function connect(pool: pg.Pool, signal: AbortSignal | undefined): Promise<pg.PoolClient> {
  const connecting = pool.connect()
  if (signal === undefined) return connecting.catch((error: unknown) => Promise.reject(snapshotErrorFrom(error, 'snapshot connection')))
  let onAbort: (() => void) | undefined
  try {
    return await Promise.race([
      connecting.catch((error: unknown) => Promise.reject(snapshotErrorFrom(error, 'snapshot connection'))),
      new Promise<never>((_, reject) => {
        onAbort = () => reject(abortedError(signal))
        signal.addEventListener('abort', onAbort, { once: true })
      }),
    ])
  } catch (error) {
    if (signal.aborted) connecting.then((client) => client.release(), () => {})
    throw error
  } finally {
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort)
  }
}

/**
 * Postgres's CancelRequest, on a connection of its own to the same server
 * (what libpq's PQcancel sends). Fire and forget: the caller closes the
 * connection anyway; the cancel just stops the server's work sooner than the
 * closed socket would (a backend scanning without output notices late).
 */
function sendCancelRequest(client: pg.PoolClient): void {
  const c = client as unknown as { processID?: number | null; secretKey?: number | null; host?: string; port?: number }
  if (typeof c.processID !== 'number' || typeof c.secretKey !== 'number' || typeof c.port !== 'number' || c.host === undefined) return
  const packet = Buffer.alloc(16)
  packet.writeInt32BE(16, 0)
  packet.writeInt32BE(80877102, 4)
  packet.writeInt32BE(c.processID, 8)
  packet.writeInt32BE(c.secretKey, 12)
  const socket = c.host.startsWith('/') ? netConnect(`${c.host}/.s.PGSQL.${c.port}`) : netConnect(c.port, c.host)
  socket.setTimeout(5_000, () => socket.destroy())
  socket.on('error', () => {})
  socket.on('connect', () => socket.end(packet))
}

/** What differs between the table as loaded and as the snapshot sees it, or undefined when nothing that matters does. */
function describeChange(loaded: TableInfo, current: TableInfo | undefined): string | undefined {
  if (current === undefined) return 'it was dropped'
  if (current.schema !== loaded.schema || current.name !== loaded.name) return `it is now ${JSON.stringify(current.schema)}.${JSON.stringify(current.name)}`
  if (current.kind !== loaded.kind) return `it is now a ${current.kind} table`
  const columns = (info: TableInfo): string => JSON.stringify(info.columns.map((c) => [c.name, c.attnum, c.typeOid, c.typeMod, c.castToTextIsOutput]))
  if (columns(current) !== columns(loaded)) return 'its columns changed'
  if (JSON.stringify(current.primaryKey) !== JSON.stringify(loaded.primaryKey)) return 'its primary key changed'
  return undefined
}

function abortedError(signal: AbortSignal): SnapshotError {
  const reason: unknown = signal.reason
  return new SnapshotError('aborted', `snapshot aborted${reason instanceof Error ? `: ${reason.message}` : ''}`, { cause: reason })
}

/** Read through a function: TypeScript narrows `signal.aborted` to false after the first check and would not look again. */
function isAborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true
}

function positiveInteger(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback
  if (!Number.isSafeInteger(value) || value < 1) throw new SnapshotError('invalid_request', `${name} must be a positive integer, not ${value}`)
  return value
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error))
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`
}

function literal(value: string): string {
  return `'${value.replaceAll("'", "''")}'`
}

function settingName(name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new SnapshotError('invalid_request', `invalid setting name ${JSON.stringify(name)}`)
  return name
}
