import { buildRowKey } from '@sluice/protocol'
import { usePostgres } from '@sluice/test-utils'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { InsertChange } from '../../../src/replication/index.js'
import { ChangeEncoder, SnapshotError, buildSnapshotQuery, loadTable, runSnapshot, tableDescription, whereColumns } from '../../../src/shapes/index.js'
import type { SnapshotResult, TableInfo } from '../../../src/shapes/index.js'
import { compileWhere } from '../../../src/where/index.js'
import { displaySession, setUpReplication, startClient } from '../../replication/harness.js'

/**
 * The rows of a snapshot, checked against independent oracles on real Postgres:
 * - each value is the text the column's output function prints (a plain SELECT
 *   in text format, the display settings applied), which is what pgoutput sends;
 * - each key is `buildRowKey` of the same row (what ChangeEncoder puts on changes);
 * - each line is byte for byte JSON.stringify of {key, value, headers};
 * - and, end to end, the same rows replicated and encoded by ChangeEncoder give
 *   the same keys and values.
 */

const cluster = usePostgres()
let pool: pg.Pool
let display: pg.Client

const q = (name: string): string => `"${name.replaceAll('"', '""')}"`
const decoder = new TextDecoder()

const ODD_SCHEMA = 'we"ird s.ch/ema'
const ODD_TABLE = 'ta "b" .le/x'

const EVERY_TYPE_COLUMNS = `
  id int8 PRIMARY KEY,
  i2 int2, i4 int4, i8 int8, num numeric(12, 2), num_any numeric, f4 float4, f8 float8,
  t text, vc varchar(20), ch char(5), ch1 char,
  b bool, u uuid, d date, tm time, ttz timetz, ts timestamp(3), tstz timestamptz, iv interval,
  j json, jb jsonb, by bytea, ip inet, net cidr, mac macaddr, pt point, rng int4range,
  m mood, pi posint, ia intarr, pa posarr, hm happy_mood, fl flag, bpd code4,
  c complex,
  a1 int4[], a2 int4[][], a_text text[], am mood[], ap posint[], ac complex[], anum numeric(5, 1)[], ab bool[], ach char(3)[], aj jsonb[],
  iv2 int2vector, x xml,
  gen int8 GENERATED ALWAYS AS (i4::int8 * 2) STORED
`

const EVERY_TYPE_ROWS = [
  `(1, -32768, 2147483647, 9223372036854775807, 1234567890.91, 'NaN', 3.14, '-Infinity',
    E'multi\\nline "quoted" \\\\back/sl//ash é 😀 \\u0001 \\t end', 'héllo', 'ab', 'x',
    true, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-02-29', '12:34:56.78', '12:34:56+05:30', '2024-01-31 12:00:00.123', '2024-01-31 12:00:00.123456+02',
    '1 year 2 mons 3 days 04:05:06.7',
    '{"a": [1, 2],   "b":"x"}', '{"b": "x", "a": [1, 2], "u": "ü"}', '\\x0001fffe', '192.168.0.1', '10.1.0.0/16', '08:00:2b:01:02:03', '(1.5,-2)', '[1,10)',
    'meh', 5, '{1,2,3}', '{4,5}', 'happy', false, 'ab',
    '(1.5,-2)',
    '{1,NULL,3}', '{{1,2},{3,4}}', '{"a b","c,d","e\\"f","g\\\\h",NULL,"NULL",""}', '{sad,ok}', '{1,2}', '{"(1.1,2.2)","(3.3,)"}', '{1.5,NaN}', '{t,f,NULL}', '{a,"b c"}', ARRAY['{"k": [1]}'::jsonb, 'null'::jsonb],
    '1 2 3', E'<?xml version="1.0" encoding="UTF-8"?>\n<a>1</a>')`,
  `(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
  `(3, 0, -2147483648, -9223372036854775808, -0.00, '-1e-20', 'NaN', 1e308,
    '', '', '', ' ',
    false, '00000000-0000-0000-0000-000000000000', '-infinity', '00:00', '24:00:00-15:59', 'infinity', '1999-12-31 23:59:59.999999-08',
    '-1 day -00:00:00.000001',
    'null', '"str"', '\\x', '::1', '::/0', '00:00:00:00:00:00', '(0,0)', 'empty',
    'sad', 1, '{}', '{}', 'sad', true, '  a',
    '(,)',
    '{}', '{}', '{}', '{}', '{}', '{"(,)"}', '{}', '{}', '{"  "}', '{}',
    '', '<b/>')`,
  `(4, 1, 2, 3, 4.5, 6.7, 0.1, 0.30000000000000004, '/', '//', '/ /', '/',
    NULL, NULL, '0001-01-01 BC', NULL, NULL, '0001-01-01 00:00:00 BC', NULL, '-178000000 years',
    '[]', '{}', NULL, '2001:db8::1', NULL, NULL, NULL, NULL,
    'ok', 2147483647, '{-1}', NULL, 'happy', NULL, NULL,
    '(,"a ""b"" /")',
    '{{{1}}}', '{{NULL,NULL}}', '{"/","\\\\",""}', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL)`,
]

async function mustLoad(schema: string, name: string): Promise<TableInfo> {
  const info = await loadTable(pool, { schema, name })
  if (info === undefined) throw new Error(`${schema}.${name} did not load`)
  return info
}

interface Snapshot {
  readonly lines: string[]
  readonly result: SnapshotResult
}

async function snapshot(info: TableInfo, options: { where?: string; params?: readonly string[]; columns?: readonly string[] } = {}): Promise<Snapshot> {
  const lines: string[] = []
  const result = await runSnapshot(pool, { table: info, ...options }, { rows: (batch) => void lines.push(...batch.map((b) => decoder.decode(b))) })
  expect(result.rows).toBe(lines.length)
  return { lines, result }
}

/** Every row's columns as the output functions print them (text-format results, no type parsers). */
async function outputText(info: TableInfo, order = ''): Promise<Array<Record<string, string | null>>> {
  const list = info.columns.map((c) => q(c.name)).join(', ')
  const { rows } = await display.query<unknown[]>({
    text: `SELECT ${list === '' ? 'NULL' : list} FROM ONLY ${q(info.schema)}.${q(info.name)} ${order}`,
    rowMode: 'array',
  })
  return rows.map((row) => Object.fromEntries(info.columns.map((c, i) => [c.name, (row[i] ?? null) as string | null])))
}

/** The line a snapshot must produce for `record`, built with the protocol's key builder and JSON.stringify. */
function expectedLine(info: TableInfo, record: Record<string, string | null>, columns?: readonly string[]): string {
  const key = buildRowKey({ schema: info.schema, name: info.name }, record, info.primaryKey)
  const value: Record<string, string | null> = {}
  for (const column of info.columns) if (columns === undefined || columns.includes(column.name)) value[column.name] = record[column.name] ?? null
  return JSON.stringify({ key, value, headers: { operation: 'insert', relation: [info.schema, info.name] } })
}

const sorted = (lines: readonly string[]): string[] => [...lines].sort()

beforeAll(async () => {
  pool = new pg.Pool({ connectionString: cluster.url, max: 4 })
  pool.on('error', () => {})
  display = await displaySession(cluster)
  await cluster.query(`
    CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
    ALTER TYPE mood ADD VALUE 'meh' BEFORE 'ok';
  `)
  // A new enum value is usable only once the transaction that added it has committed.
  await cluster.query(`
    CREATE TYPE complex AS (re float8, im text);
    CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
    CREATE DOMAIN intarr AS int4[];
    CREATE DOMAIN posarr AS posint[];
    CREATE DOMAIN happy_mood AS mood;
    CREATE DOMAIN flag AS bool;
    CREATE DOMAIN code4 AS char(4);
    CREATE TABLE every_type (${EVERY_TYPE_COLUMNS});
    INSERT INTO every_type VALUES ${EVERY_TYPE_ROWS.join(', ')};
    CREATE TABLE keyed (name text, flag bool, addr inet, label char(4), note text, PRIMARY KEY (name, flag, addr, label));
    INSERT INTO keyed VALUES
      ('a/b', true, '10.0.0.1', 'x', 'one'), ('"q"', false, '10.0.0.0/8', 'xy', NULL), ('_', true, '::1', '', 'three'),
      ('/', false, '1.2.3.4', '/', 'four'), ('é//', true, '1.2.3.4/32', 'a/ ', 'five'), ('', false, '0.0.0.0', ' ', '');
    CREATE TABLE nopk ("b" text, "a" int, "B" text, "é" text, "_z" bool, "Z" inet);
    INSERT INTO nopk VALUES
      ('x', 1, 'y', 'z', true, '1.1.1.1'), (NULL, NULL, NULL, NULL, NULL, NULL), (NULL, NULL, NULL, NULL, NULL, NULL),
      ('/', 2, NULL, '_', false, NULL), ('_', NULL, '', 'a/b', NULL, '::1');
  `)
  await cluster.query(`CREATE SCHEMA ${q(ODD_SCHEMA)}`)
  await cluster.query(
    `CREATE TABLE ${q(ODD_SCHEMA)}.${q(ODD_TABLE)} (${q('the "id"')} int, ${q('a.b/c d')} text, ${q("it's")} text, ${q('{"json":1}')} text, ${q('ünï')} int,
     PRIMARY KEY (${q('a.b/c d')}, ${q('the "id"')}))`,
  )
  await cluster.query(
    `INSERT INTO ${q(ODD_SCHEMA)}.${q(ODD_TABLE)} VALUES (1, 'a/b', 'it''s', '{"x": "y"}', 7), (2, '', NULL, NULL, NULL), (3, '"//"', '\\', '', 0)`,
  )
})

afterAll(async () => {
  await display?.end()
  await pool?.end()
})

describe('snapshot rows', () => {
  it('prints every type as its output function does, keys as the protocol builds them', async () => {
    const info = await mustLoad('public', 'every_type')
    const { lines, result } = await snapshot(info)
    expect(result.rows).toBe(4)
    const expected = (await outputText(info)).map((record) => expectedLine(info, record))
    expect(sorted(lines)).toEqual(sorted(expected))
    for (const line of lines) expect(line).not.toMatch(/\n/)
    // Generated columns are not published, so not in the snapshot either.
    expect(JSON.parse(lines[0] as string).value).not.toHaveProperty('gen')
  })

  it('agrees with col::text except where a cast prints differently (bool, bpchar, inet/cidr, xml and their domains)', async () => {
    const info = await mustLoad('public', 'every_type')
    const { lines } = await snapshot(info)
    const values = new Map(lines.map((line) => {
      const parsed = JSON.parse(line) as { value: Record<string, string | null> }
      return [parsed.value['id'], parsed.value] as const
    }))
    const list = info.columns.map((c) => `${q(c.name)}::text`).join(', ')
    const { rows } = await display.query<unknown[]>({ text: `SELECT ${list} FROM every_type`, rowMode: 'array' })
    const differing = new Set<string>()
    for (const row of rows) {
      const value = values.get(row[0] as string) as Record<string, string | null>
      info.columns.forEach((column, i) => {
        const cast = row[i] as string | null
        if (column.castToTextIsOutput) expect(value[column.name], column.name).toBe(cast)
        else if (value[column.name] !== cast) differing.add(column.name)
      })
    }
    expect([...differing].sort()).toEqual(['b', 'bpd', 'ch', 'ch1', 'fl', 'ip', 'x'].sort())
    const first = values.get('1') as Record<string, string | null>
    expect(first).toMatchObject({ b: 't', fl: 'f', ch: 'ab   ', ch1: 'x', ip: '192.168.0.1', net: '10.1.0.0/16', bpd: 'ab  ' })
    expect(values.get('3')).toMatchObject({ ch: '     ', ch1: ' ', bpd: '  a ', c: '(,)', ach: '{"   "}' })
    expect(values.get('2')).toMatchObject({ b: null, ch: null, c: null, ip: null })
    // The display settings are in force.
    expect(first).toMatchObject({
      iv: 'P1Y2M3DT4H5M6.7S',
      tstz: '2024-01-31 10:00:00.123456+00',
      by: '\\x0001fffe',
      f4: '3.14',
      j: '{"a": [1, 2],   "b":"x"}',
      jb: '{"a": [1, 2], "b": "x", "u": "ü"}',
      a_text: '{"a b","c,d","e\\"f","g\\\\h",NULL,"NULL",""}',
      ac: '{"(1.1,2.2)","(3.3,)"}',
    })
  })

  it('builds keys from output text: booleans as t/f, bpchar padded, inet without /32, slashes doubled', async () => {
    const info = await mustLoad('public', 'keyed')
    const { lines } = await snapshot(info)
    const expected = (await outputText(info)).map((record) => expectedLine(info, record))
    expect(sorted(lines)).toEqual(sorted(expected))
    const keys = lines.map((line) => (JSON.parse(line) as { key: string }).key).sort()
    expect(keys).toContain('"public"."keyed"/"a//b"/"t"/"10.0.0.1"/"x   "')
    expect(keys).toContain('"public"."keyed"/"é////"/"t"/"1.2.3.4"/"a//  "')
    expect(keys).toContain('"public"."keyed"/""/"f"/"0.0.0.0"/"    "')
    expect(keys).toContain('"public"."keyed"/"_"/"t"/"::1"/"    "')
  })

  it('keys a table without a primary key by every column in code-point name order, NULL as _', async () => {
    const info = await mustLoad('public', 'nopk')
    const { lines } = await snapshot(info)
    const expected = (await outputText(info)).map((record) => expectedLine(info, record))
    expect(sorted(lines)).toEqual(sorted(expected))
    const keys = lines.map((line) => (JSON.parse(line) as { key: string }).key)
    // Columns B, Z, _z, a, b, é.
    expect(keys).toContain('"public"."nopk"/"y"/"1.1.1.1"/"t"/"1"/"x"/"z"')
    expect(keys.filter((k) => k === '"public"."nopk"/_/_/_/_/_/_')).toHaveLength(2)
    expect(keys).toContain('"public"."nopk"/_/_/"f"/"2"/"//"/"_"')
    expect(keys).toContain('"public"."nopk"/""/"::1"/_/_/"_"/"a//b"')
  })

  it('keys by every column even when only some are selected', async () => {
    const info = await mustLoad('public', 'nopk')
    const { lines } = await snapshot(info, { columns: ['a'] })
    const expected = (await outputText(info)).map((record) => expectedLine(info, record, ['a']))
    expect(sorted(lines)).toEqual(sorted(expected))
    expect(Object.keys((JSON.parse(lines[0] as string) as { value: object }).value)).toEqual(['a'])
  })

  it('quotes any schema, table and column name', async () => {
    const info = await mustLoad(ODD_SCHEMA, ODD_TABLE)
    const { lines } = await snapshot(info)
    const expected = (await outputText(info)).map((record) => expectedLine(info, record))
    expect(sorted(lines)).toEqual(sorted(expected))
    const first = JSON.parse(lines.find((l) => l.includes('"the \\"id\\"":"1"')) as string) as Record<string, unknown>
    expect(first).toEqual({
      key: '"we"ird s..ch//ema"."ta "b" ..le//x"/"a//b"/"1"',
      value: { 'the "id"': '1', 'a.b/c d': 'a/b', "it's": "it's", '{"json":1}': '{"x": "y"}', ünï: '7' },
      headers: { operation: 'insert', relation: [ODD_SCHEMA, ODD_TABLE] },
    })
  })

  it('selects columns in table order, whatever order they are given in', async () => {
    const info = await mustLoad('public', 'every_type')
    const columns = ['t', 'm', 'id', 'ch']
    const { lines } = await snapshot(info, { columns })
    const expected = (await outputText(info)).map((record) => expectedLine(info, record, columns))
    expect(sorted(lines)).toEqual(sorted(expected))
    expect(Object.keys((JSON.parse(lines[0] as string) as { value: object }).value)).toEqual(['id', 't', 'ch', 'm'])
  })

  it('refuses selections without the primary key or with unknown columns', async () => {
    const info = await mustLoad('public', 'keyed')
    expect(() => buildSnapshotQuery(info, { columns: ['name', 'flag', 'addr'] })).toThrow(/primary-key column "label"/)
    expect(() => buildSnapshotQuery(info, { columns: ['name', 'flag', 'addr', 'label', 'nope'] })).toThrow(/"nope" is not a column/)
    await expect(runSnapshot(pool, { table: info, columns: ['note'] }, { rows: () => {} })).rejects.toMatchObject({ code: 'invalid_request' })
    await expect(runSnapshot(pool, { table: info, columns: ['note'] }, { rows: () => {} })).rejects.toBeInstanceOf(SnapshotError)
  })

  it('filters with compiled where clauses and untyped $n parameters exactly as the where evaluator does', async () => {
    const info = await mustLoad('public', 'every_type')
    const columns = whereColumns(info)
    const records = await outputText(info)
    const cases: Array<[string, string[], number]> = [
      ['i4 > $1', ['0'], 2],
      ['t LIKE $1', ['%line%'], 1],
      ['m = $1', ['meh'], 1],
      ['m > $1 OR hm::text = $2', ['meh', 'happy'], 2],
      ['b', [], 1],
      ['NOT fl', [], 1],
      ['ch = $1', ['ab'], 1],
      ['tstz > $1', ['2000-01-01 00:00:00+00'], 2],
      ['ip IS NULL', [], 1],
      ['pi > 4 AND hm::text = $1', ['happy'], 2],
      ['u = $1', ['00000000-0000-0000-0000-000000000000'], 1],
      ['ia @> ARRAY[2]', [], 1],
      ['$1 = ANY(a_text)', ['c,d'], 1],
      ['f8 = $1', ['-Infinity'], 1],
      ['num_any::text = $1', ['NaN'], 1],
      ['id IN (1, 3, 4) AND i2 IS NOT NULL', [], 3],
      ['lower(vc) = $1', ['héllo'], 1],
      ['d < $1', ['1000-01-01'], 2],
    ]
    for (const [source, params, count] of cases) {
      const where = await compileWhere(source, { columns, params })
      const { lines } = await snapshot(info, { where: where.canonical, params: where.params })
      const expected = records.filter((record) => where.matches(record)).map((record) => expectedLine(info, record))
      expect(sorted(lines), source).toEqual(sorted(expected))
      expect(lines.length, source).toBe(count)
    }
  })

  it('reads a partitioned table whole and a regular table without its inheritance children', async () => {
    await cluster.query(`
      CREATE TABLE parted (region text, id int, v text, PRIMARY KEY (region, id)) PARTITION BY LIST (region);
      CREATE TABLE parted_eu PARTITION OF parted FOR VALUES IN ('eu');
      CREATE TABLE parted_us PARTITION OF parted FOR VALUES IN ('us');
      INSERT INTO parted VALUES ('eu', 1, 'a'), ('us', 2, 'b'), ('us', 3, NULL);
      CREATE TABLE parent (id int PRIMARY KEY, v text);
      CREATE TABLE child (extra int) INHERITS (parent);
      INSERT INTO parent VALUES (1, 'parent row');
      INSERT INTO child VALUES (2, 'child row', 9);
    `)
    const parted = await mustLoad('public', 'parted')
    expect((await snapshot(parted)).lines.map((l) => (JSON.parse(l) as { key: string }).key).sort()).toEqual([
      '"public"."parted"/"eu"/"1"',
      '"public"."parted"/"us"/"2"',
      '"public"."parted"/"us"/"3"',
    ])
    const partition = await mustLoad('public', 'parted_us')
    expect((await snapshot(partition)).lines).toHaveLength(2)
    const parent = await mustLoad('public', 'parent')
    expect((await snapshot(parent)).lines).toEqual([
      '{"key":"\\"public\\".\\"parent\\"/\\"1\\"","value":{"id":"1","v":"parent row"},"headers":{"operation":"insert","relation":["public","parent"]}}',
    ])
  })

  it('handles tables with no columns and very wide tables', async () => {
    await cluster.query('CREATE TABLE no_columns (); INSERT INTO no_columns DEFAULT VALUES;')
    const empty = await mustLoad('public', 'no_columns')
    expect((await snapshot(empty)).lines).toEqual(['{"key":"\\"public\\".\\"no_columns\\"","value":{},"headers":{"operation":"insert","relation":["public","no_columns"]}}'])

    // Close to Postgres's limit of 1600 columns (and within a heap row's 8 kB).
    const width = 1500
    const names = Array.from({ length: width }, (_, i) => `c${i}`)
    await cluster.query(`CREATE TABLE wide (id int PRIMARY KEY, ${names.map((n) => `${n} int4`).join(', ')})`)
    await cluster.query(`INSERT INTO wide (id, ${names.join(', ')}) VALUES (1, ${names.map((_, i) => String(i)).join(', ')})`)
    const wide = await mustLoad('public', 'wide')
    const { lines } = await snapshot(wide)
    const parsed = JSON.parse(lines[0] as string) as { value: Record<string, string> }
    expect(Object.keys(parsed.value)).toHaveLength(width + 1)
    expect(parsed.value['c1499']).toBe('1499')
    // Wide and keyless: the key has every column.
    await cluster.query(`CREATE TABLE wide_nopk AS SELECT * FROM wide`)
    const wideNoPk = await mustLoad('public', 'wide_nopk')
    const keyless = await snapshot(wideNoPk)
    expect(keyless.lines).toEqual((await outputText(wideNoPk)).map((record) => expectedLine(wideNoPk, record)))
  })
})

describe('snapshot rows and replicated rows', () => {
  it('give the same keys and values as ChangeEncoder on the replicated inserts of the same rows', async () => {
    const tables: Array<[string, string]> = [
      ['public', 'every_type'],
      ['public', 'keyed'],
      ['public', 'nopk'],
      [ODD_SCHEMA, ODD_TABLE],
    ]
    const copies: Array<[string, string]> = []
    for (const [schema, name] of tables) {
      const copy = `${name} copy`
      await cluster.query(`CREATE TABLE ${q(schema)}.${q(copy)} (LIKE ${q(schema)}.${q(name)} INCLUDING ALL)`)
      copies.push([schema, copy])
    }
    const names = await setUpReplication(cluster, copies)
    const { client, sink } = startClient(cluster, names, { durableLsn: () => 0n })
    await client.start()
    try {
      for (const [i, [schema, name]] of tables.entries()) {
        const [, copy] = copies[i] as [string, string]
        const info = await mustLoad(schema, name)
        const list = info.columns.map((c) => q(c.name)).join(', ')
        await cluster.query(`INSERT INTO ${q(schema)}.${q(copy)} (${list}) SELECT ${list} FROM ONLY ${q(schema)}.${q(name)}`)
      }
      for (const [schema, copy] of copies) {
        const info = await mustLoad(schema, copy)
        const [tx] = await sink.waitForCount(copy, 1)
        const encoder = new ChangeEncoder({ table: tableDescription(info), replica: 'full' })
        const replicated = (tx?.changes ?? []).map((change, op) => {
          const line = encoder.encode(change as InsertChange, { lsn: 1n, op, txid: 1, last: false })[0]
          const parsed = JSON.parse(decoder.decode(line?.bytes)) as { key: string; value: unknown }
          return JSON.stringify({ key: parsed.key, value: parsed.value })
        })
        const { lines } = await snapshot(info)
        const snapshotted = lines.map((line) => {
          const parsed = JSON.parse(line) as { key: string; value: unknown }
          return JSON.stringify({ key: parsed.key, value: parsed.value })
        })
        expect(replicated.length, copy).toBeGreaterThan(0)
        expect(sorted(snapshotted), copy).toEqual(sorted(replicated))
      }
    } finally {
      await client.stop()
      await cluster.dropReplicationSlots()
    }
  })
})

describe('buildSnapshotQuery', () => {
  const column = (name: string, attnum: number, extra: Partial<TableInfo['columns'][number]> = {}): TableInfo['columns'][number] => ({
    name,
    attnum,
    typeOid: 25,
    typeMod: -1,
    typeName: 'text',
    dims: 0,
    notNull: false,
    typeCategory: 'S',
    castToTextIsOutput: true,
    ...extra,
  })
  const table: TableInfo = {
    oid: 1,
    schema: 'my "s"',
    name: "it's",
    kind: 'table',
    replicaIdentity: 'full',
    columns: [column('id', 1, { notNull: true, pkIndex: 0 }), column('flag', 2, { typeName: 'bool', castToTextIsOutput: false })],
    primaryKey: ['id'],
  }

  it('reads a regular table with ONLY and a partitioned one without', () => {
    expect(buildSnapshotQuery(table)).toMatch(/ FROM ONLY "my ""s"""\."it's"$/)
    expect(buildSnapshotQuery({ ...table, kind: 'partitioned' })).toMatch(/ FROM "my ""s"""\."it's"$/)
  })

  it('appends the where clause in parentheses, and nothing for an empty one', () => {
    expect(buildSnapshotQuery(table, { where: '"id" = $1 OR TRUE' })).toMatch(/ WHERE \("id" = \$1 OR TRUE\)$/)
    expect(buildSnapshotQuery(table, { where: '  ' })).not.toMatch(/WHERE/)
  })

  it('doubles quotes in the SQL literals it embeds and calls the output function where ::text differs', () => {
    const sql = buildSnapshotQuery(table)
    expect(sql).toContain(`'{"key":'::pg_catalog.text`)
    expect(sql).toContain(`"relation":["my \\"s\\"","it''s"]`)
    expect(sql).toContain(`'"my "s""."it''s"/'::pg_catalog.text`)
    expect(sql).toContain('CASE WHEN pg_catalog.num_nulls("flag") = 0 THEN pg_catalog.concat("flag") END')
    expect(sql).toContain('"id"::pg_catalog.text')
  })

  it('nests the concatenation as a balanced tree', () => {
    const wide: TableInfo = { ...table, columns: Array.from({ length: 1024 }, (_, i) => column(`c${i}`, i + 1)), primaryKey: [] }
    const sql = buildSnapshotQuery(wide)
    let depth = 0
    let max = 0
    for (const ch of sql) {
      if (ch === '(') max = Math.max(max, ++depth)
      else if (ch === ')') depth--
    }
    expect(max).toBeLessThan(40)
  })
})
