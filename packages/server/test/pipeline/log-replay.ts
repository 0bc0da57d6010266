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
