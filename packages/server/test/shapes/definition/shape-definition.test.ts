import type { ShapeDefinitionParams } from '@sluice/protocol'
import { parseShapeRequest } from '@sluice/protocol'
import { describe, expect, it } from 'vitest'
import type { WhereColumn } from '../../../src/where/index.js'
import {
  compileDefinition,
  definitionHash,
  definitionKey,
  normalizeDefinition,
  paramList,
  referencedParamNumbers,
} from '../../../src/shapes/definition/index.js'
import { forgetDefinitionKeys } from '../../../src/shapes/definition/shape-definition.js'
import { compileWhere } from '../../../src/where/index.js'

const COLUMNS: readonly WhereColumn[] = [
  { name: 'id', type: 'int4', notNull: true },
  { name: 'title', type: 'text' },
  { name: 'Mixed Case', type: 'text' },
  { name: 'a,"b"', type: 'int4' },
  { name: 'n', type: 'int4' },
]

/** Parses a query string exactly as the HTTP layer will. */
function request(query: string): ShapeDefinitionParams {
  const parsed = parseShapeRequest(`offset=-1&${query}`)
  if (!parsed.ok) throw new Error(JSON.stringify(parsed.errors))
  const shape = parsed.value.shape
  if (shape === undefined) throw new Error('no shape')
  return shape
}

async function key(query: string): Promise<string> {
  return definitionKey((await compileDefinition(request(query), COLUMNS)).definition)
}

describe('normalizeDefinition', () => {
  it('fills every field', async () => {
    const { definition, where } = await compileDefinition(
      request('table=Foo.%22Bar%20x%22&where=id%20%3E%20$1&params[1]=5&columns=title,id&replica=full&log=changes_only'),
      COLUMNS,
    )
    expect(where?.canonical).toBe('("id" > $1)')
    expect(definition).toEqual({
      schema: 'foo',
      table: 'Bar x',
      where: '("id" > $1)',
      params: { '1': '5' },
      columns: ['id', 'title'],
      replica: 'full',
      log: 'changes_only',
    })
    expect(Object.isFrozen(definition)).toBe(true)
  })

  it('defaults: public schema, no where, all columns', async () => {
    const { definition } = await compileDefinition(request('table=items'), COLUMNS)
    expect(definition).toEqual({
      schema: 'public',
      table: 'items',
      where: undefined,
      params: {},
      columns: undefined,
      replica: 'default',
      log: 'full',
    })
  })

  it.each([
    ['where=id=1', 'where=%20%20ID%20%20=%201%20'],
    ['where=id<>1', 'where=(id%20!=%201)'],
    ['where=id=1%20and%20title%20is%20null', 'where=ID%20=%201%20AND%20(TITLE%20IS%20NULL)'],
    ['where=%22Mixed%20Case%22%3D%27x%27', 'where=%20%22Mixed%20Case%22%20%3D%20%27x%27%20--%20comment'],
    ['columns=id,title', 'columns=title,id'],
    ['columns=%22title%22,%22id%22', 'columns=TITLE,ID'],
    ['columns=id,%22a,%22%22b%22%22%22,%22Mixed%20Case%22', 'columns=%22Mixed%20Case%22,%22a,%22%22b%22%22%22,id'],
    ['columns=id,title', 'columns=title,id,title'],
    ['where=id=$1&params[1]=1', 'where=id=$1&params[1]=1&params[2]=unused'],
    ['where=id=1', 'where=id=1&params[1]=ignored'],
    ['replica=default', ''],
    ['log=full', ''],
    ['table=public.items', 'table=ITEMS'],
  ])('%s is the same shape as %s', async (a, b) => {
    const table = (q: string) => (q.includes('table=') ? q : `table=items&${q}`)
    expect(await key(table(a))).toBe(await key(table(b)))
  })

  it.each([
    ['where=id=1', 'where=id=2'],
    ['where=id=$1&params[1]=1', 'where=id=$1&params[1]=2'],
    ['where=%22Mixed%20Case%22=%27x%27', 'where=%22Mixed%20Case%22=%27X%27'],
    ['columns=id', 'columns=id,title'],
    ['', 'columns=id,title,n,%22Mixed%20Case%22,%22a,%22%22b%22%22%22'],
    ['', 'replica=full'],
    ['', 'log=changes_only'],
    ['', 'where=true'],
    ['table=items', 'table=%22Items%22'],
    ['table=a.b', 'table=%22a.b%22'],
  ])('%s is not the same shape as %s', async (a, b) => {
    const table = (q: string) => (q.includes('table=') ? q : `table=items&${q}`)
    expect(await key(table(a))).not.toBe(await key(table(b)))
  })

  it('keeps only referenced params, keyed by number, and paramList rebuilds positions', async () => {
    const { definition } = await compileDefinition(
      request('table=items&where=id=$2%20and%20title=%27$1%27%20and%20%22Mixed%20Case%22=%27%22$3%22%27&params[1]=a&params[2]=7&params[3]=c'),
      COLUMNS,
    )
    expect(definition.params).toEqual({ '2': '7' })
    expect(paramList(definition)).toEqual(['', '7'])
    // The stored definition recompiles to the same canonical text.
    const where = definition.where ?? ''
    const again = await compileWhere(where, { columns: COLUMNS, params: paramList(definition) })
    expect(again.canonical).toBe(where)
  })

  it('scans $n outside literals and quoted identifiers only', () => {
    expect(referencedParamNumbers(`(("a$1" = $2) AND ('it''s $3' = $10) AND ("x""$4" = $2))`)).toEqual([2, 10])
  })

  it('refuses a where clause without its compiled form', () => {
    expect(() => normalizeDefinition(request('table=items&where=id=1'), undefined)).toThrow(TypeError)
  })

  it('gives the same keys after the kept ones are forgotten (a sweep starts their table afresh)', async () => {
    const { definition } = await compileDefinition(request('table=items&where=id=$1&params[1]=3'), COLUMNS)
    const before = definitionKey(definition)
    forgetDefinitionKeys()
    expect(definitionKey(definition)).toBe(before)
    expect(definitionKey({ ...definition })).toBe(before)
  })

  it('the key is canonical JSON and the hash is stable', async () => {
    const { definition } = await compileDefinition(request('table=items&where=id=$1&params[1]=3&columns=title,id'), COLUMNS)
    expect(JSON.parse(definitionKey(definition))).toEqual([1, 'public', 'items', '("id" = $1)', [[1, '3']], ['id', 'title'], 'default', 'full'])
    // Pinned: a change here changes every handle's hash part (bump DEFINITION_KEY_VERSION instead).
    expect(definitionHash(definition)).toBe('7229301029257874440')
    expect(definitionHash(definition)).toBe(definitionHash({ ...definition, columns: ['id', 'title'] }))
    expect(definitionHash(definition)).not.toBe(definitionHash({ ...definition, replica: 'full' }))
  })
})
