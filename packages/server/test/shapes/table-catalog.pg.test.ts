import { usePostgres } from '@sluice/test-utils'
import { beforeAll, describe, expect, it } from 'vitest'
import type { Relation } from '../../src/replication/index.js'
import {
  TableCatalogError,
  TableNotSupportedError,
  loadTable,
  loadTableByOid,
  matchesRelation,
  tableDescription,
  whereColumns,
} from '../../src/shapes/index.js'
import type { TableColumn, TableInfo } from '../../src/shapes/index.js'
import { compileWhere } from '../../src/where/index.js'

const cluster = usePostgres()

const q = (name: string): string => `"${name.replaceAll('"', '""')}"`

const ODD_SCHEMA = 'we"ird s.ch/ema'
const ODD_TABLE = 'ta "b" .le/x'

async function mustLoad(schema: string, name: string): Promise<TableInfo> {
  const info = await loadTable(cluster, { schema, name })
  if (info === undefined) throw new Error(`${schema}.${name} did not load`)
  return info
}

async function oidOf(type: string): Promise<number> {
  const { rows } = await cluster.query<{ oid: number }>('SELECT $1::regtype::oid::int4 AS oid', [type])
  return rows[0]?.oid as number
}

function column(info: TableInfo, name: string): TableColumn {
  const found = info.columns.find((c) => c.name === name)
  if (found === undefined) throw new Error(`no column ${name}`)
  return found
}

async function errorOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a rejection')
    },
    (error: unknown) => error,
  )
}

beforeAll(async () => {
  await cluster.query(`
    CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
    ALTER TYPE mood ADD VALUE 'meh' BEFORE 'ok';
    CREATE TYPE complex AS (re float8, im float8);
    CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
    CREATE DOMAIN small_posint AS posint CHECK (VALUE < 100);
    CREATE DOMAIN intarr AS int4[];
    CREATE DOMAIN posarr AS posint[];
    CREATE DOMAIN happy_mood AS mood;
    CREATE DOMAIN flag AS bool;
    CREATE TABLE all_types (
      id int8 PRIMARY KEY,
      i2 int2, i4 int4 NOT NULL, i8 int8,
      num numeric(10, 2), num_any numeric,
      f4 float4, f8 float8,
      t text, vc varchar(20), ch char(5), ch1 char,
      b bool, u uuid, d date, tm time(2), ts timestamp(3), tstz timestamptz, iv interval, ivd interval day to second(2),
      j json, jb jsonb, by bytea, ip inet,
      m mood, pi posint, spi small_posint, ia intarr, pa posarr, hm happy_mood, fl flag,
      c complex,
      a1 int4[], a2 int4[][], a_text text[], am mood[], ap posint[], ac complex[], anum numeric(5, 1)[],
      iv2 int2vector
    );
  `)
})

describe('loadTable: column types', () => {
  it('describes every common type', async () => {
    const info = await mustLoad('public', 'all_types')
    expect(info).toMatchObject({ schema: 'public', name: 'all_types', kind: 'table', replicaIdentity: 'default', primaryKey: ['id'] })
    const { rows } = await cluster.query<{ oid: number }>(`SELECT 'public.all_types'::regclass::oid::int4 AS oid`)
    expect(info.oid).toBe(rows[0]?.oid)
    expect(info.columns.map((c) => c.name)).toEqual([
      'id', 'i2', 'i4', 'i8', 'num', 'num_any', 'f4', 'f8', 't', 'vc', 'ch', 'ch1', 'b', 'u', 'd', 'tm', 'ts', 'tstz', 'iv', 'ivd',
      'j', 'jb', 'by', 'ip', 'm', 'pi', 'spi', 'ia', 'pa', 'hm', 'fl', 'c', 'a1', 'a2', 'a_text', 'am', 'ap', 'ac', 'anum', 'iv2',
    ])
    expect(info.columns.map((c) => c.attnum)).toEqual(info.columns.map((_, i) => i + 1))

    // Scalars: typname, typmod, category; no array/domain/enum fields.
    const scalars: Array<[string, string, number, string, boolean]> = [
      ['id', 'int8', -1, 'N', true],
      ['i2', 'int2', -1, 'N', true],
      ['i4', 'int4', -1, 'N', true],
      ['i8', 'int8', -1, 'N', true],
      ['num', 'numeric', (10 << 16) + 2 + 4, 'N', true],
      ['num_any', 'numeric', -1, 'N', true],
      ['f4', 'float4', -1, 'N', true],
      ['f8', 'float8', -1, 'N', true],
      ['t', 'text', -1, 'S', true],
      ['vc', 'varchar', 24, 'S', true],
      ['ch', 'bpchar', 9, 'S', false],
      ['ch1', 'bpchar', 5, 'S', false],
      ['b', 'bool', -1, 'B', false],
      ['u', 'uuid', -1, 'U', true],
      ['d', 'date', -1, 'D', true],
      ['tm', 'time', 2, 'D', true],
      ['ts', 'timestamp', 3, 'D', true],
      ['tstz', 'timestamptz', -1, 'D', true],
      ['iv', 'interval', -1, 'T', true],
      ['j', 'json', -1, 'U', true],
      ['jb', 'jsonb', -1, 'U', true],
      ['by', 'bytea', -1, 'U', true],
      ['ip', 'inet', -1, 'I', false],
      ['c', 'complex', -1, 'C', true],
    ]
    const KEYWORD_TYPES = new Set(['numeric', 'varchar', 'time', 'timestamp', 'interval'])
    for (const [name, typeName, typeMod, typeCategory, castToTextIsOutput] of scalars) {
      const col = column(info, name)
      expect(col, name).toEqual({
        name,
        attnum: col.attnum,
        typeOid: await oidOf(typeName === 'complex' ? 'complex' : typeName),
        typeMod,
        typeName,
        // Qualified, as SQL outside this session's search_path finds it; type names that are SQL keywords quoted.
        typeSql: typeName === 'complex' ? 'public.complex' : `pg_catalog.${KEYWORD_TYPES.has(typeName) ? `"${typeName}"` : typeName}`,
        dims: 0,
        notNull: name === 'id' || name === 'i4',
        typeCategory,
        castToTextIsOutput,
        ...(name === 'id' ? { pkIndex: 0 } : {}),
      })
    }
    expect(column(info, 'ivd').typeMod).toBeGreaterThan(0)
  })

  it('resolves enums, domains (nested, over arrays, over enums) and arrays', async () => {
    const info = await mustLoad('public', 'all_types')
    const labels = ['sad', 'meh', 'ok', 'happy']
    expect(column(info, 'm')).toMatchObject({ typeName: 'mood', typeSql: 'public.mood', typeCategory: 'E', dims: 0, enumValues: labels, castToTextIsOutput: true })
    expect(column(info, 'm').baseTypeName).toBeUndefined()
    expect(column(info, 'pi')).toMatchObject({ typeName: 'posint', baseTypeName: 'int4', typeCategory: 'N', dims: 0, typeOid: await oidOf('posint') })
    expect(column(info, 'spi')).toMatchObject({ typeName: 'small_posint', baseTypeName: 'int4', dims: 0 })
    expect(column(info, 'ia')).toMatchObject({ typeName: 'intarr', baseTypeName: '_int4', elementTypeName: 'int4', dims: 1, typeCategory: 'A' })
    expect(column(info, 'pa')).toMatchObject({
      typeName: 'posarr',
      baseTypeName: '_posint',
      elementTypeName: 'posint',
      elementBaseTypeName: 'int4',
      dims: 1,
    })
    expect(column(info, 'hm')).toMatchObject({ typeName: 'happy_mood', baseTypeName: 'mood', enumValues: labels, dims: 0 })
    expect(column(info, 'fl')).toMatchObject({ typeName: 'flag', baseTypeName: 'bool', castToTextIsOutput: false })
    expect(column(info, 'a1')).toMatchObject({ typeName: '_int4', typeSql: 'pg_catalog._int4', elementTypeName: 'int4', dims: 1, typeCategory: 'A', typeOid: await oidOf('int4[]') })
    expect(column(info, 'a1').baseTypeName).toBeUndefined()
    expect(column(info, 'a2')).toMatchObject({ typeName: '_int4', elementTypeName: 'int4', dims: 2 })
    expect(column(info, 'a_text')).toMatchObject({ typeName: '_text', elementTypeName: 'text', dims: 1 })
    expect(column(info, 'am')).toMatchObject({ typeName: '_mood', elementTypeName: 'mood', dims: 1, enumValues: labels })
    expect(column(info, 'ap')).toMatchObject({ typeName: '_posint', elementTypeName: 'posint', elementBaseTypeName: 'int4', baseTypeName: 'int4', dims: 1 })
    expect(column(info, 'ac')).toMatchObject({ typeName: '_complex', elementTypeName: 'complex', dims: 1 })
    expect(column(info, 'anum')).toMatchObject({ typeName: '_numeric', elementTypeName: 'numeric', typeMod: (5 << 16) + 1 + 4, dims: 1 })
    // int2vector has an element type but is not an array: its text is `1 2 3`, not an array literal.
    expect(column(info, 'iv2')).toMatchObject({ typeName: 'int2vector', dims: 0 })
    expect(column(info, 'iv2').elementTypeName).toBeUndefined()
  })

  it('gives the where compiler base types, enum labels and element types', async () => {
    const info = await mustLoad('public', 'all_types')
    const columns = whereColumns(info)
    const byName = new Map(columns.map((c) => [c.name, c]))
    expect(byName.get('i4')).toEqual({ name: 'i4', type: 'int4', typeOid: 23, notNull: true })
    expect(byName.get('pi')).toEqual({ name: 'pi', type: 'int4', notNull: false })
    expect(byName.get('spi')).toEqual({ name: 'spi', type: 'int4', notNull: false })
    expect(byName.get('ia')).toEqual({ name: 'ia', type: 'int4', dims: 1, notNull: false })
    expect(byName.get('pa')).toEqual({ name: 'pa', type: 'int4', dims: 1, notNull: false })
    expect(byName.get('a2')).toEqual({ name: 'a2', type: 'int4', dims: 2, notNull: false })
    expect(byName.get('ap')).toEqual({ name: 'ap', type: 'int4', dims: 1, notNull: false })
    expect(byName.get('m')).toMatchObject({ type: 'mood', enumValues: ['sad', 'meh', 'ok', 'happy'] })
    // Postgres has no operators for a domain over an enum (not even against the enum), so it stays opaque.
    expect(byName.get('hm')).toEqual({ name: 'hm', type: 'happy_mood', typeOid: await oidOf('happy_mood'), notNull: false })
    expect(byName.get('am')).toMatchObject({ type: 'mood', dims: 1, enumValues: ['sad', 'meh', 'ok', 'happy'] })
    expect(byName.get('ch')).toMatchObject({ type: 'bpchar' })
    expect(byName.get('c')).toMatchObject({ type: 'complex' })

    // And they compile into working clauses.
    const row = { i4: '5', pi: '7', m: 'meh', hm: 'happy', ap: '{1,2,3}', ia: '{4}', am: '{sad,ok}', a2: '{{1,2},{3,4}}' }
    const clauses: Array<[string, boolean]> = [
      ['pi > 6 AND i4 = 5', true],
      [`m < 'ok'`, true],
      [`hm::text = 'happy'`, true],
      [`m > 'ok'`, false],
      ['2 = ANY(ap)', true],
      ['ia @> ARRAY[4]', true],
      [`'ok' = ANY(am)`, true],
      ['a2 @> ARRAY[3]', true],
      ['a2 @> ARRAY[5]', false],
    ]
    for (const [clause, expected] of clauses) {
      const where = await compileWhere(clause, { columns })
      expect(where.matches(row), clause).toBe(expected)
    }
    for (const clause of [`hm = 'happy'`, `hm > 'ok'`]) {
      await expect(compileWhere(clause, { columns }), clause).rejects.toThrow()
      await expect(cluster.query(`SELECT 1 FROM all_types WHERE ${clause}`), clause).rejects.toThrow(/operator does not exist/)
    }
  })
})

describe('loadTable: keys and shapes of tables', () => {
  beforeAll(async () => {
    await cluster.query(`
      CREATE TABLE pk_order (a int, b text, c int, d text, PRIMARY KEY (d, a, c));
      CREATE TABLE no_pk (z text, a int);
      CREATE TABLE dropped (a int PRIMARY KEY, gone text, b text, gone2 int);
      ALTER TABLE dropped DROP COLUMN gone;
      ALTER TABLE dropped DROP COLUMN gone2;
      ALTER TABLE dropped ADD COLUMN c int;
      CREATE TABLE generated (a int PRIMARY KEY, doubled int GENERATED ALWAYS AS (a * 2) STORED, b text, ident int GENERATED ALWAYS AS IDENTITY);
      CREATE TABLE ri_full (a int PRIMARY KEY); ALTER TABLE ri_full REPLICA IDENTITY FULL;
      CREATE TABLE ri_nothing (a int); ALTER TABLE ri_nothing REPLICA IDENTITY NOTHING;
      CREATE TABLE ri_index (a int NOT NULL, b int); CREATE UNIQUE INDEX ri_index_a ON ri_index (a); ALTER TABLE ri_index REPLICA IDENTITY USING INDEX ri_index_a;
      CREATE TABLE parted (id int, region text, v text, PRIMARY KEY (region, id)) PARTITION BY LIST (region);
      CREATE TABLE parted_eu PARTITION OF parted FOR VALUES IN ('eu');
      CREATE SCHEMA other;
      CREATE TABLE other.no_pk (x uuid PRIMARY KEY);
      CREATE TABLE "Items" (id int PRIMARY KEY);
      CREATE TABLE items (id text PRIMARY KEY);
      CREATE TABLE empty_table ();
      CREATE VIEW a_view AS SELECT 1 AS one;
      CREATE MATERIALIZED VIEW a_matview AS SELECT 1 AS one;
      CREATE SEQUENCE a_sequence;
      CREATE INDEX all_types_i2 ON all_types (i2);
    `)
    await cluster.query(`CREATE SCHEMA ${q(ODD_SCHEMA)}`)
    await cluster.query(`CREATE TABLE ${q(ODD_SCHEMA)}.${q(ODD_TABLE)} (${q('the "id"')} int, ${q('a.b/c d')} text, ${q("it's")} text, PRIMARY KEY (${q('a.b/c d')}, ${q('the "id"')}))`)
  })

  it('lists a composite primary key in key order, not attnum order', async () => {
    const info = await mustLoad('public', 'pk_order')
    expect(info.primaryKey).toEqual(['d', 'a', 'c'])
    expect(info.columns.map((c) => [c.name, c.pkIndex, c.notNull])).toEqual([
      ['a', 1, true],
      ['b', undefined, false],
      ['c', 2, true],
      ['d', 0, true],
    ])
  })

  it('gives [] and no pkIndex without a primary key', async () => {
    const info = await mustLoad('public', 'no_pk')
    expect(info.primaryKey).toEqual([])
    expect(info.columns.every((c) => c.pkIndex === undefined)).toBe(true)
    expect(tableDescription(info)).toEqual({ schema: 'public', name: 'no_pk', columns: ['z', 'a'], primaryKey: [] })
  })

  it('skips dropped columns and keeps attnums', async () => {
    const info = await mustLoad('public', 'dropped')
    expect(info.columns.map((c) => [c.name, c.attnum])).toEqual([
      ['a', 1],
      ['b', 3],
      ['c', 5],
    ])
  })

  it('skips generated columns (pgoutput does not publish them) but keeps identity columns', async () => {
    const info = await mustLoad('public', 'generated')
    expect(info.columns.map((c) => c.name)).toEqual(['a', 'b', 'ident'])
  })

  it('reports the replica identity', async () => {
    expect((await mustLoad('public', 'pk_order')).replicaIdentity).toBe('default')
    expect((await mustLoad('public', 'ri_full')).replicaIdentity).toBe('full')
    expect((await mustLoad('public', 'ri_nothing')).replicaIdentity).toBe('nothing')
    expect((await mustLoad('public', 'ri_index')).replicaIdentity).toBe('index')
    expect((await mustLoad('public', 'ri_index')).primaryKey).toEqual([])
  })

  it('loads partitioned tables and their partitions', async () => {
    const parted = await mustLoad('public', 'parted')
    expect(parted).toMatchObject({ kind: 'partitioned', primaryKey: ['region', 'id'] })
    expect(parted.columns.map((c) => c.name)).toEqual(['id', 'region', 'v'])
    const partition = await mustLoad('public', 'parted_eu')
    expect(partition).toMatchObject({ kind: 'table', primaryKey: ['region', 'id'] })
    expect(partition.oid).not.toBe(parted.oid)
  })

  it('matches schema and table names exactly', async () => {
    const odd = await mustLoad(ODD_SCHEMA, ODD_TABLE)
    expect(odd).toMatchObject({ schema: ODD_SCHEMA, name: ODD_TABLE, primaryKey: ['a.b/c d', 'the "id"'] })
    expect(odd.columns.map((c) => c.name)).toEqual(['the "id"', 'a.b/c d', "it's"])

    const upper = await mustLoad('public', 'Items')
    const lower = await mustLoad('public', 'items')
    expect(upper.oid).not.toBe(lower.oid)
    expect(column(upper, 'id').typeName).toBe('int4')
    expect(column(lower, 'id').typeName).toBe('text')
    expect(await loadTable(cluster, { schema: 'public', name: 'ITEMS' })).toBeUndefined()
    expect(await loadTable(cluster, { schema: 'Public', name: 'items' })).toBeUndefined()
    expect(await loadTable(cluster, { schema: 'public', name: '"items"' })).toBeUndefined()
  })

  it('tells a table in another schema with the same name apart', async () => {
    const here = await mustLoad('public', 'no_pk')
    const there = await mustLoad('other', 'no_pk')
    expect(there.oid).not.toBe(here.oid)
    expect(there).toMatchObject({ schema: 'other', name: 'no_pk', primaryKey: ['x'] })
    expect(there.columns.map((c) => c.typeName)).toEqual(['uuid'])
  })

  it('gives undefined for a missing table or schema', async () => {
    expect(await loadTable(cluster, { schema: 'public', name: 'nope' })).toBeUndefined()
    expect(await loadTable(cluster, { schema: 'nope', name: 'items' })).toBeUndefined()
    expect(await loadTable(cluster, { schema: 'public', name: '' })).toBeUndefined()
  })

  it('loads a table with no columns', async () => {
    const info = await mustLoad('public', 'empty_table')
    expect(info.columns).toEqual([])
    expect(info.primaryKey).toEqual([])
  })

  it('refuses views, materialized views, sequences, indexes and composite types with a typed error', async () => {
    const cases: Array<[string, string]> = [
      ['a_view', 'v'],
      ['a_matview', 'm'],
      ['a_sequence', 'S'],
      ['all_types_i2', 'i'],
      ['complex', 'c'],
    ]
    for (const [name, relkind] of cases) {
      const error = await errorOf(loadTable(cluster, { schema: 'public', name }))
      expect(error, name).toBeInstanceOf(TableNotSupportedError)
      expect(error, name).toBeInstanceOf(TableCatalogError)
      expect(error, name).toMatchObject({ code: 'unsupported_relation', schema: 'public', table: name, relkind })
    }
    expect(String(await errorOf(loadTable(cluster, { schema: 'public', name: 'a_view' })))).toMatch(/is a view, not a table/)
  })

  // Found by the HTTP fuzz test: each of these reached ALTER TABLE / ALTER PUBLICATION and came back a 500.
  it('refuses system, unlogged and temporary tables before anything alters them', async () => {
    await cluster.query('CREATE UNLOGGED TABLE an_unlogged (id int PRIMARY KEY)')
    const cases: Array<[string, string, RegExp]> = [
      ['pg_catalog', 'pg_class', /is a system table/],
      ['information_schema', 'sql_features', /is a system table/],
      ['public', 'an_unlogged', /is an unlogged table/],
    ]
    for (const [schema, name, message] of cases) {
      const error = await errorOf(loadTable(cluster, { schema, name }))
      expect(error, name).toBeInstanceOf(TableNotSupportedError)
      expect(error, name).toMatchObject({ code: 'unsupported_relation', schema, table: name, relkind: 'r' })
      expect(String(error), name).toMatch(message)
    }
  })

  it('a name with a NUL is no table (Postgres text cannot hold one), not an encoding error', async () => {
    expect(await loadTable(cluster, { schema: 'public', name: 'items\0' })).toBeUndefined()
    expect(await loadTable(cluster, { schema: 'pub\0lic', name: 'items' })).toBeUndefined()
  })

  it('loads by OID the same as by name', async () => {
    for (const [schema, name] of [
      ['public', 'all_types'],
      ['public', 'parted'],
      [ODD_SCHEMA, ODD_TABLE],
    ] as const) {
      const byName = await mustLoad(schema, name)
      expect(await loadTableByOid(cluster, byName.oid)).toEqual(byName)
    }
    expect(await loadTableByOid(cluster, 4_000_000_000)).toBeUndefined()
    expect(await loadTableByOid(cluster, 0)).toBeUndefined()
    expect(await loadTableByOid(cluster, -1)).toBeUndefined()
    const { rows } = await cluster.query<{ oid: number }>(`SELECT 'a_view'::regclass::oid::int4 AS oid`)
    await expect(loadTableByOid(cluster, rows[0]?.oid as number)).rejects.toMatchObject({ code: 'unsupported_relation' })
  })

  it('passes names as parameters, never as SQL', async () => {
    expect(await loadTable(cluster, { schema: `public' OR '1'='1`, name: `x' OR '1'='1` })).toBeUndefined()
  })
})

describe('matchesRelation and tableDescription', () => {
  function relationOf(info: TableInfo): Relation {
    return {
      id: info.oid,
      schema: info.schema,
      table: info.name,
      replicaIdentity: 'full',
      columns: info.columns.map((c) => ({ name: c.name, typeOid: c.typeOid, typeMod: c.typeMod, isKey: true, flags: 1 })),
      keyColumns: info.columns.map((_, i) => i),
    }
  }

  it('accepts a Relation describing the same table and rejects every difference', async () => {
    const info = await mustLoad(ODD_SCHEMA, ODD_TABLE)
    const relation = relationOf(info)
    expect(matchesRelation(info, relation)).toBe(true)
    const mutate = (change: (r: { -readonly [K in keyof Relation]: Relation[K] }) => void): Relation => {
      const copy = { ...relation, columns: relation.columns.map((c) => ({ ...c })) }
      change(copy)
      return copy
    }
    expect(matchesRelation(info, mutate((r) => (r.id += 1)))).toBe(false)
    expect(matchesRelation(info, mutate((r) => (r.schema = 'public')))).toBe(false)
    expect(matchesRelation(info, mutate((r) => (r.table = 'other')))).toBe(false)
    expect(matchesRelation(info, mutate((r) => (r.columns = r.columns.slice(1))))).toBe(false)
    expect(matchesRelation(info, mutate((r) => (r.columns = [...r.columns].reverse())))).toBe(false)
    expect(matchesRelation(info, mutate((r) => (r.columns = r.columns.map((c, i) => (i === 0 ? { ...c, typeOid: 20 } : c)))))).toBe(false)
    expect(matchesRelation(info, mutate((r) => (r.columns = r.columns.map((c, i) => (i === 1 ? { ...c, typeMod: 12 } : c)))))).toBe(false)
    expect(matchesRelation(info, mutate((r) => (r.columns = r.columns.map((c, i) => (i === 1 ? { ...c, name: 'x' } : c)))))).toBe(false)
    // Key flags and replica identity are not part of the table's shape.
    expect(matchesRelation(info, mutate((r) => (r.replicaIdentity = 'default')))).toBe(true)
  })

  it('stops matching after ALTER TABLE', async () => {
    await cluster.query('CREATE TABLE altered (a int PRIMARY KEY, b varchar(10))')
    const before = await mustLoad('public', 'altered')
    await cluster.query('ALTER TABLE altered ALTER COLUMN b TYPE varchar(20)')
    const after = await mustLoad('public', 'altered')
    expect(matchesRelation(before, relationOf(after))).toBe(false)
    expect(matchesRelation(after, relationOf(after))).toBe(true)
  })

  it('describes the table for ChangeEncoder', async () => {
    const info = await mustLoad('public', 'pk_order')
    expect(tableDescription(info)).toEqual({ schema: 'public', name: 'pk_order', columns: ['a', 'b', 'c', 'd'], primaryKey: ['d', 'a', 'c'] })
  })
})

describe('a column of a nondeterministic collation', () => {
  it('is known to the catalog, and a where clause may only test it for NULL (Postgres would compare it case-insensitively, the evaluator byte for byte)', async () => {
    await cluster.query(`
      CREATE COLLATION case_blind (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
      CREATE DOMAIN blind_text AS text COLLATE case_blind;
      CREATE TABLE people (id int PRIMARY KEY, email text COLLATE case_blind, nick blind_text, name text)`)
    const info = await mustLoad('public', 'people')
    expect(column(info, 'email').nondeterministicCollation).toBe('case_blind')
    expect(column(info, 'nick').nondeterministicCollation).toBe('case_blind')
    expect(column(info, 'name').nondeterministicCollation).toBeUndefined()
    const columns = whereColumns(info)
    for (const where of ["email = 'A@x.com'", "lower(email) = 'a@x.com'", "nick IN ('a', 'b')", "email::text LIKE 'a%'", "email IS NOT NULL AND email <> ''"]) {
      const error = await errorOf(compileWhere(where, { columns }))
      expect(error, where).toMatchObject({ reason: 'unsupported', message: expect.stringMatching(/nondeterministic collation "case_blind"/) })
    }
    const row = { id: '1', email: 'A@x.com', nick: null, name: 'x' }
    for (const where of ['email IS NOT NULL', 'nick IS NULL OR id = 2', "name = 'x'"]) {
      expect((await compileWhere(where, { columns })).evaluate(row), where).toBe(true)
    }
  })
})
