import { beforeAll, describe, expect, it } from 'vitest'
import { type ShapeMeta, decodeShapeMeta, encodeShapeMeta } from '../../src/shapes/definition/index.js'
import { RestoreRoutes } from '../../src/shapes/restore-shapes.js'
import { signatureOf } from '../../src/shapes/shape-builder.js'
import { type TableColumn, type TableInfo, whereColumns } from '../../src/shapes/table-catalog.js'
import { RestoredClause, type RouteSummary, compileWhereSync, loadWhereParser, routeSummaryOf } from '../../src/where/index.js'

const column = (name: string, attnum: number, typeOid: number, typeName: string, typeCategory: string): TableColumn => ({
  name,
  attnum,
  typeOid,
  typeMod: -1,
  typeName,
  typeCategory,
  castToTextIsOutput: true,
  dims: 0,
  notNull: false,
})

const TABLE: TableInfo = {
  oid: 16384,
  schema: 'public',
  name: 'things',
  kind: 'table',
  replicaIdentity: 'default',
  columns: [column('id', 1, 23, 'int4', 'N'), column('owner', 2, 25, 'text', 'S')],
  primaryKey: ['id'],
}

let micros = 1_700_000_000_000_000

/** A stored shape's meta as a restart decodes it, its route as recorded (or `route` in its place). */
function meta(where: string, route?: RouteSummary, options: { signature?: boolean } = {}): ShapeMeta {
  const clause = compileWhereSync(where, { columns: whereColumns(TABLE) })
  const definition = { schema: 'public', table: 'things', where: clause.canonical, params: {}, columns: undefined, replica: 'default', log: 'full' } as const
  const bytes = encodeShapeMeta(definition, `1-${micros++}`, {
    route: route ?? routeSummaryOf(clause),
    ...(options.signature === false ? {} : { table: signatureOf(TABLE) }),
  })
  return decodeShapeMeta(bytes)
}

describe('RestoreRoutes: which restored clauses skip compiling', () => {
  beforeAll(loadWhereParser)

  it('compiles the first shape of each table and domain, and files the rest from their routes', () => {
    const routes = new RestoreRoutes()
    const clauses = ['id = 1', 'id = 2', 'id IN (3, 4)', "owner = 'a'", "owner = 'b'", "id = 5 AND owner = 'c'"].map((w) => routes.clause(meta(w), TABLE))
    expect(clauses.map((c) => c instanceof RestoredClause)).toEqual([false, true, true, false, true, false])
    expect(clauses[2]!.exact?.keys).toEqual(['3', '4'])
    // The same domain on another table is checked afresh: domains name columns, not a relation.
    const other = { ...TABLE, oid: 16385, name: 'others' }
    expect(routes.clause(meta('id = 9'), other)).not.toBeInstanceOf(RestoredClause)
  })

  it('compiles every shape of a domain whose first route disagrees with its compiled clause', () => {
    const routes = new RestoreRoutes()
    const wrong = { kind: 'equals', column: 'id', domain: 'value:int:"id"', keys: ['100'] } as const
    const first = routes.clause(meta('id = 1', wrong), TABLE)
    expect(first.exact?.keys).toEqual(['1'])
    for (const where of ['id = 2', 'id = 3']) {
      const clause = routes.clause(meta(where), TABLE)
      expect(clause).not.toBeInstanceOf(RestoredClause)
    }
    // Another domain is not affected.
    routes.clause(meta("owner = 'a'"), TABLE)
    expect(routes.clause(meta("owner = 'b'"), TABLE)).toBeInstanceOf(RestoredClause)
  })

  it('compiles a shape whose meta has no table signature (its table was never checked against the route)', () => {
    const routes = new RestoreRoutes()
    routes.clause(meta('id = 1'), TABLE)
    expect(routes.clause(meta('id = 2', undefined, { signature: false }), TABLE)).not.toBeInstanceOf(RestoredClause)
    expect(routes.clause(meta('id = 3'), TABLE)).toBeInstanceOf(RestoredClause)
  })
})

describe('RestoreRoutes: a stored canonical text is restored whenever its source was accepted', () => {
  beforeAll(loadWhereParser)

  it('600 comparisons joined by OR: the canonical text has a parenthesis per comparison and still compiles', () => {
    const source = Array.from({ length: 600 }, (_, i) => `id = ${i}`).join(' OR ')
    const stored = meta(source)
    expect(stored.definition.where!.split('(').length - 1).toBeGreaterThan(600)
    const clause = new RestoreRoutes().clause(stored, TABLE)
    expect(clause.evaluate({ id: '599', owner: null })).toBe(true)
    expect(clause.evaluate({ id: '600', owner: null })).toBe(false)
  })

  it('a clause near the length limit whose canonical text is longer than the limit', () => {
    // `owner='…'` prints as `("owner" = '…')`: 830 terms are 31.5 KB of source and about 36 KB stored.
    const terms = Array.from({ length: 830 }, (_, i) => `owner='${String(i).padStart(26, 'x')}'`)
    const source = terms.join(' OR ')
    expect(source.length).toBeLessThan(32 * 1024)
    const stored = meta(source)
    expect(stored.definition.where!.length).toBeGreaterThan(32 * 1024)
    const owner = String(829).padStart(26, 'x')
    expect(new RestoreRoutes().clause(stored, TABLE).evaluate({ id: '7', owner })).toBe(true)
  })

  it('nesting is still bounded: 1,500 levels of parentheses are refused', () => {
    const deep = `${'('.repeat(1500)}id = 1${')'.repeat(1500)}`
    expect(() => compileWhereSync(deep, { columns: whereColumns(TABLE) })).toThrow(/too many operators/)
  })
})
