import { BEFORE_ALL, type LogOffset, buildRowKey, formatOffset, parseOffset } from '@sluice/protocol'
import { type ShapeLog, readSpans } from '@sluice/storage'
import { createHash } from 'node:crypto'

/** One line of a shape log, parsed, with the offset it is stored at. */
export interface LogLine {
  readonly offset: string
  readonly message: {
    key?: string
    value?: Record<string, string | null>
    old_value?: Record<string, string | null>
    headers: Record<string, unknown>
  }
}

/** Every published line of a log, read the way the HTTP layer will: chunk by chunk from `-1`. */
export function readLog(log: ShapeLog): LogLine[] {
  const lines: LogLine[] = []
  let after: LogOffset = BEFORE_ALL
  for (;;) {
    const read = log.read(after)
    try {
      if (read.entryCount > 0) {
        const bytes = readSpans(read)
        // Stored as `json,` per entry: the body is `[` + bytes without the last comma + `]`.
        const body = `[${bytes.subarray(0, bytes.length - 1).toString('utf8')}]`
        const messages = JSON.parse(body) as LogLine['message'][]
        if (messages.length !== read.entryCount) throw new Error(`read ${messages.length} messages, expected ${read.entryCount}`)
        // Offsets of single entries are not in the body; the range's end is. Tag each with its chunk's end.
        for (const message of messages) lines.push({ offset: formatOffset(read.nextOffset), message })
      }
      if (read.reachedHead || read.entryCount === 0) return lines
      after = read.nextOffset
    } finally {
      read.release()
    }
  }
}

/** The rows a client holds after applying `lines` from the start (Electric's `Shape` merge rules). */
export function materialize(lines: readonly LogLine[], options: { strict?: boolean } = {}): Map<string, Record<string, string | null>> {
  // Strict: an update or delete of a key the shape does not hold is an error. Tables without a primary key
  // can hold identical rows under one key, so deleting both sends two deletes of it (as Electric does).
  const strict = options.strict ?? true
  const rows = new Map<string, Record<string, string | null>>()
  for (const { message } of lines) {
    const op = message.headers['operation']
    const key = message.key
    if (op === undefined || key === undefined) continue
    if (op === 'insert') rows.set(key, { ...message.value })
    else if (op === 'update') {
      const current = rows.get(key)
      if (current === undefined && !strict) continue
      if (current === undefined) throw new Error(`update of a row not in the shape: ${key}`)
      rows.set(key, { ...current, ...message.value })
    } else if (op === 'delete') {
      if (!rows.delete(key) && strict) throw new Error(`delete of a row not in the shape: ${key}`)
    }
  }
  return rows
}

/**
 * The rows Postgres says a shape holds: `SELECT` with the shape's where, each
 * value as text, keyed with the protocol's key builder (not the snapshot SQL,
 * which is under test), each value as its type's output function prints it.
 */
export async function expectedRows(
  query: (text: string, values?: unknown[]) => Promise<{ rows: Array<Record<string, unknown>> }>,
  table: { schema: string; name: string },
  options: { where?: string; params?: readonly string[]; columns?: readonly string[] } = {},
): Promise<Map<string, Record<string, string | null>>> {
  const meta = await query(
    `SELECT a.attname AS name, t.typname AS type,
            coalesce((SELECT k.n - 1 FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(att, n)
                       WHERE i.indrelid = c.oid AND i.indisprimary AND k.att = a.attnum), -1)::int4 AS pk
       FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
       JOIN pg_type t ON t.oid = a.atttypid
      WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
    [table.schema, table.name],
  )
  const columns = meta.rows as Array<{ name: string; type: string; pk: number }>
  const selected = options.columns === undefined ? columns : columns.filter((c) => options.columns?.includes(c.name))
  const pk = columns.filter((c) => c.pk >= 0).sort((a, b) => a.pk - b.pk).map((c) => c.name)
  const ident = (s: string): string => `"${s.replaceAll('"', '""')}"`
  // format('%s') prints with the type's output function, which is what pgoutput sends (`::text` differs for
  // bool, bpchar and inet).
  const list = columns
    .map((c) => `CASE WHEN ${ident(c.name)} IS NULL THEN NULL ELSE format('%s', ${ident(c.name)}) END AS ${ident(c.name)}`)
    .join(', ')
  const sql = `SELECT ${list} FROM ${ident(table.schema)}.${ident(table.name)}${options.where === undefined ? '' : ` WHERE ${options.where}`}`
  const result = await query(sql, options.params === undefined ? [] : [...options.params])
  const rows = new Map<string, Record<string, string | null>>()
  for (const raw of result.rows) {
    const record: Record<string, string | null> = {}
    for (const c of columns) {
      record[c.name] = raw[c.name] as string | null
    }
    const key = buildRowKey({ schema: table.schema, name: table.name }, record, pk)
    const value: Record<string, string | null> = {}
    for (const c of selected) value[c.name] = record[c.name] ?? null
    rows.set(key, value)
  }
  return rows
}

/** Normalises booleans in materialised rows (snapshots say `true`, pgoutput `t`). */
export function normaliseBooleans(rows: Map<string, Record<string, string | null>>, boolColumns: readonly string[]): void {
  for (const row of rows.values()) {
    for (const c of boolColumns) {
      const v = row[c]
      if (v === 'true') row[c] = 't'
      else if (v === 'false') row[c] = 'f'
    }
  }
}

export { parseOffset }

/** What a structure check counted. */
export interface LogStructure {
  readonly snapshotRows: number
  readonly changes: number
  readonly transactions: number
  /** Ranges read (chunks, or the open tail). */
  readonly ranges: number
}

/**
 * Checks the shape of a log as its lines are read (feed them in order, in as
 * many calls as wanted) and throws an Error naming the first violation:
 * snapshot rows (inserts without lsn), exactly one `snapshot-end`, then
 * changes at strictly increasing (lsn, op_position) offsets, each
 * transaction's lines contiguous with one txid and exactly one `last: true`
 * (on its last line), each key-change delete followed by its insert at op+1,
 * and every range ending at the offset of its last line (snapshot ranges at a
 * `0_n` virtual offset, never mixed with live lines). `end()` checks that the
 * log read so far is whole (published logs only ever are).
 */
export class LogStructureChecker {
  private snapshotEnded = false
  private snapshotRows = 0
  private changes = 0
  private transactions = 0
  private ranges = 0
  private position = 0
  private previous: [bigint, number] | undefined
  private openTx: { lsn: bigint; txid: unknown } | undefined
  private pendingKeyChange: { lsn: bigint; op: number; to: unknown; from: string | undefined } | undefined

  feed(lines: readonly LogLine[]): void {
    const base = this.position
    const fail = (i: number, why: string): never => {
      throw new Error(`log structure: line ${base + i} (range ${lines[i]?.offset}): ${why}: ${JSON.stringify(lines[i]?.message)}`)
    }
    for (let i = 0; i < lines.length; i++) {
      const { message } = lines[i]!
      const h = message.headers
      if (h['control'] === 'snapshot-end') {
        if (this.snapshotEnded) fail(i, 'a second snapshot-end')
        this.snapshotEnded = true
        continue
      }
      if (h['control'] !== undefined) fail(i, 'an unexpected control line')
      if (!this.snapshotEnded) {
        if (h['lsn'] !== undefined || h['operation'] !== 'insert' || message.key === undefined || message.value === undefined) {
          fail(i, 'a snapshot line must be an insert with a key and value and no lsn')
        }
        this.snapshotRows++
        continue
      }
      if (typeof h['lsn'] !== 'string' || !/^\d+$/.test(h['lsn'])) fail(i, 'a change without a decimal lsn')
      const op = h['op_position']
      if (typeof op !== 'number' || !Number.isInteger(op) || op < 0) fail(i, 'a change without an op_position')
      const txids = h['txids']
      if (!Array.isArray(txids) || txids.length !== 1 || typeof txids[0] !== 'number') fail(i, 'txids must hold one number')
      if (!['insert', 'update', 'delete'].includes(h['operation'] as string) || message.key === undefined) fail(i, 'a change needs an operation and a key')
      const lsn = BigInt(h['lsn'] as string)
      const position = op as number
      const previous = this.previous
      if (previous !== undefined && !(lsn > previous[0] || (lsn === previous[0] && position > previous[1]))) {
        fail(i, `offset ${lsn}_${position} does not follow ${previous[0]}_${previous[1]} (out of order or a change twice)`)
      }
      const openTx = this.openTx
      if (openTx !== undefined && openTx.lsn !== lsn) fail(i, `transaction ${openTx.lsn} ended without a last:true line`)
      if (openTx !== undefined && openTx.txid !== (txids as unknown[])[0]) fail(i, 'txids differ inside one transaction')
      if (openTx === undefined) this.transactions++
      const pending = this.pendingKeyChange
      if (pending !== undefined) {
        if (lsn !== pending.lsn || position !== pending.op + 1 || h['operation'] !== 'insert' || h['key_change_from'] !== pending.from || message.key !== pending.to) {
          fail(i, 'a key-change delete must be followed by its insert at op+1')
        }
        this.pendingKeyChange = undefined
      }
      if (h['key_change_to'] !== undefined) {
        if (h['operation'] !== 'delete' || h['last'] === true) fail(i, 'key_change_to on a line that is not a non-last delete')
        this.pendingKeyChange = { lsn, op: position, to: h['key_change_to'], from: message.key }
      }
      if (h['last'] !== undefined && h['last'] !== true) fail(i, 'last must be true or absent')
      this.openTx = h['last'] === true ? undefined : { lsn, txid: (txids as unknown[])[0] }
      this.previous = [lsn, position]
      this.changes++
    }
    // Ranges: runs of lines that one read returned share the range's end offset (ends strictly increase).
    for (let i = 0; i < lines.length; ) {
      let j = i
      while (j + 1 < lines.length && lines[j + 1]!.offset === lines[i]!.offset) j++
      this.ranges++
      const tag = lines[i]!.offset
      let snapshotLines = 0
      for (let k = i; k <= j; k++) if (lines[k]!.message.headers['lsn'] === undefined) snapshotLines++
      if (snapshotLines > 0 && snapshotLines !== j - i + 1) fail(j, `range ${tag} mixes snapshot and live lines`)
      if (snapshotLines > 0) {
        if (!/^0_\d+$/.test(tag)) fail(j, `a snapshot range ends at ${tag}, not a virtual offset`)
      } else {
        const last = lines[j]!.message.headers
        if (tag !== `${last['lsn'] as string}_${last['op_position'] as number}`) fail(j, `range ends at ${tag}, its last line is elsewhere`)
      }
      i = j + 1
    }
    this.position += lines.length
  }

  end(): LogStructure {
    if (!this.snapshotEnded) throw new Error('log structure: no snapshot-end')
    if (this.openTx !== undefined || this.pendingKeyChange !== undefined) {
      throw new Error(`log structure: the last transaction (${this.openTx?.lsn ?? this.pendingKeyChange?.lsn}) is not whole`)
    }
    return { snapshotRows: this.snapshotRows, changes: this.changes, transactions: this.transactions, ranges: this.ranges }
  }
}

/** `LogStructureChecker` over a whole log at once. */
export function checkLogStructure(lines: readonly LogLine[]): LogStructure {
  const checker = new LogStructureChecker()
  checker.feed(lines)
  return checker.end()
}

/**
 * Like `materialize`, stricter: for a table with a primary key an insert of a
 * key the shape already holds is an error too (a change delivered twice, or a
 * move-in of a row that never moved out). Incremental: `apply` the lines as
 * they are read.
 */
export class ExactReplay {
  readonly rows = new Map<string, Record<string, string | null>>()

  apply(lines: readonly LogLine[]): void {
    const rows = this.rows
    for (const { message, offset } of lines) {
      const op = message.headers['operation']
      const key = message.key
      if (op === undefined || key === undefined) continue
      if (op === 'insert') {
        if (rows.has(key)) throw new Error(`insert of a row the shape already holds: ${key} (range ${offset})`)
        rows.set(key, { ...message.value })
      } else if (op === 'update') {
        const current = rows.get(key)
        if (current === undefined) throw new Error(`update of a row not in the shape: ${key} (range ${offset})`)
        rows.set(key, { ...current, ...message.value })
      } else if (op === 'delete') {
        if (!rows.delete(key)) throw new Error(`delete of a row not in the shape: ${key} (range ${offset})`)
      }
    }
  }
}

/** `ExactReplay` over a whole log at once. */
export function materializeExact(lines: readonly LogLine[]): Map<string, Record<string, string | null>> {
  const replay = new ExactReplay()
  replay.apply(lines)
  return replay.rows
}

/**
 * Reads a log the way the HTTP layer does, a little more at each call: the
 * lines published since the previous call. It keeps a digest of every byte
 * read, so `verifyPrefix` can check later, without holding the lines, that
 * the log still starts with exactly those bytes (logs are append-only, also
 * across crashes and recoveries).
 */
export class LogFollower {
  private after: LogOffset = BEFORE_ALL
  private readonly digest = createHash('sha256')
  private bytes = 0
  lines = 0

  next(log: ShapeLog): LogLine[] {
    const lines: LogLine[] = []
    for (;;) {
      const read = log.read(this.after)
      try {
        if (read.entryCount > 0) {
          const bytes = readSpans(read)
          this.digest.update(bytes)
          this.bytes += bytes.length
          // Stored as `json,` per entry: the body is `[` + bytes without the last comma + `]`.
          const messages = JSON.parse(`[${bytes.subarray(0, bytes.length - 1).toString('utf8')}]`) as LogLine['message'][]
          if (messages.length !== read.entryCount) throw new Error(`read ${messages.length} messages, expected ${read.entryCount}`)
          const offset = formatOffset(read.nextOffset)
          for (const message of messages) lines.push({ offset, message })
          this.after = read.nextOffset
        }
        if (read.reachedHead || read.entryCount === 0) {
          this.lines += lines.length
          return lines
        }
      } finally {
        read.release()
      }
    }
  }

  /** Reads the log again from -1: its first bytes must be exactly those every `next` read. */
  verifyPrefix(log: ShapeLog): void {
    const digest = createHash('sha256')
    let remaining = this.bytes
    let after: LogOffset = BEFORE_ALL
    while (remaining > 0) {
      const read = log.read(after)
      try {
        if (read.entryCount === 0) throw new Error(`the log ends ${remaining} bytes short of what was read from it before`)
        const bytes = readSpans(read)
        const take = Math.min(remaining, bytes.length)
        digest.update(bytes.subarray(0, take))
        remaining -= take
        after = read.nextOffset
      } finally {
        read.release()
      }
    }
    if (digest.digest('hex') !== this.digest.copy().digest('hex')) throw new Error('the log no longer starts with the bytes read from it before')
  }
}

type Row = Record<string, string | null>

/** One transaction of a mirror log, as row operations in log order. */
interface MirrorTransaction {
  readonly lsn: bigint
  readonly txid: bigint
  readonly ops: ReadonlyArray<{ readonly key: string; readonly row: Row | undefined }>
}

function normaliseRow(row: Row, bools: readonly string[]): Row {
  const out = { ...row }
  for (const c of bools) {
    if (out[c] === 'true') out[c] = 't'
    else if (out[c] === 'false') out[c] = 'f'
  }
  return out
}

function applyOps(state: Map<string, Row>, t: MirrorTransaction, touched?: Set<string>): void {
  for (const op of t.ops) {
    touched?.add(op.key)
    if (op.row === undefined) state.delete(op.key)
    else state.set(op.key, op.row)
  }
}

/**
 * The complete history of one table, from the log of a shape with every row,
 * every column and `replica=full` (so each line carries whole rows), created
 * before anything is written to the table: its snapshot rows, then every
 * transaction as row operations. Fed incrementally (`update` with the lines
 * read since the previous call).
 *
 * `compact()` folds the transactions seen so far into the base rows, to bound
 * memory: call it only once every `ShapeHistoryCheck` on this mirror has
 * advanced past them, and when every shape made later takes its snapshot
 * after they committed (both hold at a checkpoint where every shape is ready
 * and checked, and new shapes are only requested afterwards).
 */
export class MirrorLog {
  readonly initial = new Map<string, Row>()
  /** Transactions after the base rows; the first is number `base` of the whole history. */
  transactions: MirrorTransaction[] = []
  base = 0
  private snapshotEnded = false

  constructor(private readonly bools: readonly string[] = []) {}

  get length(): number {
    return this.base + this.transactions.length
  }

  at(index: number): MirrorTransaction {
    const t = this.transactions[index - this.base]
    if (t === undefined) throw new Error(`mirror: transaction ${index} is ${index < this.base ? 'compacted away' : 'not read yet'}`)
    return t
  }

  update(lines: readonly LogLine[]): void {
    let open: { lsn: bigint; txid: bigint; ops: Array<{ key: string; row: Row | undefined }> } | undefined
    for (const { message } of lines) {
      const h = message.headers
      if (h['control'] === 'snapshot-end') {
        this.snapshotEnded = true
        continue
      }
      const key = message.key!
      if (!this.snapshotEnded) {
        this.initial.set(key, normaliseRow(message.value!, this.bools))
        continue
      }
      const lsn = BigInt(h['lsn'] as string)
      open ??= { lsn, txid: BigInt((h['txids'] as number[])[0]!), ops: [] }
      if (open.lsn !== lsn) throw new Error(`mirror: transaction ${open.lsn} has no last line`)
      const op = h['operation']
      // replica=full: inserts and updates carry the whole new row, deletes the whole old one.
      open.ops.push({ key, row: op === 'delete' ? undefined : normaliseRow(message.value!, this.bools) })
      if (h['last'] === true) {
        this.transactions.push(open)
        open = undefined
      }
    }
    if (open !== undefined) throw new Error(`mirror: the lines end inside transaction ${open.lsn}`)
  }

  compact(): void {
    for (const t of this.transactions) applyOps(this.initial, t)
    this.base += this.transactions.length
    this.transactions = []
  }
}

/**
 * Checks one shape against its table's `MirrorLog` at EVERY transaction, not
 * only where a checkpoint compares it with Postgres:
 *
 *   - its snapshot rows equal the mirror's rows as of its snapshot (the mirror's
 *     base rows plus every transaction visible in the shape's snapshot-end
 *     xmin/xmax/xip_list), filtered by the where clause and projected;
 *   - then, for each later transaction of the mirror not visible in that
 *     snapshot, in commit order: the shape's log has that transaction exactly
 *     when it changed the shape (no transaction the snapshot already had, none
 *     missing, none twice), and after applying it every row the transaction
 *     touched is in the shape exactly when it matches the where clause, with
 *     exactly the mirror's values (projected).
 *
 * So a change lost and later overwritten, a transaction delivered twice or on
 * both sides of the snapshot, a row that moved in with stale values: each is
 * caught at the transaction where it happens. Which rows match is decided by
 * the where clause's own evaluator (itself checked against Postgres by the
 * where oracle); the checkpoints compare with Postgres directly.
 *
 * Incremental: `advance` takes the shape's lines read since the previous call
 * (after the mirror was updated with its own) and goes on where it stopped.
 */
export class ShapeHistoryCheck {
  private view: Map<string, Row> | undefined
  private readonly shapeRows = new Map<string, Row>()
  private visible: ((txid: bigint) => boolean) | undefined
  private mirrorIndex = 0
  private shapeTransactions: Array<{ lsn: bigint; lines: LogLine[] }> = []
  transactionsChecked = 0
  keysCompared = 0

  constructor(
    private readonly mirror: MirrorLog,
    private readonly options: {
      readonly matches: (row: Row) => boolean
      readonly columns: readonly string[] | undefined
      readonly bools: readonly string[]
      readonly label: string
    },
  ) {}

  private project(row: Row | undefined): Row | undefined {
    if (row === undefined || !this.options.matches(row)) return undefined
    const columns = this.options.columns
    if (columns === undefined) return { ...row }
    const out: Row = {}
    for (const c of columns) out[c] = row[c] ?? null
    return out
  }

  private fail(why: string): never {
    throw new Error(`${this.options.label}: ${why}`)
  }

  private compareKey(key: string, where: string): void {
    this.keysCompared++
    const expected = this.project(this.view!.get(key))
    const actual = this.shapeRows.get(key)
    if (expected === undefined && actual === undefined) return
    const a = actual === undefined ? undefined : JSON.stringify(sortedRow(actual))
    const e = expected === undefined ? undefined : JSON.stringify(sortedRow(expected))
    if (a !== e) this.fail(`${where}: row ${key} is ${a ?? 'absent'} in the shape, the table's history says ${e ?? 'absent'}`)
  }

  advance(newLines: readonly LogLine[]): void {
    const bools = this.options.bools
    for (const line of newLines) {
      const h = line.message.headers
      if (this.visible === undefined) {
        if (h['control'] === 'snapshot-end') {
          const xmin = BigInt(h['xmin'] as string)
          const xmax = BigInt(h['xmax'] as string)
          const xip = new Set(((h['xip_list'] as string[] | undefined) ?? []).map((x) => BigInt(x)))
          this.visible = (txid) => txid < xmin || (txid < xmax && !xip.has(txid))
        } else {
          this.shapeRows.set(line.message.key!, normaliseRow(line.message.value!, bools))
        }
        continue
      }
      const lsn = BigInt(h['lsn'] as string)
      const last = this.shapeTransactions[this.shapeTransactions.length - 1]
      if (last !== undefined && last.lsn === lsn) last.lines.push(line)
      else this.shapeTransactions.push({ lsn, lines: [line] })
    }
    if (this.visible === undefined) this.fail('the shape has no snapshot-end')
    const visible = this.visible
    const mirror = this.mirror

    if (this.view === undefined) {
      // The table as the snapshot saw it. Compacted transactions all committed before this shape was requested.
      this.view = new Map(mirror.initial)
      this.mirrorIndex = mirror.base
      for (let i = mirror.base; i < mirror.length; i++) {
        const t = mirror.at(i)
        if (visible(t.txid)) applyOps(this.view, t)
      }
      const keys = new Set([...this.view.keys(), ...this.shapeRows.keys()])
      for (const key of keys) this.compareKey(key, 'snapshot')
    }

    const view = this.view
    let next = 0
    for (; this.mirrorIndex < mirror.length; this.mirrorIndex++) {
      const t = mirror.at(this.mirrorIndex)
      const shapeTx = this.shapeTransactions[next]
      if (visible(t.txid)) {
        if (shapeTx !== undefined && shapeTx.lsn === t.lsn) this.fail(`transaction ${t.lsn} (xid ${t.txid}) is in the snapshot and in the log too`)
        continue
      }
      const touched = new Set<string>()
      applyOps(view, t, touched)
      if (shapeTx !== undefined && shapeTx.lsn < t.lsn) this.fail(`the log has transaction ${shapeTx.lsn}, which the table's history does not have there`)
      if (shapeTx !== undefined && shapeTx.lsn === t.lsn) {
        next++
        for (const { message } of shapeTx.lines) {
          const key = message.key!
          touched.add(key)
          const op = message.headers['operation']
          if (op === 'insert') this.shapeRows.set(key, normaliseRow(message.value!, bools))
          else if (op === 'update') {
            const current = this.shapeRows.get(key)
            if (current === undefined) this.fail(`transaction ${t.lsn}: update of ${key}, which the shape does not hold`)
            this.shapeRows.set(key, { ...current, ...normaliseRow(message.value!, bools) })
          } else this.shapeRows.delete(key)
        }
      }
      for (const key of touched) this.compareKey(key, `after transaction ${t.lsn} (xid ${t.txid})`)
      this.transactionsChecked++
    }
    const extra = this.shapeTransactions[next]
    if (extra !== undefined) this.fail(`the log has transaction ${extra.lsn} beyond the table's history`)
    this.shapeTransactions = []
  }
}

function sortedRow(row: Row): Row {
  return Object.fromEntries(Object.entries(row).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
}
