import type { RowValues } from '@sluice/protocol'
import { beforeAll, describe, expect, it } from 'vitest'
import { ShapeIndex, chooseConjunct } from '../../src/shapes/shape-index.js'
import type { WhereClause, WhereColumn } from '../../src/where/index.js'
import { compileWhereSync, loadWhereParser } from '../../src/where/index.js'

const COLUMNS: readonly WhereColumn[] = [
  { name: 'id', type: 'int4', notNull: true },
  { name: 'name', type: 'text' },
  { name: 'tags', type: 'text', dims: 1 },
  { name: 'status', type: 'status', enumValues: ['draft', 'live', 'gone'] },
  { name: 'score', type: 'numeric' },
]

function where(source: string, params: readonly string[] = []): WhereClause {
  return compileWhereSync(source, { columns: COLUMNS, params })
}

/** A clause whose `matches` calls are counted: the cost the index is meant to avoid. */
function counted(clause: WhereClause, counter: { calls: number }): WhereClause {
  const wrapped = Object.create(clause) as WhereClause & { matches: (row: RowValues) => boolean }
  wrapped.matches = (row: RowValues) => {
    counter.calls++
    return clause.matches(row)
  }
  return wrapped
}

function row(values: Partial<Record<'id' | 'name' | 'tags' | 'status' | 'score', string | null>>): RowValues {
  return { id: '1', name: null, tags: null, status: null, score: null, ...values }
}

function sorted(shapes: Iterable<string>): string[] {
  return [...shapes].sort()
}

beforeAll(async () => {
  await loadWhereParser()
})

describe('ShapeIndex', () => {
  it('indexes equality, IN, = ANY and @>', () => {
    const index = new ShapeIndex<string>()
    index.add('eq', where('id = 7'))
    index.add('in', where("name IN ('a', 'b')"))
    index.add('any', where("'red' = ANY(tags)"))
    index.add('contains', where("tags @> '{red,big}'"))
    index.add('enum', where("status = 'live'"))
    expect(sorted(index.affected(row({ id: '7' })))).toEqual(['eq'])
    expect(sorted(index.affected(row({ name: 'b' })))).toEqual(['in'])
    expect(sorted(index.affected(row({ name: 'c' })))).toEqual([])
    expect(sorted(index.affected(row({ tags: '{red}' })))).toEqual(['any'])
    expect(sorted(index.affected(row({ tags: '{big,red,red}' })))).toEqual(['any', 'contains'])
    expect(sorted(index.affected(row({ tags: '{big}' })))).toEqual([])
    expect(sorted(index.affected(row({ status: 'live' })))).toEqual(['enum'])
  })

  it('collects each shape once into a reused array, with no Set, across every placement', () => {
    const index = new ShapeIndex<string>()
    index.add('all', undefined)
    index.add('eq', where('id = 7'))
    index.add('in', where('id IN (7, 8, 7)'))
    index.add('any', where("'red' = ANY(tags)"))
    index.add('any-big', where("'big' = ANY(tags)"))
    index.add('contains', where("tags @> '{red,big}'"))
    index.add('or', where("id = 7 OR name = 'x'"))
    const out = ['stale-1', 'stale-2', 'stale-3', 'stale-4', 'stale-5', 'stale-6', 'stale-7', 'stale-8']
    // Repeated elements in an array row and an IN list naming a key twice still give each shape once.
    const count = index.collect(row({ id: '7', tags: '{red,big,red,big}' }), out)
    expect(sorted(out.slice(0, count))).toEqual(['all', 'any', 'any-big', 'contains', 'eq', 'in', 'or'])
    expect(out.slice(count)).toEqual(['stale-8'])
    expect(index.collect(row({ id: '9' }), out)).toBe(1)
    expect(out[0]).toBe('all')
    expect(sorted(index.affected(row({ id: '8', tags: '{big}' })))).toEqual(['all', 'any-big', 'in'])
  })

  it('confirms AND candidates by evaluation and files them under the equality with fewest keys', () => {
    const clause = where("name IN ('a','b','c') AND id = 3 AND score > 1.5")
    expect(chooseConjunct(clause)?.column).toBe('id')
    const index = new ShapeIndex<string>()
    index.add('and', clause)
    index.add('and-contains', where("tags @> '{x}' AND name LIKE 'a%'"))
    expect(sorted(index.affected(row({ id: '3', name: 'b', score: '2' })))).toEqual(['and'])
    expect(sorted(index.affected(row({ id: '3', name: 'b', score: '1.5' })))).toEqual([])
    expect(sorted(index.affected(row({ id: '3', name: 'z', score: '2' })))).toEqual([])
    expect(sorted(index.affected(row({ tags: '{x,y}', name: 'ab' })))).toEqual(['and-contains'])
    expect(sorted(index.affected(row({ tags: '{x,y}', name: 'b' })))).toEqual([])
  })

  it('evaluates OR and other unindexable clauses per row, and gives no-where shapes every row', () => {
    const index = new ShapeIndex<string>()
    index.add('or', where('id = 1 OR score > 10'))
    index.add('range', where('id > 5'))
    index.add('all', undefined)
    expect(chooseConjunct(where('id = 1 OR score > 10'))).toBeUndefined()
    expect(sorted(index.affected(row({ id: '1' })))).toEqual(['all', 'or'])
    expect(sorted(index.affected(row({ id: '6', score: '11' })))).toEqual(['all', 'or', 'range'])
    expect(sorted(index.affected(row({ id: '2' })))).toEqual(['all'])
  })

  it('removes shapes from every kind of placement', () => {
    const index = new ShapeIndex<string>()
    index.add('a', where('id = 1'))
    index.add('b', where('id = 1 AND score > 0'))
    index.add('c', where('id = 1 OR id = 2'))
    index.add('d', undefined)
    index.remove('a')
    index.remove('c')
    index.remove('nope')
    expect(sorted(index.affected(row({ id: '1', score: '1' })))).toEqual(['b', 'd'])
    index.remove('b')
    index.remove('d')
    expect(index.size).toBe(0)
    expect(sorted(index.affected(row({ id: '1', score: '1' })))).toEqual([])
    // Re-adding replaces the earlier clause instead of leaving it filed.
    index.add('a', where('id = 1'))
    index.add('a', where('id = 2'))
    expect(sorted(index.affected(row({ id: '1' })))).toEqual([])
    expect(sorted(index.affected(row({ id: '2' })))).toEqual(['a'])
  })

  it('keeps every shape of a key as shapes share it and leave it again, in any order', () => {
    const index = new ShapeIndex<string>()
    const names = ['a', 'b', 'c', 'd']
    // Join one by one (a key with one shape, then several), then leave in another order (several, one, none).
    names.forEach((name, i) => {
      index.add(name, where(`id = 7${i % 2 === 0 ? '' : ' AND score > 0'}`))
      expect(sorted(index.affected(row({ id: '7', score: '1' })))).toEqual(names.slice(0, i + 1))
    })
    expect(sorted(index.affected(row({ id: '7', score: '-1' })))).toEqual(['a', 'c'])
    for (const [gone, left] of [['c', ['a', 'b', 'd']], ['a', ['b', 'd']], ['d', ['b']], ['b', []]] as const) {
      index.remove(gone)
      expect(sorted(index.affected(row({ id: '7', score: '1' })))).toEqual(left)
      // Removing a shape not filed under the key leaves the key's shapes alone.
      index.remove('nope')
      expect(sorted(index.affected(row({ id: '7', score: '1' })))).toEqual(left)
    }
    index.add('e', where('id = 7'))
    expect(sorted(index.affected(row({ id: '7' })))).toEqual(['e'])
    expect(sorted(index.affected(row({ id: '8' })))).toEqual([])
  })


  it('files a shape whose key hit is its verdict as itself, and still evaluates the others left alone under a key', () => {
    const index = new ShapeIndex<string>()
    // `in` alone under two keys (bare), then a clause that needs evaluating and a second bare one join key 1.
    index.add('in', where('id IN (1, 2)'))
    expect(sorted(index.affected(row({ id: '1' })))).toEqual(['in'])
    expect(sorted(index.affected(row({ id: '2' })))).toEqual(['in'])
    index.add('checked', where('id = 1 AND score > 0'))
    index.add('plain', where('id = 1'))
    expect(sorted(index.affected(row({ id: '1', score: '5' })))).toEqual(['checked', 'in', 'plain'])
    expect(sorted(index.affected(row({ id: '1', score: '-5' })))).toEqual(['in', 'plain'])
    // Back to one shape per key: the one left under key 1 is evaluated again, the bare one under key 2 is untouched.
    index.remove('plain')
    index.remove('in')
    expect(sorted(index.affected(row({ id: '1', score: '-5' })))).toEqual([])
    expect(sorted(index.affected(row({ id: '1', score: '5' })))).toEqual(['checked'])
    expect(sorted(index.affected(row({ id: '2' })))).toEqual([])
    // And to a bare shape after a shared key: the survivor is found without a clause to run.
    index.add('again', where('id = 1'))
    index.remove('checked')
    expect(sorted(index.affected(row({ id: '1', score: '-5' })))).toEqual(['again'])
    // Re-adding replaces the placement, bare or not.
    index.add('again', where('id = 1 AND score > 0'))
    expect(sorted(index.affected(row({ id: '1', score: '-5' })))).toEqual([])
    expect(sorted(index.affected(row({ id: '1', score: '5' })))).toEqual(['again'])
    index.remove('again')
    expect(index.size).toBe(0)
    expect(sorted(index.affected(row({ id: '1', score: '5' })))).toEqual([])
  })
  it('never matches NULLs', () => {
    const index = new ShapeIndex<string>()
    index.add('eq', where("name = 'a'"))
    index.add('any', where("'a' = ANY(tags)"))
    index.add('contains', where("tags @> '{a}'"))
    expect(sorted(index.affected(row({})))).toEqual([])
    expect(sorted(index.affected(row({ tags: '{NULL}' })))).toEqual([])
    expect(sorted(index.affected(row({ tags: '{NULL,a}' })))).toEqual(['any', 'contains'])
  })

  it('normalises keys as Postgres equality does', () => {
    const index = new ShapeIndex<string>()
    index.add('text-literal', where("id = '007'"))
    index.add('param', where('id = $1', ['0007']))
    index.add('numeric', where('score = 1.50'))
    expect(sorted(index.affected(row({ id: '7' })))).toEqual(['param', 'text-literal'])
    expect(sorted(index.affected(row({ score: '1.5' })))).toEqual(['numeric'])
  })

  it('reports old and new membership for updates', () => {
    const index = new ShapeIndex<string>()
    index.add('live', where("status = 'live'"))
    index.add('draft', where("status = 'draft'"))
    index.add('big', where('score > 10'))
    const { inOld, inNew } = index.affectedByUpdate(
      row({ status: 'draft', score: '11' }),
      row({ status: 'live', score: '12' }),
    )
    expect(sorted(inOld)).toEqual(['big', 'draft'])
    expect(sorted(inNew)).toEqual(['big', 'live'])
    // moved out of 'draft' (delete), into 'live' (insert), within 'big' (update)
  })

  it('looks at a handful of candidates among 100k indexed shapes', () => {
    const index = new ShapeIndex<number>()
    const counter = { calls: 0 }
    // Compiling 100k clauses through the WASM parser takes ~20 s, so most shapes are copies of one
    // compiled `id = $1` with the key `compileWhere` gives for another value (checked below);
    // 2k shapes are real compiled ANDs, whose candidates must be confirmed by evaluation.
    const template = where('id = $1', ['0'])
    const conjunct = template.exact
    if (conjunct === undefined) throw new Error('id = $1 should be exact')
    // Copies keep their prototype: compiled clauses and conjuncts are class instances with methods.
    const like = <T extends object>(of: T, fields: Partial<T>): T => Object.assign(Object.create(Object.getPrototypeOf(of)) as T, of, fields)
    const copy = (n: number): WhereClause => {
      const keyed = like(conjunct, { keys: [String(n)] })
      return like(template, { conjuncts: [keyed], exact: keyed })
    }
    expect(copy(4321).conjuncts[0]?.keys).toEqual(where('id = $1', ['04321']).conjuncts[0]?.keys)
    for (let n = 0; n < 98_000; n++) index.add(n, counted(copy(n), counter))
    for (let n = 0; n < 2_000; n++) {
      index.add(100_000 + n, counted(where('id = $1 AND score > 0', [String(n)]), counter))
    }
    expect(index.size).toBe(100_000)

    counter.calls = 0
    expect(sorted([...index.affected(row({ id: '1234', score: '1' }))].map(String))).toEqual(['101234', '1234'])
    expect(counter.calls).toBe(1) // only the AND candidate is evaluated; the exact one matches by key
    counter.calls = 0
    expect([...index.affected(row({ id: '1234', score: '0' }))]).toEqual([1234])
    expect(counter.calls).toBe(1)
    counter.calls = 0
    expect([...index.affected(row({ id: '50000', score: '1' }))]).toEqual([50000])
    expect([...index.affected(row({ id: '200000', score: '1' }))]).toEqual([])
    expect(counter.calls).toBe(0)
  })
})

describe('ShapeIndex keys that read as integers', () => {
  // The index holds canonical integer text as numbers (mapKey): text and int8 shapes must find exactly what equality finds.
  const KEY_COLUMNS: readonly WhereColumn[] = [
    { name: 't', type: 'text' },
    { name: 'n', type: 'int8' },
  ]
  const clause = (source: string): WhereClause => compileWhereSync(source, { columns: KEY_COLUMNS, params: [] })
  const quote = (text: string): string => `'${text.replace(/'/g, "''")}'`
  const ids = (found: Set<{ id: string }>): string[] => [...found].map((s) => s.id)

  it('keeps integer text, other text and long digit strings apart, as equality on the text does', () => {
    const index = new ShapeIndex<{ id: string }>()
    const values = ['42', '042', '-7', '-0', '0', '+1', ' 1', '1e3', '9007199254740993', '999999999999999', '-999999999999999', '1000000000000000', 'abc', '']
    const shapes = values.map((v) => ({ id: v }))
    shapes.forEach((shape) => index.add(shape, clause(`t = ${quote(shape.id)}`)))
    for (const v of [...values, '43', '7', '9007199254740992']) {
      expect(ids(index.affected({ t: v, n: null }))).toEqual(values.includes(v) ? [v] : [])
    }
    // Removal finds what was filed the same way.
    shapes.forEach((shape) => index.remove(shape))
    for (const v of values) expect(index.affected({ t: v, n: null }).size).toBe(0)
  })

  it('finds int8 shapes by value past 2^53 and at its edges', () => {
    const index = new ShapeIndex<{ id: string }>()
    const values = ['9007199254740991', '9007199254740992', '9007199254740993', '-9223372036854775808', '9223372036854775807', '123456789012345', '-123456789012345', '0', '-1']
    values.forEach((v) => index.add({ id: v }, clause(`n = ${v}`)))
    for (const v of values) expect(ids(index.affected({ t: null, n: v }))).toEqual([v])
    expect(index.affected({ t: null, n: '9007199254740994' }).size).toBe(0)
    // Non-canonical row text (a cast's output never looks like this, but the evaluator path must agree).
    expect(ids(index.affected({ t: null, n: '-0' }))).toEqual(['0'])
  })
})
