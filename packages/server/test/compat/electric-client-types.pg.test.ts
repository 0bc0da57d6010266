import type { Row } from '@electric-sql/client'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { startServer, type TestServer } from '../http/http-harness.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { type SchemaEntry, expectedClientRows, quoteIdent } from './client-values.js'
import { type RecordedExchange, StreamLog, eventually, openStream, rowKey, shapeOf } from './compat-harness.js'

/**
 * The official client's parser against every common Postgres type: the
 * `electric-schema` header the client receives must describe each column as
 * docs/protocol.md §7 says, and the rows the client materialises (through its own
 * parser, driven by that header) must equal Postgres's own values mapped
 * through the documented rules (§7.1): from the initial snapshot and from
 * replicated inserts and updates alike (the two print booleans differently).
 */

const cluster = usePostgres()
const dirs = useTempDir('compat-types')
let pipeline: Pipeline
let server: TestServer
let shapeUrl: string

/** Column name, SQL type, and what the schema header must say about it. */
const COLUMNS: ReadonlyArray<[string, string, SchemaEntry]> = [
  ['id', 'int4 PRIMARY KEY', { type: 'int4', pk_index: 0, not_null: true }],
  ['i2', 'int2', { type: 'int2' }],
  ['i4', 'int4', { type: 'int4' }],
  ['i8', 'int8 NOT NULL', { type: 'int8', not_null: true }],
  ['num', 'numeric', { type: 'numeric' }],
  ['num_ps', 'numeric(10,3)', { type: 'numeric', precision: 10, scale: 3 }],
  ['f4', 'float4', { type: 'float4' }],
  ['f8', 'float8', { type: 'float8' }],
  ['b', 'bool', { type: 'bool' }],
  ['t', 'text', { type: 'text' }],
  ['vc', 'varchar(12)', { type: 'varchar', max_length: 12 }],
  ['ch', 'char(4)', { type: 'bpchar', length: 4 }],
  ['u', 'uuid', { type: 'uuid' }],
  ['d', 'date', { type: 'date' }],
  ['tm', 'time', { type: 'time' }],
  ['tm3', 'time(3)', { type: 'time', precision: 3 }],
  ['ts', 'timestamp', { type: 'timestamp' }],
  ['tstz', 'timestamptz', { type: 'timestamptz' }],
  ['tstz3', 'timestamptz(3)', { type: 'timestamptz', precision: 3 }],
  ['iv', 'interval', { type: 'interval' }],
  ['j', 'json', { type: 'json' }],
  ['jb', 'jsonb', { type: 'jsonb' }],
  ['by', 'bytea', { type: 'bytea' }],
  ['m', 'mood', { type: 'mood' }],
  ['p', 'posint', { type: 'posint' }],
  ['st', 'short_text', { type: 'short_text' }],
  ['c', 'complex', { type: 'complex' }],
  ['a_i4', 'int4[]', { type: 'int4', dims: 1 }],
  ['a_i8', 'int8[]', { type: 'int8', dims: 1 }],
  ['a_i4_2d', 'int4[][]', { type: 'int4', dims: 2 }],
  ['a_f8', 'float8[]', { type: 'float8', dims: 1 }],
  ['a_b', 'bool[]', { type: 'bool', dims: 1 }],
  ['a_t', 'text[]', { type: 'text', dims: 1 }],
  ['a_jb', 'jsonb[]', { type: 'jsonb', dims: 1 }],
  ['a_m', 'mood[]', { type: 'mood', dims: 1 }],
  ['a_p', 'posint[]', { type: 'posint', dims: 1 }],
  ['a_c', 'complex[]', { type: 'complex', dims: 1 }],
  ['a_u', 'uuid[]', { type: 'uuid', dims: 1 }],
  ['a_num', 'numeric[]', { type: 'numeric', dims: 1 }],
  ['a_ch', 'char(2)[]', { type: 'bpchar', dims: 1, length: 2 }],
  ['a_tstz', 'timestamptz[]', { type: 'timestamptz', dims: 1 }],
  ['a_d', 'date[]', { type: 'date', dims: 1 }],
  // A domain over an array has attndims 0: Electric then sends the domain's name and no dims, so its
  // client keeps the raw literal. Sluice knowingly sends the element type with dims 1 (docs/protocol.md §7's
  // caveat), so the client parses the array.
  ['dom_arr', 'int_list', { type: 'int4', dims: 1 }],
]
const SCHEMA: Record<string, SchemaEntry> = Object.fromEntries(COLUMNS.map(([n, , s]) => [n, s]))

/** Values for every column but id, as SQL literals; NULL where a row leaves one out. */
const FULL_ROW: Record<string, string> = {
  i2: '-32768',
  i4: '2147483647',
  i8: '9223372036854775807',
  num: "'123456789012345678901234567890.123456789'",
  num_ps: '3.14159',
  f4: '3.14',
  f8: "'Infinity'",
  b: 'true',
  t: `E'multi\\nline "quoted" \\\\ back, comma {braces} ünïcode 🐘'`,
  vc: "'short'",
  ch: "'ab'",
  u: "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
  d: "'2024-02-29'",
  tm: "'23:59:59.999999'",
  tm3: "'12:00:00.1234'",
  ts: "'2024-01-02 03:04:05.678901'",
  tstz: "'2024-01-01 12:34:56.789012+05:30'",
  tstz3: "'1999-12-31 23:59:59.9999+00'",
  iv: "'1 year 2 months 3 days 04:05:06.789'",
  j: `'{"a": [1, 2.50, "x"],   "b": null, "a": 2}'`,
  jb: `'{"z": 1, "a": {"nested": [true, false, null]}, "big": 12345678901234567890}'`,
  by: "'\\x00ff10'",
  m: `'it''s complicated'`,
  p: '42',
  st: "'ten chars!'",
  c: "'(1.5,-2)'",
  a_i4: "'{1,NULL,3}'",
  a_i8: "'{9223372036854775807,-1}'",
  a_i4_2d: "'{{1,2},{3,4}}'",
  a_f8: "'{NaN,Infinity,-Infinity,1.5,-0}'",
  a_b: "'{t,f,NULL}'",
  a_t: `ARRAY['a,b', 'with "quote"', 'back\\slash', NULL, 'NULL', '', ' padded ', '{x}']`,
  a_jb: `ARRAY['{"k": 1}', '[1, 2]', '"s"', 'null']::jsonb[]`,
  a_m: `ARRAY['happy', 'it''s complicated']::mood[]`,
  a_p: "'{5,9,2}'",
  a_c: "ARRAY['(1.1,2.2)', '(3.3,)']::complex[]",
  a_u: "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,00000000-0000-0000-0000-000000000000}'",
  a_num: "'{1.50,NaN,-0.000001}'",
  a_ch: "'{a,bc,NULL}'",
  a_tstz: "'{\"2024-01-01 00:00:00+00\",\"1970-01-01 00:00:00.5+02\"}'",
  a_d: "'{2024-01-01,infinity}'",
  dom_arr: "'{7,NULL,-8}'",
}

const EDGE_ROW: Record<string, string> = {
  i2: '0',
  i4: '-2147483648',
  i8: '-9223372036854775808',
  num: "'NaN'",
  num_ps: '-0.001',
  f4: "'-Infinity'",
  f8: "'NaN'",
  b: 'false',
  t: "''",
  vc: "''",
  ch: "''",
  u: "'00000000-0000-0000-0000-000000000000'",
  d: "'infinity'",
  tm: "'00:00:00'",
  tm3: "'24:00:00'",
  ts: "'-infinity'",
  tstz: "'2000-01-01 00:00:00+00'",
  tstz3: "'infinity'",
  iv: "'-1 days -00:00:01'",
  j: "'null'",
  jb: `'"just a string"'`,
  by: "''",
  m: "'sad'",
  p: '1',
  st: "''",
  c: "'(,)'",
  a_i4: "'{}'",
  a_i8: "'{}'",
  a_i4_2d: "'{{NULL}}'",
  a_f8: "'{}'",
  a_b: "'{}'",
  a_t: "'{}'",
  a_jb: "'{}'",
  a_m: "'{}'",
  a_p: "'{}'",
  a_c: "'{}'",
  a_u: "'{}'",
  a_num: "'{}'",
  a_ch: "'{}'",
  a_tstz: "'{}'",
  a_d: "'{}'",
  dom_arr: "'{{1,2},{3,4}}'",
}

function insertSql(id: number, values: Record<string, string>): string {
  const names = ['id', ...Object.keys(values)].map(quoteIdent).join(', ')
  return `INSERT INTO every_type (${names}) VALUES (${[String(id), ...Object.values(values)].join(', ')})`
}

const keyOf = (row: Record<string, string | null>): string => rowKey('public', 'every_type', row.id!)

beforeAll(async () => {
  await cluster.query(`
    CREATE TYPE mood AS ENUM ('happy', 'sad', 'it''s complicated');
    CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
    CREATE DOMAIN short_text AS varchar(10);
    CREATE DOMAIN int_list AS int4[];
    CREATE TYPE complex AS (r float8, i float8);
    CREATE TABLE every_type (${COLUMNS.map(([n, t]) => `${quoteIdent(n)} ${t}`).join(', ')});
  `)
  await cluster.query(insertSql(1, FULL_ROW))
  await cluster.query(insertSql(2, EDGE_ROW))
  await cluster.query(insertSql(3, { i8: '0' }))
  pipeline = await startPipeline(cluster, await dirs.make('store'))
  server = await startServer(pipeline, { longPollTimeoutMs: 5000 })
  shapeUrl = `http://127.0.0.1:${server.port}/v1/shape`
})

afterAll(async () => {
  await server?.close()
  await pipeline?.stop()
})

describe('every common type through the official client', () => {
  it('the initial sync: schema header and parsed values match Postgres', async () => {
    const exchanges: RecordedExchange[] = []
    const { stream, abort } = openStream(shapeUrl, { params: { table: 'every_type' } }, exchanges)
    const shape = shapeOf(stream)
    try {
      const rows = await shape.value
      const schemaHeaders = exchanges.map((e) => e.headers.get('electric-schema')).filter((h) => h !== null)
      expect(schemaHeaders.length).toBeGreaterThan(0)
      for (const header of schemaHeaders) expect(JSON.parse(header)).toEqual(SCHEMA)
      const expected = await expectedClientRows(cluster, 'every_type', SCHEMA, keyOf)
      expect(expected.size).toBe(3)
      expect(new Map(rows)).toEqual(expected)
      // A second oracle, by hand from docs/protocol.md §7.1, for the values most likely to go wrong.
      const full = rows.get(keyOf({ id: '1' }))!
      expect(full.i8).toBe(9223372036854775807n)
      expect(full.f8).toBe(Infinity)
      expect(full.b).toBe(true)
      expect(full.ch).toBe('ab  ')
      expect(full.tstz).toBe('2024-01-01 07:04:56.789012+00')
      expect(full.iv).toBe('P1Y2M3DT4H5M6.789S')
      expect(full.j).toEqual({ a: 2, b: null })
      expect(full.by).toBe('\\x00ff10')
      expect(full.p).toBe('42')
      expect(full.a_i4_2d).toEqual([[1, 2], [3, 4]])
      expect(full.a_f8).toEqual([NaN, Infinity, -Infinity, 1.5, -0])
      expect(full.a_t).toEqual(['a,b', 'with "quote"', 'back\\slash', null, 'NULL', '', ' padded ', '{x}'])
      expect(full.a_jb).toEqual([{ k: 1 }, [1, 2], 's', null])
      expect(full.a_p).toEqual(['5', '9', '2'])
      expect(full.a_c).toEqual(['(1.1,2.2)', '(3.3,)'])
      expect(full.a_ch).toEqual(['a ', 'bc', null])
      expect(full.dom_arr).toEqual([7, null, -8])
      const edge = rows.get(keyOf({ id: '2' }))!
      expect(edge.f8).toBeNaN()
      expect(edge.f4).toBe(-Infinity)
      expect(edge.i8).toBe(-9223372036854775808n)
      expect(edge.c).toBe('(,)')
      expect(edge.j).toBeNull()
      expect(edge.a_i4_2d).toEqual([[null]])
      const sparse = rows.get(keyOf({ id: '3' }))!
      expect(Object.entries(sparse).filter(([, v]) => v !== null).map(([k]) => k).sort()).toEqual(['i8', 'id'])
    } finally {
      abort.abort()
    }
  })

  it('replicated inserts, updates and deletes parse the same way', async () => {
    const { stream, abort } = openStream(shapeUrl, { params: { table: 'every_type' } })
    const shape = shapeOf(stream)
    const log = new StreamLog(stream)
    try {
      await shape.value
      // Row 4 arrives through pgoutput with every column; row 1 is updated column by column
      // to the edge values and row 3 to the full ones, so every type is printed by pgoutput.
      await cluster.query(insertSql(4, FULL_ROW))
      await cluster.query(insertSql(5, EDGE_ROW))
      await cluster.query(`UPDATE every_type SET ${Object.entries(EDGE_ROW).map(([n, v]) => `${quoteIdent(n)} = ${v}`).join(', ')} WHERE id = 1`)
      await cluster.query(`UPDATE every_type SET ${Object.entries(FULL_ROW).map(([n, v]) => `${quoteIdent(n)} = ${v}`).join(', ')} WHERE id = 3`)
      await cluster.query('DELETE FROM every_type WHERE id = 2')
      await caughtUp(pipeline, cluster)
      const expected = await expectedClientRows(cluster, 'every_type', SCHEMA, keyOf)
      expect(expected.size).toBe(4)
      await eventually(() => shape.currentValue.size === 4 && shape.currentValue.has(keyOf({ id: '5' })) && !shape.currentValue.has(keyOf({ id: '2' })), 'the live changes')
      await log.until((l) => l.changes().some((m) => m.headers.operation === 'delete'), 'the delete')
      expect(new Map(shape.currentValue)).toEqual(expected)
      // Booleans came as pgoutput's t/f in this path and parsed all the same.
      expect(shape.currentValue.get(keyOf({ id: '4' }))!.b).toBe(true)
      expect(shape.currentValue.get(keyOf({ id: '5' }))!.b).toBe(false)
    } finally {
      abort.abort()
    }
  })
})

describe('awkward quoted names through the official client', () => {
  const TABLE = 'Awkward "Table", here'
  const AWKWARD: ReadonlyArray<[string, string, SchemaEntry]> = [
    ['Id', 'int8 PRIMARY KEY', { type: 'int8', pk_index: 0, not_null: true }],
    ['Odd "Name"', 'text', { type: 'text' }],
    ['with,comma', 'int4', { type: 'int4' }],
    ['has space', 'bool', { type: 'bool' }],
    ['UPPER', 'jsonb', { type: 'jsonb' }],
    ['ünï 🐘', 'text', { type: 'text' }],
    // Names the client's JSON reviver looks at (`value`, `old_value`) and other message fields.
    ['value', 'jsonb', { type: 'jsonb' }],
    ['old_value', 'int4', { type: 'int4' }],
    ['key', 'text', { type: 'text' }],
    ['headers', 'text', { type: 'text' }],
  ]
  const schema: Record<string, SchemaEntry> = Object.fromEntries(AWKWARD.map(([n, , s]) => [n, s]))
  const relation = quoteIdent(TABLE)
  const byId = (rows: Iterable<Record<string, unknown>>): Map<string, Record<string, unknown>> =>
    new Map([...rows].map((r) => [String(r.Id), r]))

  beforeAll(async () => {
    await cluster.query(`CREATE TABLE ${relation} (${AWKWARD.map(([n, t]) => `${quoteIdent(n)} ${t}`).join(', ')}, hidden text)`)
    await cluster.query(`
      INSERT INTO ${relation} VALUES
        (1, 'a "b" c', 1, true, '{"x": [1]}', 'ü', '{"value": {"value": 1}}', 7, 'k/1', 'h', 'secret'),
        (2, NULL, -5, false, 'null', NULL, '"str"', NULL, NULL, NULL, 'secret'),
        (3, '', 3, NULL, '[]', '', '{}', 0, '', '', NULL)
    `)
  })

  it('columns (quoted by the client), where with params, and live changes to those columns', async () => {
    const exchanges: RecordedExchange[] = []
    const { stream, abort } = openStream(
      shapeUrl,
      { params: { table: relation, columns: AWKWARD.map(([n]) => n), where: '"with,comma" > $1', params: ['0'] } },
      exchanges,
    )
    const shape = shapeOf(stream)
    try {
      const rows = await shape.value
      // The client really sent every column quoted, and the params in bracket form.
      const first = exchanges[0]!.url.searchParams
      expect(first.get('columns')).toBe(AWKWARD.map(([n]) => quoteIdent(n)).join(','))
      expect(first.get('params[1]')).toBe('0')
      const header = exchanges.find((e) => e.headers.get('electric-schema') !== null)!.headers.get('electric-schema')!
      expect(JSON.parse(Buffer.from(header, 'latin1').toString('utf8'))).toEqual(schema)
      const where = `"with,comma" > $1`
      let expected = await expectedClientRows(cluster, relation, schema, (r) => r.Id!, where, ['0'])
      expect(byId(rows.values())).toEqual(expected)
      expect(rows.size).toBe(2)
      expect([...rows.values()].find((r) => r.Id === 1n)!.value).toEqual({ value: { value: 1 } })

      await cluster.query(`UPDATE ${relation} SET ${quoteIdent('Odd "Name"')} = 'x,y', ${quoteIdent('value')} = '[1, "two"]' WHERE "Id" = 1`)
      await cluster.query(`UPDATE ${relation} SET ${quoteIdent('with,comma')} = 9 WHERE "Id" = 2`) // moves in
      await cluster.query(`UPDATE ${relation} SET ${quoteIdent('with,comma')} = 0 WHERE "Id" = 3`) // moves out
      await cluster.query(`UPDATE ${relation} SET hidden = 'changed' WHERE "Id" = 1`) // a column outside the shape
      await cluster.query(`INSERT INTO ${relation} VALUES (4, 'new', 4, true, '{"k": "v"}', 'é', 'true', 1, 'key', 'headers', NULL)`)
      await caughtUp(pipeline, cluster)
      expected = await expectedClientRows(cluster, relation, schema, (r) => r.Id!, where, ['0'])
      expect([...expected.keys()].sort()).toEqual(['1', '2', '4'])
      await eventually(() => shape.currentValue.has(rowKeyFor(4n)) && !shape.currentValue.has(rowKeyFor(3n)), 'the live changes')
      expect(byId(shape.currentValue.values())).toEqual(expected)
    } finally {
      abort.abort()
    }
    function rowKeyFor(id: bigint): string {
      return [...shape.currentValue.entries()].find(([, r]) => r.Id === id)?.[0] ?? '<none>'
    }
  })
})
