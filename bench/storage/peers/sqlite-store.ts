/**
 * A shape-log store on SQLite (better-sqlite3): the first baseline the storage
 * benchmark compares the file engine with. It honours the whole contract
 * (`@sluice/storage` contract.ts) so the benchmark compares like with like.
 *
 * Schema (one database file for the whole store, WAL mode):
 *
 *   shapes    (num PK, id UNIQUE, meta, finished)       one row per log; a log is
 *                                                        visible only once finished
 *   entries   (shape, tx, op) PK WITHOUT ROWID,         one row per entry: the stored
 *             chunk, bytes                               `json,` bytes, clustered by key
 *                                                        so a chunk is one B-tree range
 *   chunks    (shape, chunk) PK, end_tx, end_op, end_entry   the sparse chunk index
 *   watermark (id = 0, lsn)                              the durable LSN
 *
 * Snapshot rows are keyed `(0, row number)` and carry their chunk number; see
 * log-book.ts for the key space. Every `appendTransaction` is one SQLite
 * transaction (prepared statements, one INSERT per entry, plus a `chunks` row
 * when the transaction closes a chunk). A read is one range query on the
 * primary key, `(tx, op) > lower AND (tx, op) <= upper`, in key order (the plan
 * is a co-routine over the PK search, no sort), with SQLite concatenating the
 * rows' bytes itself (`group_concat`) into the single span of the answer.
 * Returning one BLOB per row instead was about 4x slower here: better-sqlite3
 * pays a JS Buffer per row, a cost of the binding rather than of SQLite.
 *
 * Durability. `synchronous=NORMAL` (the default here) commits without fsync in
 * WAL mode; `flush()` then writes the watermark in a transaction run under
 * `synchronous=FULL`, whose WAL fsync makes every earlier commit durable too
 * (one fsync per flush, the same group commit the file engine does). With
 * `syncEveryCommit`, every commit runs under FULL and is durable on return, and
 * `flush()` only publishes: rewriting the watermark row would cost a second
 * fsync per durable append (recovery, were it implemented, would take each
 * log's last committed transaction instead).
 *
 * Not implemented, because the benchmark does not need them: reopening an
 * existing store (it opens empty directories only) and read-only mode.
 */
import { mkdirSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import type { LogOffset } from '@sluice/protocol'
import { DEFAULT_CHUNK_BYTES, entriesFromLines } from '@sluice/storage'
import type {
  AppendOptions,
  LogEntryInput,
  LogHead,
  LogRead,
  ShapeLog,
  ShapeLogStore,
  SnapshotWriter,
  Span,
} from '@sluice/storage'
import type { Key, PlannedEntry } from './log-book.js'
import { LogBook, PeerError, emptyRead } from './log-book.js'
import { PeerLogStore } from './peer-store.js'

export interface SqliteStoreOptions {
  readonly dir: string
  readonly chunkBytes?: number
  /** Run every commit under `synchronous=FULL` (durable on return). Default: NORMAL plus a FULL commit per flush. */
  readonly syncEveryCommit?: boolean
}

// SQLite integers are signed 64-bit; LSNs and op numbers stay far below this.
const I64_MAX = (1n << 63n) - 1n

function checkKey(key: Key): void {
  if (key.tx > I64_MAX || key.op > I64_MAX) throw new PeerError('invalid_append', `offset ${key.tx}_${key.op} is beyond SQLite's integer range`)
}

const SCHEMA = `
CREATE TABLE shapes (
  num      INTEGER PRIMARY KEY,
  id       TEXT NOT NULL UNIQUE,
  meta     BLOB NOT NULL,
  finished INTEGER NOT NULL
);
CREATE TABLE entries (
  shape INTEGER NOT NULL,
  tx    INTEGER NOT NULL,
  op    INTEGER NOT NULL,
  chunk INTEGER NOT NULL,
  bytes BLOB NOT NULL,
  PRIMARY KEY (shape, tx, op)
) WITHOUT ROWID;
CREATE TABLE chunks (
  shape     INTEGER NOT NULL,
  chunk     INTEGER NOT NULL,
  end_tx    INTEGER NOT NULL,
  end_op    INTEGER NOT NULL,
  end_entry INTEGER NOT NULL,
  PRIMARY KEY (shape, chunk)
) WITHOUT ROWID;
CREATE TABLE watermark (
  id  INTEGER PRIMARY KEY CHECK (id = 0),
  lsn INTEGER NOT NULL
);
INSERT INTO watermark (id, lsn) VALUES (0, 0);
`

class Statements {
  readonly insertShape: Database.Statement<[string, Uint8Array]>
  readonly finishShape: Database.Statement<[number]>
  readonly insertEntry: Database.Statement<[number, bigint, bigint, number, Buffer]>
  readonly insertChunk: Database.Statement<[number, number, bigint, bigint, number]>
  readonly readRange: Database.Statement<[number, bigint, bigint, bigint, bigint], { bytes: Buffer | null; n: number }>
  readonly setWatermark: Database.Statement<[bigint]>
  readonly deleteEntries: Database.Statement<[number]>
  readonly deleteChunks: Database.Statement<[number]>
  readonly deleteShape: Database.Statement<[number]>

  constructor(db: Database.Database) {
    this.insertShape = db.prepare('INSERT INTO shapes (id, meta, finished) VALUES (?, ?, 0)')
    this.finishShape = db.prepare('UPDATE shapes SET finished = 1 WHERE num = ?')
    this.insertEntry = db.prepare('INSERT INTO entries (shape, tx, op, chunk, bytes) VALUES (?, ?, ?, ?, ?)')
    this.insertChunk = db.prepare('INSERT INTO chunks (shape, chunk, end_tx, end_op, end_entry) VALUES (?, ?, ?, ?, ?)')
    // group_concat treats the BLOBs as text (valid UTF-8 JSON, no NULs) and the CAST gives the bytes back unchanged.
    this.readRange = db.prepare(
      `SELECT CAST(group_concat(bytes, '') AS BLOB) AS bytes, count(*) AS n
         FROM (SELECT bytes FROM entries WHERE shape = ? AND (tx, op) > (?, ?) AND (tx, op) <= (?, ?) ORDER BY tx, op)`,
    )
    this.setWatermark = db.prepare('UPDATE watermark SET lsn = ? WHERE id = 0')
    this.deleteEntries = db.prepare('DELETE FROM entries WHERE shape = ?')
    this.deleteChunks = db.prepare('DELETE FROM chunks WHERE shape = ?')
    this.deleteShape = db.prepare('DELETE FROM shapes WHERE num = ?')
  }
}

class SqliteShapeLog implements ShapeLog {
  readonly book: LogBook

  constructor(
    readonly id: string,
    readonly num: number,
    readonly meta: Uint8Array,
    chunkBytes: number,
    private readonly store: SqliteLogStore,
  ) {
    this.book = new LogBook(id, chunkBytes)
  }

  head(): LogHead {
    return this.book.head()
  }

  appendLines(tx: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options?: AppendOptions): number {
    return this.appendTransaction(entriesFromLines(tx, ops, jsons, count), options)
  }

  appendTransaction(entries: readonly LogEntryInput[], options?: AppendOptions): number {
    this.store.ensureOpen()
    const plan = this.book.planAppend(entries)
    if (plan.length === 0) return 0
    this.store.write(this.num, plan)
    this.book.apply(plan, false, options?.more ?? false)
    return plan.length
  }

  read(after: LogOffset): LogRead {
    const range = this.book.locate(after)
    if (!range) return emptyRead(after)
    const row = this.store.statements.readRange.get(this.num, range.lower.tx, range.lower.op, range.upper.tx, range.upper.op)
    if (!row?.bytes) return emptyRead(after)
    const spans: Span[] = [{ kind: 'bytes', bytes: row.bytes }]
    return { spans, byteLength: row.bytes.length, entryCount: row.n, nextOffset: range.nextOffset, reachedHead: range.reachedHead, release() {} }
  }
}

export class SqliteLogStore extends PeerLogStore<SqliteShapeLog> implements ShapeLogStore {
  readonly statements: Statements
  private readonly writeTx: (num: number, plan: readonly PlannedEntry[]) => void

  constructor(
    private readonly db: Database.Database,
    private readonly chunkBytes: number,
    private readonly syncEveryCommit: boolean,
  ) {
    super('SQLite')
    this.statements = new Statements(db)
    const { insertEntry, insertChunk } = this.statements
    this.writeTx = db.transaction((num: number, plan: readonly PlannedEntry[]) => {
      for (const e of plan) {
        checkKey(e.key)
        insertEntry.run(num, e.key.tx, e.key.op, e.chunk, e.stored)
        if (e.closes) insertChunk.run(num, e.chunk, e.key.tx, e.key.op, e.ordinal)
      }
    })
  }

  /** Writes a plan in one SQLite transaction. */
  write(num: number, plan: readonly PlannedEntry[]): void {
    this.writeTx(num, plan)
  }

  createShape(id: string, options?: { meta?: Uint8Array }): SnapshotWriter {
    this.ensureOpen()
    if (id.length === 0) throw new PeerError('invalid_append', 'a shape id must not be empty')
    if (this.logs.has(id) || this.creating.has(id)) throw new PeerError('shape_exists', `shape ${id} already exists`)
    const meta = options?.meta ?? new Uint8Array()
    const num = Number(this.statements.insertShape.run(id, meta).lastInsertRowid)
    this.creating.add(id)
    const log = new SqliteShapeLog(id, num, meta, this.chunkBytes, this)
    let open = true
    // endSnapshot() keeps the line for finish(). The peers take no live entries through the writer before the
    // log exists: the storage benchmark never queues transactions behind a snapshot (that is the server's job).
    let pendingEnd: Uint8Array | undefined
    let finished: ShapeLog | undefined
    const writeRows = (rows: readonly Uint8Array[], end: boolean): void => {
      const plan = log.book.planSnapshot(rows, end)
      this.write(num, plan)
      log.book.apply(plan, true)
    }
    return {
      append: (rows) => {
        this.ensureOpen()
        if (!open) throw new PeerError('invalid_append', `snapshot of shape ${id} is closed`)
        writeRows(rows, false)
      },
      endSnapshot: (snapshotEnd) => {
        if (!open || pendingEnd !== undefined) throw new PeerError('invalid_append', `snapshot of shape ${id} is closed`)
        pendingEnd = snapshotEnd
      },
      appendTransaction: (entries, options) => {
        if (finished === undefined) throw new PeerError('invalid_append', `shape ${id}: the benchmark peers take live entries once the log is finished`)
        return finished.appendTransaction(entries, options)
      },
      appendLines: (tx, ops, jsons, count, options) => {
        if (finished === undefined) throw new PeerError('invalid_append', `shape ${id}: the benchmark peers take live entries once the log is finished`)
        return finished.appendLines(tx, ops, jsons, count, options)
      },
      finish: async (end) => {
        this.ensureOpen()
        const snapshotEnd = end ?? pendingEnd
        if (!open || snapshotEnd === undefined || (end !== undefined && pendingEnd !== undefined)) {
          throw new PeerError('invalid_append', `snapshot of shape ${id} is closed`)
        }
        open = false
        writeRows([snapshotEnd], true)
        this.durably(() => this.statements.finishShape.run(num))
        log.book.publishSnapshot()
        this.creating.delete(id)
        this.logs.set(id, log)
        finished = log
        return log
      },
      abort: async () => {
        open = false
        this.creating.delete(id)
        this.dropRows(num)
      },
    }
  }

  protected dropRows(num: number): void {
    this.db.transaction(() => {
      this.statements.deleteEntries.run(num)
      this.statements.deleteChunks.run(num)
      this.statements.deleteShape.run(num)
    })()
  }

  /** Runs one write transaction whose commit is durable on return. */
  private durably(write: () => void): void {
    if (this.syncEveryCommit) {
      this.db.transaction(write)()
      return
    }
    // A FULL commit fsyncs the WAL, and with it every earlier NORMAL commit.
    this.db.pragma('synchronous = FULL')
    try {
      this.db.transaction(write)()
    } finally {
      this.db.pragma('synchronous = NORMAL')
    }
  }

  protected persistWatermark(lsn: bigint): void {
    if (!this.syncEveryCommit) this.durably(() => this.statements.setWatermark.run(lsn))
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    this.db.close()
  }
}

export async function openSqliteLogStore(options: SqliteStoreOptions): Promise<SqliteLogStore> {
  mkdirSync(options.dir, { recursive: true })
  if (readdirSync(options.dir).length > 0) throw new Error(`the SQLite peer opens empty directories only: ${options.dir}`)
  const db = new Database(join(options.dir, 'shapes.sqlite'))
  db.pragma('journal_mode = WAL')
  db.pragma(options.syncEveryCommit ? 'synchronous = FULL' : 'synchronous = NORMAL')
  db.exec(SCHEMA)
  return new SqliteLogStore(db, options.chunkBytes ?? DEFAULT_CHUNK_BYTES, options.syncEveryCommit ?? false)
}
