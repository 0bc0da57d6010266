import type { PostgresCluster } from '@sluice/test-utils'
import { DISPLAY_SETTINGS } from '../../src/replication/index.js'

/**
 * A client of the HTTP Shape API in a few lines, applying messages as the
 * official client's `Shape` does (an insert sets the row, an update merges its
 * columns into the row, a delete removes it), on the values' Postgres text. It
 * keeps its handle and offset, so a test can stop it and resume it later from
 * where it was, as a client that was offline does.
 */
export interface RawClient {
  readonly params: Record<string, string>
  handle: string | undefined
  offset: string
  rows: Map<string, Record<string, string | null>>
}

interface Message {
  key?: string
  value?: Record<string, string | null>
  headers: { operation?: string; control?: string }
}

export function rawClient(params: Record<string, string>): RawClient {
  return { params, handle: undefined, offset: '-1', rows: new Map() }
}

/** Requests until up-to-date; returns the body bytes it downloaded. Throws on anything but 200. */
export async function rawSync(url: string, client: RawClient): Promise<{ bytes: number; requests: number }> {
  let bytes = 0
  let requests = 0
  for (;;) {
    const q = new URLSearchParams({ ...client.params, offset: client.offset })
    if (client.handle !== undefined && client.offset !== '-1') q.set('handle', client.handle)
    const res = await fetch(`${url}?${q}`)
    requests++
    const body = await res.text()
    if (res.status !== 200) throw new Error(`${res.status} at offset ${client.offset}: ${body}`)
    bytes += Buffer.byteLength(body)
    for (const m of JSON.parse(body) as Message[]) {
      if (m.key === undefined) continue
      const op = m.headers.operation
      if (op === 'insert') client.rows.set(m.key, { ...m.value })
      else if (op === 'update') client.rows.set(m.key, { ...client.rows.get(m.key), ...m.value })
      else if (op === 'delete') client.rows.delete(m.key)
    }
    client.handle = res.headers.get('electric-handle') ?? client.handle
    client.offset = res.headers.get('electric-offset') ?? client.offset
    if (res.headers.has('electric-up-to-date')) return { bytes, requests }
  }
}

/** The table's rows as Postgres prints them (the values a shape carries), keyed by `keyOf`. */
export async function pgTextRows(
  cluster: PostgresCluster,
  table: string,
  keyOf: (row: Record<string, string | null>) => string,
  where = 'true',
): Promise<Map<string, Record<string, string | null>>> {
  const client = await cluster.connect()
  try {
    for (const [name, value] of Object.entries(DISPLAY_SETTINGS)) await client.query('SELECT set_config($1, $2, false)', [name, value])
    const { rows: cols } = await client.query<{ c: string }>(
      'SELECT attname AS c FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum',
      [table],
    )
    const select = cols.map(({ c }) => `CASE WHEN num_nulls("${c}") = 1 THEN NULL ELSE concat("${c}") END AS "${c}"`).join(', ')
    const { rows } = await client.query<Record<string, string | null>>(`SELECT ${select} FROM ${table} WHERE ${where}`)
    return new Map(rows.map((r) => [keyOf(r), r]))
  } finally {
    await client.end()
  }
}
