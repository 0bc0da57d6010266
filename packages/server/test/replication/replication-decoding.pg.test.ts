import { usePostgres } from '@sluice/test-utils'
import type pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import {
  type ConnectedInfo,
  type ReplicationClient,
  type Transaction,
  UNCHANGED_TOAST,
  type UpdateChange,
} from '../../src/replication/index.js'
import { type CollectingSink, displaySession, setUpReplication, startClient, waitFor } from './harness.js'

const cluster = usePostgres()

const TABLE = 'Types "Table" Ü'
const COLUMNS = `
  id int8 PRIMARY KEY,
  i2 int2, i4 int4, i8 int8,
  num numeric, num_typed numeric(40, 20),
  f4 float4, f8 float8,
  txt text, vc varchar(20), bp char(5),
  flag bool,
  u uuid,
  d date, t time, ttz timetz, ts timestamp, tstz timestamptz,
  iv interval,
  j json, jb jsonb,
  arr_i int4[], arr_t text[], arr_2d int4[], arr_b bool[], arr_ts timestamptz[],
  m mood, m_arr mood[],
  by bytea,
  big text`

const ROWS = [
  `(1, 32767, 2147483647, 9223372036854775807, 12345.678901234567890123, 3.14159265358979323846,
    1.1, 0.1, 'héllo wörld ✓ 🚀 "quoted" \\ back', 'varchar', 'ab',
    true, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    '2024-01-31', '23:59:59.999999', '12:34:56.123456+05:30', '2024-01-31 12:34:56.123456', '2024-01-31 12:34:56.654321+02',
    '1 year 2 months 3 days 04:05:06.789',
    '{"b": 1,   "a": [1, 2]}', '{"b": 1,   "a": [1, 2], "u": "ü"}',
    '{1,2,3}', '{"a b","c,d","e\\"f",NULL,""}', '{{1,2,3},{4,5,6}}', '{t,f,NULL}', '{"2024-01-31 00:00:00.000001+00"}',
    'happy 😀', '{sad,ok}',
    '\\x0001fffe', NULL)`,
  `(2, -32768, -2147483648, -9223372036854775808, 'NaN', -0.00000000000000000001,
    'NaN', 'Infinity', '', '', '',
    false, '00000000-0000-0000-0000-000000000000',
    'infinity', '00:00', '00:00:00+00', '-infinity', 'infinity',
    '-1 day -00:00:00.000001',
    'null', '[]',
    '{}', '{}', '{}', '{}', '{}',
    'sad', '{}',
    '\\x', NULL)`,
  `(3, NULL, NULL, NULL, NULL, NULL, '-Infinity', '-Infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
]

describe('decoding real traffic', () => {
  let client: ReplicationClient
  let sink: CollectingSink
  let display: pg.Client
  let connected: ConnectedInfo

  beforeAll(async () => {
    await cluster.query(`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy 😀')`)
    await cluster.query(`CREATE TABLE "${TABLE.replaceAll('"', '""')}" (${COLUMNS})`)
    await cluster.query(`CREATE TABLE plain_identity (id int PRIMARY KEY, note text, big text)`)
    const names = await setUpReplication(cluster, [['public', TABLE]])
    // Published by hand, without REPLICA IDENTITY FULL: the unchanged-TOAST case.
    await cluster.query(`ALTER PUBLICATION "${names.publication.name}" ADD TABLE plain_identity`)
    ;({ client, sink } = startClient(cluster, names, { durableLsn: () => 0n, messages: true }))
    client.on('connected', (info) => (connected = info))
    await client.start()
    display = await displaySession(cluster)
  })

  afterAll(async () => {
    await client?.stop()
    await display?.end()
    await cluster.dropReplicationSlots()
  })

  afterEach(() => {
    expect(client.connected).toBe(true)
  })

  it('speaks protocol 2 on Postgres 14+', () => {
    expect(connected.serverVersionNum).toBeGreaterThanOrEqual(140000)
    expect(connected.protoVersion).toBe(2)
  })

  it('decodes every type to exactly the text its output function prints under the display settings', async () => {
    const quoted = `"${TABLE.replaceAll('"', '""')}"`
    const before = Date.now()
    for (const row of ROWS) await cluster.query(`INSERT INTO ${quoted} VALUES ${row}`)
    const txs = await sink.waitForCount(TABLE, 3)
    const { rows } = await display.query({ text: `SELECT * FROM ${quoted} ORDER BY id`, rowMode: 'array' })
    expect(rows).toHaveLength(3)
    for (const [i, tx] of txs.entries()) {
      expect(tx.changes).toHaveLength(1)
      const change = tx.changes[0]
      if (change?.kind !== 'insert') throw new Error('expected an insert')
      expect(change.newTuple).toEqual(rows[i])
    }
    // `col::text` (what a snapshot builds its JSON from) agrees too, booleans aside;
    // bpchar::text drops trailing spaces, which is why snapshots use concat() for it (docs/protocol.md §3.5).
    const names = (txs[0]?.changes[0] as { relation: { columns: ReadonlyArray<{ name: string }> } }).relation.columns.map((c) => c.name)
    const casts = names.map((n) => (n === 'bp' ? 'concat(bp)' : `${n}::text`)).join(', ')
    const asText = await display.query({ text: `SELECT ${casts} FROM ${quoted} ORDER BY id`, rowMode: 'array' })
    for (const [i, tx] of txs.entries()) {
      const decoded = (tx.changes[0] as { newTuple: readonly unknown[] }).newTuple
      const expected = (asText.rows[i] as unknown[]).map((value, c) => {
        if (names[c] === 'flag' && value !== null) return value === 'true' ? 't' : 'f'
        // concat() turns NULL into ''.
        if (names[c] === 'bp' && value === '' && decoded[c] === null) return null
        return value
      })
      expect(decoded).toEqual(expected)
    }
    // The values differ from Postgres's defaults only where the display settings say so.
    const first = (txs[0]?.changes[0] as { newTuple: readonly unknown[] }).newTuple
    const column = (name: string) => first[columnIndex(txs[0], name)]
    expect(column('iv')).toBe('P1Y2M3DT4H5M6.789S') // IntervalStyle=iso_8601
    expect(column('tstz')).toBe('2024-01-31 10:34:56.654321+00') // TimeZone=UTC, microseconds kept
    expect(column('by')).toBe('\\x0001fffe') // bytea_output=hex
    expect(column('flag')).toBe('t') // pgoutput prints bool with boolout, not ::text's 'true'
    expect(column('f8')).toBe('0.1') // extra_float_digits=1: shortest exact form
    expect(column('jb')).toBe('{"a": [1, 2], "b": 1, "u": "ü"}')
    expect(column('bp')).toBe('ab   ')
    expect(column('i8')).toBe('9223372036854775807')
    expect(column('m')).toBe('happy 😀')
    // Commit times are raw microseconds since 2000-01-01.
    const commitMs = Number(txs[0]?.commitTime ?? 0n) / 1000 + Date.UTC(2000, 0, 1)
    expect(commitMs).toBeGreaterThan(before - 60_000)
    expect(commitMs).toBeLessThan(Date.now() + 60_000)
  })

  it('describes the relation: schema, quoted name, columns, types and replica identity', async () => {
    const tx = (await sink.waitForCount(TABLE, 1))[0]
    const change = tx?.changes[0]
    if (change === undefined || change.kind === 'truncate') throw new Error('expected a row change')
    const { relation } = change
    expect(relation.schema).toBe('public')
    expect(relation.table).toBe(TABLE)
    expect(relation.replicaIdentity).toBe('full')
    const { rows } = await cluster.query<{ name: string; oid: number; typmod: number }>(
      `SELECT attname AS name, atttypid::int AS oid, atttypmod AS typmod FROM pg_attribute
        WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
      [`"${TABLE.replaceAll('"', '""')}"`],
    )
    expect(relation.columns.map((c) => ({ name: c.name, oid: c.typeOid, typmod: c.typeMod }))).toEqual(rows)
    // Under REPLICA IDENTITY FULL pgoutput flags every column as part of the identity.
    expect(relation.keyColumns).toHaveLength(rows.length)
    const mood = await cluster.query<{ oid: number }>(`SELECT 'mood'::regtype::oid::int AS oid`)
    expect(client.relations.type(mood.rows[0]?.oid ?? 0)).toEqual({ oid: mood.rows[0]?.oid, schema: 'public', name: 'mood' })
  })

  it('fills unchanged TOAST values of updates from the old row (REPLICA IDENTITY FULL)', async () => {
    const quoted = `"${TABLE.replaceAll('"', '""')}"`
    // Random hex compresses to about half; 1.3 MB of it is far past the TOAST threshold.
    await cluster.query(`UPDATE ${quoted} SET big = (SELECT string_agg(md5(g::text || random()::text), '') FROM generate_series(1, 40000) g) WHERE id = 1`)
    await cluster.query(`UPDATE ${quoted} SET txt = 'changed' WHERE id = 1`)
    const txs = await sink.waitForCount(TABLE, 5)
    const { rows } = await display.query<{ big: string }>(`SELECT big FROM ${quoted} WHERE id = 1`)
    const big = rows[0]?.big ?? ''
    expect(big.length).toBe(40000 * 32)
    const update = txs[4]?.changes[0] as UpdateChange
    expect(update.kind).toBe('update')
    expect(update.oldTupleKind).toBe('full')
    const bigIndex = columnIndex(txs[4], 'big')
    expect(update.newTuple[bigIndex]).toBe(big)
    expect(update.newTuple[columnIndex(txs[4], 'txt')]).toBe('changed')
    expect(update.oldTuple?.[columnIndex(txs[4], 'txt')]).toBe('héllo wörld ✓ 🚀 "quoted" \\ back')
    expect(update.unchangedToast).toEqual([])
  })

  it('marks unchanged TOAST values it cannot fill (REPLICA IDENTITY DEFAULT)', async () => {
    await cluster.query(`INSERT INTO plain_identity VALUES (1, 'a', (SELECT string_agg(md5(g::text || random()::text), '') FROM generate_series(1, 5000) g))`)
    await cluster.query(`UPDATE plain_identity SET note = 'b' WHERE id = 1`)
    await cluster.query(`DELETE FROM plain_identity WHERE id = 1`)
    const txs = await sink.waitForCount('plain_identity', 3)
    const update = txs[1]?.changes[0] as UpdateChange
    expect(update).toMatchObject({ kind: 'update', oldTuple: undefined, unchangedToast: [2] })
    expect(update.newTuple).toEqual(['1', 'b', UNCHANGED_TOAST])
    // Delete under REPLICA IDENTITY DEFAULT: the key, other columns null.
    expect(txs[2]?.changes[0]).toMatchObject({ kind: 'delete', oldTupleKind: 'key', oldTuple: ['1', null, null] })
  })

  it('decodes deletes with the full old row, multi-change transactions and truncates', async () => {
    const quoted = `"${TABLE.replaceAll('"', '""')}"`
    await cluster.query(`BEGIN; DELETE FROM ${quoted} WHERE id = 2; UPDATE ${quoted} SET i4 = 7 WHERE id = 3; COMMIT`)
    await cluster.query(`TRUNCATE ${quoted} RESTART IDENTITY CASCADE`)
    const txs = await sink.waitForCount(TABLE, 7)
    const del = txs[5]?.changes[0]
    expect(del).toMatchObject({ kind: 'delete', oldTupleKind: 'full' })
    expect(del?.kind === 'delete' && del.oldTuple[columnIndex(txs[5], 'f8')]).toBe('Infinity')
    expect(txs[5]?.changes[1]).toMatchObject({ kind: 'update', oldTupleKind: 'full' })
    expect(txs[6]?.changes).toEqual([
      expect.objectContaining({ kind: 'truncate', cascade: true, restartIdentity: true, relations: [expect.objectContaining({ table: TABLE })] }),
    ])
  })

  it('delivers transactions in strictly increasing commit LSN order', () => {
    const lsns = sink.transactions.map((tx) => tx.lsn)
    expect(lsns.length).toBeGreaterThan(5)
    for (let i = 1; i < lsns.length; i++) expect(lsns[i]).toBeGreaterThan(lsns[i - 1] ?? 0n)
    for (const tx of sink.transactions) expect(tx.endLsn).toBeGreaterThan(tx.lsn)
  })

  it('delivers logical decoding messages when asked to', async () => {
    await cluster.query(`SELECT pg_logical_emit_message(false, 'sluice', 'ping ✓')`)
    const message = await waitFor(() => sink.messages.find((m) => m.prefix === 'sluice'), 'a logical message')
    expect(message.transactional).toBe(false)
    expect(message.content.toString('utf8')).toBe('ping ✓')
  })
})

function columnIndex(tx: Transaction | undefined, name: string): number {
  const change = tx?.changes[0]
  if (change === undefined || change.kind === 'truncate') throw new Error('expected a row change')
  const index = change.relation.columns.findIndex((c) => c.name === name)
  if (index < 0) throw new Error(`no column ${name}`)
  return index
}
