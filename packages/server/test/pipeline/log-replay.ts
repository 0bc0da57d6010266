import { BEFORE_ALL, type LogOffset, buildRowKey, formatOffset, parseOffset } from '@sluice/protocol'
import { type ShapeLog, readSpans } from '@sluice/storage'

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

/** What `checkLogStructure` counted. */
export interface LogStructure {
  readonly snapshotRows: number
  readonly changes: number
  readonly transactions: number
  /** Ranges read (chunks, or the open tail). */
  readonly ranges: number
}

/**
 * Checks the shape of a whole log and throws an Error naming the first
 * violation: snapshot rows (inserts without lsn), exactly one `snapshot-end`,
 * then changes at strictly increasing (lsn, op_position) offsets, each
 * transaction's lines contiguous with one txid and exactly one `last: true`
 * (on its last line), each key-change delete followed by its insert at op+1,
 * and every range ending at the offset of its last line (snapshot ranges at a
 * `0_n` virtual offset, never mixed with live lines).
 */
export function checkLogStructure(lines: readonly LogLine[]): LogStructure {
  const fail = (i: number, why: string): never => {
    throw new Error(`log structure: line ${i} (range ${lines[i]?.offset}): ${why}: ${JSON.stringify(lines[i]?.message)}`)
  }
  let snapshotEnded = false
  let snapshotRows = 0
  let changes = 0
  let transactions = 0
  let previous: [bigint, number] | undefined
  let openTx: { lsn: bigint; txid: unknown } | undefined
  let pendingKeyChange: { lsn: bigint; op: number; to: unknown; from: string | undefined } | undefined
  for (let i = 0; i < lines.length; i++) {
    const { message } = lines[i]!
    const h = message.headers
    if (h['control'] === 'snapshot-end') {
      if (snapshotEnded) fail(i, 'a second snapshot-end')
      snapshotEnded = true
      continue
    }
    if (h['control'] !== undefined) fail(i, 'an unexpected control line')
    if (!snapshotEnded) {
      if (h['lsn'] !== undefined || h['operation'] !== 'insert' || message.key === undefined || message.value === undefined) {
        fail(i, 'a snapshot line must be an insert with a key and value and no lsn')
      }
      snapshotRows++
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
    if (previous !== undefined && !(lsn > previous[0] || (lsn === previous[0] && position > previous[1]))) {
      fail(i, `offset ${lsn}_${position} does not follow ${previous[0]}_${previous[1]} (out of order or a change twice)`)
    }
    if (openTx !== undefined && openTx.lsn !== lsn) fail(i, `transaction ${openTx.lsn} ended without a last:true line`)
    if (openTx !== undefined && openTx.txid !== (txids as unknown[])[0]) fail(i, 'txids differ inside one transaction')
    if (openTx === undefined) transactions++
    if (pendingKeyChange !== undefined) {
      if (lsn !== pendingKeyChange.lsn || position !== pendingKeyChange.op + 1 || h['operation'] !== 'insert' || h['key_change_from'] !== pendingKeyChange.from || message.key !== pendingKeyChange.to) {
        fail(i, 'a key-change delete must be followed by its insert at op+1')
      }
      pendingKeyChange = undefined
    }
    if (h['key_change_to'] !== undefined) {
      if (h['operation'] !== 'delete' || h['last'] === true) fail(i, 'key_change_to on a line that is not a non-last delete')
      pendingKeyChange = { lsn, op: position, to: h['key_change_to'], from: message.key }
    }
    if (h['last'] !== undefined && h['last'] !== true) fail(i, 'last must be true or absent')
    openTx = h['last'] === true ? undefined : { lsn, txid: (txids as unknown[])[0] }
    previous = [lsn, position]
    changes++
  }
  if (!snapshotEnded) throw new Error('log structure: no snapshot-end')
  if (openTx !== undefined) throw new Error(`log structure: the last transaction (${openTx.lsn}) has no last:true line`)
  // Ranges: runs of lines that one read returned share the range's end offset.
  let ranges = 0
  for (let i = 0; i < lines.length; ) {
    let j = i
    while (j + 1 < lines.length && lines[j + 1]!.offset === lines[i]!.offset) j++
    ranges++
    const tag = lines[i]!.offset
    const snapshotLines = lines.slice(i, j + 1).filter((l) => l.message.headers['lsn'] === undefined).length
    if (snapshotLines > 0 && snapshotLines !== j - i + 1) fail(j, `range ${tag} mixes snapshot and live lines`)
    if (snapshotLines > 0) {
      if (!/^0_\d+$/.test(tag)) fail(j, `a snapshot range ends at ${tag}, not a virtual offset`)
    } else {
      const last = lines[j]!.message.headers
      if (tag !== `${last['lsn'] as string}_${last['op_position'] as number}`) fail(j, `range ends at ${tag}, its last line is elsewhere`)
    }
    i = j + 1
  }
  return { snapshotRows, changes, transactions, ranges }
}

/**
 * Like `materialize`, stricter: for a table with a primary key an insert of a
 * key the shape already holds is an error too (a change delivered twice, or a
 * move-in of a row that never moved out).
 */
export function materializeExact(lines: readonly LogLine[]): Map<string, Record<string, string | null>> {
  const rows = new Map<string, Record<string, string | null>>()
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
  return rows
}
