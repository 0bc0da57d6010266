import { Shape as ElectricShape, ShapeStream as ElectricStream } from '@electric-sql/client'
import type { ShapeSchema } from '@sluice/protocol'
import { describe, expect, it } from 'vitest'
import { type ChangeMessage, ParserNullValueError, Shape, ShapeStream, createRowParser, isChangeMessage, parseBody } from '../src/index.js'
import { byKey, until, useSluice } from './harness.js'

/**
 * Our parser next to the official `@electric-sql/client` (1.5.28, a pinned
 * devDependency): the same body and schema go into both and the parsed
 * messages must be equal for every type. The official client is driven
 * through its public API (`ShapeStream` with a `fetchClient` answering the
 * body); then both clients sync the same typed table from a real server.
 */

const schema: ShapeSchema = {
  id: { type: 'int8', pk_index: 0, not_null: true },
  i2: { type: 'int2' },
  i4: { type: 'int4' },
  i8: { type: 'int8' },
  f4: { type: 'float4' },
  f8: { type: 'float8' },
  b: { type: 'bool' },
  j: { type: 'json' },
  jb: { type: 'jsonb' },
  num: { type: 'numeric', precision: 10, scale: 2 },
  t: { type: 'text' },
  vc: { type: 'varchar', max_length: 10 },
  u: { type: 'uuid' },
  ts: { type: 'timestamptz', precision: 3 },
  by: { type: 'bytea' },
  e: { type: 'mood' },
  a1: { type: 'int4', dims: 1 },
  a2: { type: 'text', dims: 2 },
  a3: { type: 'int8', dims: 3 },
  af: { type: 'float8', dims: 1 },
  ab: { type: 'bool', dims: 1 },
  aj: { type: 'jsonb', dims: 1 },
  ac: { type: 'complex', dims: 1 },
  nn: { type: 'text', not_null: true },
}

const rows: Array<Record<string, string | null>> = [
  {
    id: '1', i2: '-32768', i4: '2147483647', i8: '9223372036854775807', f4: '1.5', f8: 'NaN', b: 't',
    j: '{"a": [1, "x", null]}', jb: '{"foo": "bar"}', num: '12.50', t: 'héllo "q" \\ end', vc: 'short', u: '0b0f8d2b-1f0c-4a4e-9d6e-1a2b3c4d5e6f',
    ts: '2024-01-02 03:04:05.123+00', by: '\\x0001fffe', e: 'meh', a1: '{1,NULL,3}', a2: '{{"a b","c,d"},{NULL,"x\\"y"}}',
    a3: '{{{1,2},{3,4}},{{5,6},{7,8}}}', af: '{Infinity,-Infinity,NaN,2.5}', ab: '{t,f}', aj: '{"{\\"k\\": 1}",NULL}',
    ac: '{"(1.1,2.2)","(3.3,4.4)"}', nn: 'x', extra: 'not in schema',
  },
  {
    id: '2', i2: null, i4: null, i8: null, f4: '-Infinity', f8: 'Infinity', b: 'false', j: 'null', jb: '[]', num: null, t: '', vc: null, u: null,
    ts: null, by: null, e: null, a1: '{}', a2: '{}', a3: '{}', af: null, ab: null, aj: null, ac: null, nn: '',
  },
  { id: '3', b: 'true', f8: '-0', i4: '0', nn: 'NULL', t: 'NULL', a1: '{-1}' },
]

const body = JSON.stringify([
  ...rows.map((value, i) => ({ key: `"public"."typed"/"${i + 1}"`, value, headers: { operation: 'insert', relation: ['public', 'typed'] } })),
  {
    key: '"public"."typed"/"1"',
    value: { id: '1', b: 'f', a1: '{7}' },
    old_value: { b: 't', a1: '{1,NULL,3}' },
    headers: { operation: 'update', relation: ['public', 'typed'], lsn: '100', op_position: 0, txids: [5], last: true },
  },
  { key: '"public"."typed"/"3"', value: { id: '3' }, headers: { operation: 'delete', relation: ['public', 'typed'], lsn: '100', op_position: 2, txids: [5] } },
])

/** What the official client makes of `text` with `schemaJson`, through its public ShapeStream. */
async function officialParse(text: string, schemaJson: ShapeSchema): Promise<{ messages: unknown[]; error: unknown }> {
  const messages: unknown[] = []
  const controller = new AbortController()
  let error: unknown
  const fetchClient = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = new URL(input instanceof Request ? input.url : input.toString())
    const offset = url.searchParams.get('offset')
    const headers: Record<string, string> = { 'electric-handle': 'h-1', 'content-type': 'application/json' }
    if (url.searchParams.get('live') === 'true') {
      // Nothing more to say: hold the live request until the test is done.
      await new Promise((_, reject) => init?.signal?.addEventListener('abort', () => reject(init.signal!.reason)))
    }
    if (offset === '-1') {
      return new Response(text, { status: 200, headers: { ...headers, 'electric-offset': '0_0', 'electric-schema': JSON.stringify(schemaJson) } })
    }
    return new Response('[{"headers":{"control":"up-to-date","global_last_seen_lsn":"100"}}]', {
      status: 200,
      headers: { ...headers, 'electric-offset': '100_2', 'electric-schema': JSON.stringify(schemaJson), 'electric-up-to-date': '', 'electric-cursor': '1' },
    })
  }
  const stream = new ElectricStream({
    url: 'http://parity.invalid/v1/shape',
    params: { table: 'typed' },
    fetchClient,
    signal: controller.signal,
    onError: (e) => {
      error = e
    },
  })
  let upToDate = false
  stream.subscribe(
    (batch) => {
      for (const m of batch) {
        if ('key' in m) messages.push(m)
        else if ((m.headers as { control?: string }).control === 'up-to-date') upToDate = true
      }
    },
    (e) => {
      error = e
    },
  )
  await until('the official client to finish', () => upToDate || error !== undefined)
  controller.abort()
  return { messages, error }
}

describe('parity with @electric-sql/client', () => {
  it('the same body and schema parse to the same messages, for every type', async () => {
    const official = await officialParse(body, schema)
    expect(official.error).toBeUndefined()
    const ours = parseBody(body, createRowParser(schema)).filter(isChangeMessage)
    expect(ours).toHaveLength(5)
    expect(ours).toEqual(official.messages)
    // The comparison is only worth something if values really were converted.
    expect((ours[0] as ChangeMessage).value).toMatchObject({ id: 1n, i8: 9223372036854775807n, f8: Number.NaN, a3: [[[1n, 2n], [3n, 4n]], [[5n, 6n], [7n, 8n]]] })
    expect((ours[3] as ChangeMessage).old_value).toEqual({ b: true, a1: [1, null, 3] })
  })

  it('both refuse null in a not_null column', async () => {
    const bad = JSON.stringify([{ key: 'k', value: { id: '1', nn: null }, headers: { operation: 'insert', relation: ['public', 'typed'] } }])
    const official = await officialParse(bad, schema)
    expect((official.error as Error).name).toBe('ParserNullValueError')
    expect(() => parseBody(bad, createRowParser(schema))).toThrow(ParserNullValueError)
  })

  it('differs on purpose: a NULL element in a NOT NULL array column is null for us, an error for the official client', async () => {
    const notNullArray: ShapeSchema = { id: { type: 'int8', pk_index: 0, not_null: true }, a: { type: 'int4', dims: 1, not_null: true } }
    const text = JSON.stringify([{ key: 'k', value: { id: '1', a: '{1,NULL}' }, headers: { operation: 'insert', relation: ['public', 'typed'] } }])
    const official = await officialParse(text, notNullArray)
    expect((official.error as Error).name).toBe('ParserNullValueError')
    expect(parseBody(text, createRowParser(notNullArray))).toMatchObject([{ value: { id: 1n, a: [1, null] } }])
  })
})

describe('both clients against a real Sluice server', () => {
  const sluice = useSluice()

  it('sync the same typed table to the same rows', async () => {
    await sluice.cluster.query(`
      CREATE TYPE parity_mood AS ENUM ('ok', 'meh');
      CREATE TABLE parity (
        id int8 PRIMARY KEY, i2 int2, i4 int4 NOT NULL, f4 float4, f8 float8, b bool, j json, jb jsonb, num numeric(8,3), t text,
        ts timestamptz, d date, u uuid, by bytea, m parity_mood, a1 int4[], a2 text[][], af float8[], aj jsonb[], ab bool[]
      );
      INSERT INTO parity VALUES
        (1, 1, 2, 1.5, 'NaN', true, '{"a": 1}', '{"b": [1, 2]}', 3.125, 'text "q" \\ x', '2024-01-02 03:04:05.678901+00', '2024-02-29',
         'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x00ff', 'meh', '{1,NULL,3}', '{{"a b","c,d"},{NULL,"e\\"f"}}', '{Infinity,-Infinity,NaN}', ARRAY['{"k": 1}'::jsonb, NULL], '{t,f}'),
        (2, NULL, -5, '-Infinity', 0.1, false, 'null', '"s"', NULL, '', NULL, NULL, NULL, NULL, NULL, '{}', NULL, NULL, NULL, NULL);
    `)
    const url = `${sluice.serverUrl}/v1/shape`
    const ours = new Shape(new ShapeStream({ url, params: { table: 'parity' } }))
    const stopOfficial = new AbortController()
    const officialStream = new ElectricStream({ url, params: { table: 'parity' }, signal: stopOfficial.signal })
    // The official typings disagree with themselves under exactOptionalPropertyTypes (shapeHandle).
    const official = new ElectricShape(officialStream as unknown as ConstructorParameters<typeof ElectricShape>[0])
    try {
      await ours.ready()
      await official.rows
      // A live change too: its values come from the replication stream, not the snapshot.
      await sluice.cluster.query(`INSERT INTO parity (id, i4, b, a2, f8) VALUES (3, 7, 'f', '{{x}}', 'Infinity'); UPDATE parity SET jb = '{"c": null}', b = NULL WHERE id = 1`)
      await until('both clients have the live changes', () => ours.value.has('"public"."parity"/"3"') && official.currentValue.has('"public"."parity"/"3"') && ours.value.get('"public"."parity"/"1"')?.b === null && official.currentValue.get('"public"."parity"/"1"')?.b === null)
      expect(byKey(ours.value)).toEqual(Object.fromEntries([...official.currentValue].sort(([a], [b]) => (a < b ? -1 : 1))))
      expect(ours.value.get('"public"."parity"/"1"')).toMatchObject({ id: 1n, f8: Number.NaN, a2: [['a b', 'c,d'], [null, 'e"f']] })
    } finally {
      await ours.stop()
      stopOfficial.abort()
      officialStream.unsubscribeAll()
    }
  })
})
