import { describe, expect, it } from 'vitest'
import type { ShapeDefinition } from '../../../src/shapes/definition/index.js'
import {
  SHAPE_META_VERSION,
  ShapeMetaError,
  ShapeRegistry,
  decodeShapeMeta,
  definitionHash,
  definitionKey,
  encodeShapeMeta,
  parseHandle,
} from '../../../src/shapes/definition/index.js'
import { RouteReader, indexShapeMeta, parseRouteSummary } from '../../../src/shapes/definition/shape-meta.js'

const ITEMS: ShapeDefinition = {
  schema: 'public',
  table: 'items',
  where: '("id" = $1)',
  params: { '1': '7' },
  columns: ['id', 'title'],
  replica: 'default',
  log: 'full',
}
const AWKWARD: ShapeDefinition = {
  schema: 'Some "Schema"',
  table: 'issues for x_0 ☃ 𝄞',
  where: undefined,
  params: {},
  columns: undefined,
  replica: 'full',
  log: 'changes_only',
}

function frozenRegistry(now = 1_000_000, floor?: number): ShapeRegistry {
  return new ShapeRegistry({ clock: () => now, ...(floor === undefined ? {} : { floor }) })
}

describe('ShapeRegistry', () => {
  it('register issues one handle per definition; lookup and get find it', () => {
    const registry = frozenRegistry()
    expect(registry.lookup(ITEMS)).toBeUndefined()
    const handle = registry.register(ITEMS)
    expect(parseHandle(handle)?.hash).toBe(definitionHash(ITEMS))
    expect(registry.register({ ...ITEMS, columns: ['id', 'title'] })).toBe(handle)
    expect(registry.registerEntry(ITEMS)).toEqual({ handle, created: false })
    expect(registry.lookup(ITEMS)).toBe(handle)
    expect(registry.get(handle)).toEqual(ITEMS)
    expect(registry.status(handle)).toBe('active')

    const other = registry.register(AWKWARD)
    expect(other).not.toBe(handle)
    expect(registry.size).toBe(2)
    expect(registry.get('1-1')).toBeUndefined()
    // Older than the newest handle: retired (see status); newer, or not a handle: unknown.
    expect(registry.status('1-1')).toBe('expired')
    expect(registry.status('1-9000000')).toBe('unknown')
    expect(registry.status('not-a-handle')).toBe('unknown')
  })

  it('keeps its own frozen copy', () => {
    const registry = frozenRegistry()
    const columns = ['id', 'title']
    const handle = registry.register({ ...ITEMS, columns })
    columns.push('oops')
    expect(registry.get(handle)?.columns).toEqual(['id', 'title'])
  })

  it('keeps a definition that is frozen already (as the compiler hands them out) itself, not a second copy for the life of the shape', () => {
    const registry = frozenRegistry()
    const frozen = Object.freeze({ ...ITEMS, params: Object.freeze({ ...ITEMS.params }), columns: Object.freeze(['id', 'title']) })
    const handle = registry.register(frozen)
    expect(registry.get(handle)).toBe(frozen)
    // Frozen on the outside only: its parts could still change, so a copy.
    const shallow = Object.freeze({ ...AWKWARD, params: { ...AWKWARD.params } })
    const other = registry.register(shallow)
    expect(registry.get(other)).not.toBe(shallow)
    expect(registry.get(other)).toEqual(shallow)
    expect(Object.isFrozen(registry.get(other)!.params)).toBe(true)
  })

  it('invalidate expires the handle for good; the definition gets a new one', () => {
    const registry = frozenRegistry()
    const first = registry.register(ITEMS)
    expect(registry.invalidate(first)).toEqual(ITEMS)
    expect(registry.invalidate(first)).toBeUndefined()
    expect(registry.status(first)).toBe('expired')
    expect(registry.get(first)).toBeUndefined()
    expect(registry.lookup(ITEMS)).toBeUndefined()

    const second = registry.register(ITEMS)
    expect(second).not.toBe(first)
    expect(registry.lookup(ITEMS)).toBe(second)
    expect(registry.status(first)).toBe('expired')
    expect(registry.entries().map((e) => [e.handle, e.expired])).toEqual([
      [first, true],
      [second, false],
    ])
  })

  it('restores from stored metas, and a restart never reissues a handle', () => {
    const before = frozenRegistry(5_000_000)
    const expired = before.register(ITEMS)
    before.invalidate(expired)
    const items = before.register(ITEMS)
    const awkward = before.register(AWKWARD)
    const stored = before.entries().map((e) => encodeShapeMeta(e.definition, e.handle, { expired: e.expired }))

    // The restarted machine's clock is behind and frozen.
    const after = ShapeRegistry.restore(stored.map((m) => decodeShapeMeta(m)), { clock: () => 1 })
    expect(after.lookup(ITEMS)).toBe(items)
    expect(after.lookup(AWKWARD)).toBe(awkward)
    expect(after.get(awkward)).toEqual(AWKWARD)
    expect(after.status(expired)).toBe('expired')
    expect(after.handleFloor).toBe(before.handleFloor)

    after.invalidate(items)
    const fresh = after.register(ITEMS)
    expect([expired, items, awkward]).not.toContain(fresh)
    expect(parseHandle(fresh)?.micros).toBe(before.handleFloor + 1)
  })

  it('a persisted floor covers handles whose shapes were deleted', () => {
    const before = frozenRegistry(5_000_000)
    const gone = before.register(AWKWARD)
    before.invalidate(gone)
    before.forget(gone)
    const kept = before.register(ITEMS)
    // Only the older shape survived in storage, but the floor was kept apart.
    const stored = before.entries().filter((e) => e.handle === kept)
    const after = ShapeRegistry.restore(stored, { clock: () => 0, floor: before.handleFloor })
    expect(after.register(AWKWARD)).not.toBe(gone)
    expect(parseHandle(after.register(AWKWARD))?.micros).toBeGreaterThan(before.handleFloor)
  })

  it('a forgotten handle stays retired, and a registry started at the clock knows earlier handles as retired', () => {
    const registry = frozenRegistry(2_000_000)
    const gone = registry.register(ITEMS)
    registry.invalidate(gone)
    registry.forget(gone)
    expect(registry.entries()).toEqual([])
    expect(registry.status(gone)).toBe('expired')
    // After a restart that restored nothing: only the floor (the clock at start) knows the handle.
    const restarted = ShapeRegistry.restore([], { clock: () => 3_000_000, floor: 3_000_000 })
    expect(restarted.status(gone)).toBe('expired')
    expect(restarted.status(`${definitionHash(ITEMS)}-3000001`)).toBe('unknown')
    expect(parseHandle(restarted.register(ITEMS))!.micros).toBeGreaterThan(3_000_000)
  })

  it('restore resolves two active handles for one definition to the newest', () => {
    const registry = ShapeRegistry.restore([
      { handle: '9-300', definition: ITEMS, expired: false },
      { handle: '9-100', definition: ITEMS, expired: false },
    ])
    expect(registry.lookup(ITEMS)).toBe('9-300')
    expect(registry.status('9-100')).toBe('expired')
    expect(registry.expiredDuringRestore).toEqual(['9-100'])
  })

  it('restore rejects duplicate handles', () => {
    expect(() =>
      ShapeRegistry.restore([
        { handle: '9-1', definition: ITEMS, expired: false },
        { handle: '9-1', definition: AWKWARD, expired: false },
      ]),
    ).toThrow(/duplicate/)
  })
})

describe('shape meta', () => {
  it.each([ITEMS, AWKWARD])('round-trips %#', (def) => {
    const bytes = encodeShapeMeta(def, '12-34')
    expect(decodeShapeMeta(bytes)).toEqual({ handle: '12-34', definition: def, expired: false })
    expect(decodeShapeMeta(encodeShapeMeta(def, '12-34', { expired: true })).expired).toBe(true)
  })

  it('round-trips the table signature the shape was built against', () => {
    const table = { oid: 16384, columns: [['id', 23, -1], ['name "x"', 1043, 24]] as const }
    const decoded = decodeShapeMeta(encodeShapeMeta(ITEMS, '12-34', { table }))
    expect(decoded.table).toEqual(table)
    expect(decodeShapeMeta(encodeShapeMeta(ITEMS, '12-34')).table).toBeUndefined()
  })

  it('decodes the text form a storage log keeps (one character per byte), non-ASCII text included', () => {
    for (const def of [ITEMS, AWKWARD, { ...ITEMS, where: `name = 'café ☕'` }]) {
      const bytes = encodeShapeMeta(def, '12-34')
      const text = Buffer.from(bytes).toString('latin1')
      expect(decodeShapeMeta(text)).toEqual(decodeShapeMeta(bytes))
      expect(decodeShapeMeta(text).definition).toEqual(def)
    }
    // A text that is not UTF-8 once read back as bytes is refused, as those bytes are.
    expect(() => decodeShapeMeta(Buffer.from(encodeShapeMeta(ITEMS, '1-2')).toString('latin1').replace('items', 'it\xffms'))).toThrow(/not UTF-8 JSON/)
  })

  it('shares one table signature among the metas that carry the same one', () => {
    const table = { oid: 16384, columns: [['id', 23, -1], ['name', 1043, 24]] as const, primaryKey: ['id'] }
    const a = decodeShapeMeta(encodeShapeMeta(ITEMS, '12-34', { table })).table
    const b = decodeShapeMeta(encodeShapeMeta(AWKWARD, '12-35', { table })).table
    expect(a).toEqual(table)
    expect(b).toBe(a)
    expect(Object.isFrozen(a)).toBe(true)
    expect(Object.isFrozen(a!.columns[0])).toBe(true)
    for (const other of [
      { ...table, oid: 16385 },
      { ...table, columns: [['id', 23, -1], ['name', 1043, 25]] as const },
      { ...table, primaryKey: ['name'] },
      { ...table, replicaIdentity: 'f' },
    ]) {
      const c = decodeShapeMeta(encodeShapeMeta(ITEMS, '12-36', { table: other })).table
      expect(c).toEqual(other)
      expect(c).not.toBe(a)
    }
  })

  it('carries a version field', () => {
    const record = JSON.parse(new TextDecoder().decode(encodeShapeMeta(ITEMS, '1-2'))) as Record<string, unknown>
    expect(record['v']).toBe(SHAPE_META_VERSION)
  })

  const encode = (patch: Record<string, unknown>): Uint8Array => {
    const record = JSON.parse(new TextDecoder().decode(encodeShapeMeta(ITEMS, '1-2'))) as Record<string, unknown>
    return new TextEncoder().encode(JSON.stringify({ ...record, ...patch }))
  }

  it.each([
    ['another version', encode({ v: 2 })],
    ['no version', encode({ v: undefined })],
    ['version as text', encode({ v: '1' })],
    ['a bad handle', encode({ handle: 'a/b' })],
    ['a bad replica', encode({ replica: 'partial' })],
    ['a bad log', encode({ log: 'none' })],
    ['bad params', encode({ params: { x: '1' } })],
    ['non-string params', encode({ params: { '1': 1 } })],
    ['bad columns', encode({ columns: [1] })],
    ['a missing table', encode({ table: undefined })],
    ['a bad table oid', encode({ table_oid: -1, table_columns: [] })],
    ['table columns without an oid', encode({ table_columns: [] })],
    ['malformed table columns', encode({ table_oid: 5, table_columns: [['a', 'b', 1]] })],
    ['not JSON', new TextEncoder().encode('{')],
    ['not UTF-8', new Uint8Array([0xff, 0xfe])],
    ['an array', new TextEncoder().encode('[]')],
  ])('rejects %s', (_, bytes) => {
    expect(() => decodeShapeMeta(bytes)).toThrow(ShapeMetaError)
  })

  it('refuses to encode an invalid handle', () => {
    expect(() => encodeShapeMeta(ITEMS, 'no')).toThrow(ShapeMetaError)
  })
})

describe('shape meta: the indexed layout a restart reads without decoding', () => {
  const table = { oid: 16384, columns: [['id', 23, -1], ['key', 25, -1]] as const, primaryKey: ['id'], replicaIdentity: 'default' }
  const stitch = { snapshot: { xmin: 729n, xmax: 731n, xip: [730n] }, insertLsn: 40705072n }
  const route = { kind: 'equals', column: 'id', domain: 'value:int:"id"', keys: ['7'] } as const
  const text = (def: ShapeDefinition, handle = '12-34', options: Parameters<typeof encodeShapeMeta>[2] = { table, stitch, route }): string =>
    Buffer.from(encodeShapeMeta(def, handle, options)).toString('latin1')

  it('gives the table text, the definition key, the insert LSN and the route as slices of the text', () => {
    const index = indexShapeMeta(text(ITEMS), '12-34')!
    expect(index.key).toBe(definitionKey(ITEMS))
    expect(index.insertLsn).toBe('40705072')
    expect(parseRouteSummary(index.route)).toEqual(route)
    expect(JSON.parse(`{${index.table}}`)).toEqual({ schema: 'public', table: 'items', table_oid: 16384, table_columns: table.columns, table_pk: ['id'], table_replident: 'default' })
    // The decoder reads the same text whole, as it reads the earlier layout.
    expect(decodeShapeMeta(text(ITEMS))).toEqual(decodeShapeMeta(JSON.stringify({ v: 1, handle: '12-34', schema: 'public', table: 'items', where: ITEMS.where, params: ITEMS.params, columns: ITEMS.columns, replica: 'default', log: 'full', table_oid: 16384, table_columns: table.columns, table_pk: ['id'], table_replident: 'default', snapshot: '729:731:730', insert_lsn: '40705072', route: [1, 'equals', 'id', 'value:int:"id"', ['7']] })))
  })

  it('metas of one table as one catalog saw it share the table text; another table, signature or name does not', () => {
    const a = indexShapeMeta(text(ITEMS), '12-34')!.table
    expect(indexShapeMeta(text({ ...ITEMS, where: '("id" = 8)', params: {} }, '12-35'), '12-35')!.table).toBe(a)
    expect(indexShapeMeta(text({ ...ITEMS, table: 'others' }), '12-34')!.table).not.toBe(a)
    expect(indexShapeMeta(text(ITEMS, '12-34', { table: { ...table, oid: 16385 }, stitch, route }), '12-34')!.table).not.toBe(a)
  })

  it('finds its fields in clauses, names and values that spell the layout\'s own field names', () => {
    const hostile: ShapeDefinition = {
      schema: 'x","key":[1],"snapshot":"',
      table: '","route":[],"where":',
      where: `("key" = '","insert_lsn":"9","route":[1],"where":null,')`,
      params: { '1': ',"key":\\"' },
      columns: undefined,
      replica: 'full',
      log: 'changes_only',
    }
    const hostileRoute = { kind: 'equals', column: 'key', domain: 'value:text:"key"', keys: ['","where":"'] } as const
    const index = indexShapeMeta(text(hostile, '12-34', { table, stitch, route: hostileRoute }), '12-34')!
    expect(index.key).toBe(definitionKey(hostile))
    expect(index.insertLsn).toBe('40705072')
    expect(parseRouteSummary(index.route)).toEqual(hostileRoute)
    expect(JSON.parse(`{${index.table}}`)).toMatchObject({ schema: hostile.schema, table: hostile.table })
  })

  it.each([
    ['an earlier layout (no key)', JSON.stringify({ v: 1, handle: '12-34', schema: 'public', table: 'items', where: null, params: {}, columns: null, replica: 'default', log: 'full', snapshot: '1:1:', insert_lsn: '5', route: [1, 'equals', 'id', 'd', ['1']] }), '12-34'],
    ['an expired shape', text(ITEMS, '12-34', { expired: true, table, stitch, route }), '12-34'],
    ['no route', text(ITEMS, '12-34', { table, stitch }), '12-34'],
    ['no stitch', text(ITEMS, '12-34', { table, route }), '12-34'],
    ['another handle (a compacted log)', text(ITEMS), '12-344'],
    ['a handle that is a prefix', text(ITEMS, '12-344'), '12-34'],
    ['text that is not ASCII', text({ ...ITEMS, where: `("title" = 'café')` }), '12-34'],
    ['not a meta', 'garbage', '12-34'],
  ])('leaves to the decoder: %s', (_, meta, handle) => {
    expect(indexShapeMeta(meta, handle)).toBeUndefined()
  })

  it('reads a run of routes as parsing each whole would, the plain keys of a domain seen before without parsing', () => {
    const routes = [
      [1, 'equals', 'id', 'value:int:"id"', ['1']],
      [1, 'equals', 'id', 'value:int:"id"', ['22']],
      [1, 'equals', 'id', 'value:int:"id"', ['a"b']],
      [1, 'equals', 'id', 'value:int:"id"', ['back\\slash']],
      [1, 'equals', 'id', 'value:int:"id"', ['']],
      [1, 'any', 'id', 'value:int:"id"', ['3', '4']],
      [1, 'any', 'id', 'value:int:"id"', ['5']],
      [1, 'equals', 'id', 'value:int:"id"', ['6']],
      [1, 'equals', 'owner', 'value:text:"owner"', ['"]]']],
      [1, 'equals', 'owner', 'value:text:"owner"', ['ann']],
      [2, 'equals', 'owner', 'value:text:"owner"', ['bob']],
      [1, 'equals', 'owner', 'value:text:"owner"', []],
      [1, 'sideways', 'owner', 'value:text:"owner"', ['x']],
    ].map((r) => JSON.stringify(r))
    routes.push('[1,"equals","owner","value:text:\\"owner\\"",["cid"]]]', '[1, "equals","owner","value:text:\\"owner\\"",["dan"]]', '[1,"equals","owner","value:text:\\"owner\\"",["eve"]')
    const reader = new RouteReader()
    for (const text of routes) expect(reader.read(text), text).toEqual(parseRouteSummary(text))
  })

  it('refuses a route of another version or shape', () => {
    expect(parseRouteSummary('[2,"equals","id","d",["1"]]')).toBeUndefined()
    expect(parseRouteSummary('[1,"equals","id","d",[]]')).toBeUndefined()
    expect(parseRouteSummary('[1,"equals"')).toBeUndefined()
  })

  it('a registry restored from keys decodes a definition only when asked for it', () => {
    let decoded = 0
    const source = {
      get definition(): ShapeDefinition {
        decoded++
        return ITEMS
      },
    }
    const handle = '9-100'
    const registry = frozenRegistry(2_000)
    registry.restoreIndexed([{ handle, key: definitionKey(ITEMS), source }])
    expect(registry.status(handle)).toBe('active')
    expect(registry.lookup(ITEMS)).toBe(handle)
    expect(decoded).toBe(0)
    expect(registry.get(handle)).toEqual(ITEMS)
    expect(registry.get(handle)).toEqual(ITEMS)
    expect(decoded).toBe(1)
    // The newer of two handles of one definition stays active, whichever way each was restored.
    registry.restoreMore([{ handle: '9-200', definition: ITEMS, expired: false }])
    expect(registry.lookup(ITEMS)).toBe('9-200')
    expect(registry.expiredDuringRestore).toEqual([handle])
  })
})
