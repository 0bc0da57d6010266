import type { RowValues } from '@sluice/protocol'
import { describe, expect, it } from 'vitest'
import { type ViewFiling, ViewIndex, type ViewRouting, type ViewSink } from '../../src/shapes/view-index.js'

/** A shape's routing with views held as plain key sets, moved by hand. */
class Routing implements ViewRouting {
  sink: ViewSink | undefined
  readonly views: Set<string>[]
  disconnected = 0
  constructor(
    readonly filings: readonly ViewFiling[],
    initial: readonly (readonly string[])[] = filings.map(() => []),
    private readonly startBroad = false,
  ) {
    this.views = initial.map((keys) => new Set(keys))
  }
  connect(sink: ViewSink): void {
    this.sink = sink
    this.views.forEach((view, i) => view.forEach((key) => sink.file(i, key)))
    sink.broad(this.startBroad)
  }
  keys(filing: number): Iterable<string> {
    return this.views[filing]!
  }
  disconnect(): void {
    this.sink = undefined
    this.disconnected++
  }
  enter(filing: number, key: string): void {
    this.views[filing]!.add(key)
    this.sink?.file(filing, key)
  }
  leave(filing: number, key: string): void {
    this.views[filing]!.delete(key)
    this.sink?.unfile(filing, key)
  }
}

const byColumn = (column: string): ViewFiling => ({ domain: column, rowKey: (row: RowValues) => row[column] ?? undefined })

function candidates<S>(index: ViewIndex<S>, row: RowValues): S[] {
  const out: S[] = []
  const count = index.collect(row, out, 0)
  return out.slice(0, count)
}

describe('ViewIndex', () => {
  it('finds a shape by the values of its view, follows values entering and leaving, and skips NULLs', () => {
    const index = new ViewIndex<string>()
    const a = new Routing([byColumn('list')], [['1', '2']])
    const b = new Routing([byColumn('list')], [['2', '3']])
    index.add('a', a)
    index.add('b', b)
    expect(candidates(index, { list: '1' })).toEqual(['a'])
    expect(candidates(index, { list: '2' }).sort()).toEqual(['a', 'b'])
    expect(candidates(index, { list: '4' })).toEqual([])
    expect(candidates(index, { list: null })).toEqual([])
    a.enter(0, '4')
    b.leave(0, '2')
    expect(candidates(index, { list: '4' })).toEqual(['a'])
    expect(candidates(index, { list: '2' })).toEqual(['a'])
    expect(index.filed).toBe(4)
  })

  it('returns a shape once when the row meets several of its filings, and a broad shape for every row', () => {
    const index = new ViewIndex<string>()
    const both = new Routing([byColumn('list'), byColumn('a')], [['1'], ['7']])
    index.add('both', both)
    expect(candidates(index, { list: '1', a: '7' })).toEqual(['both'])
    expect(candidates(index, { list: '1', a: '8' })).toEqual(['both'])
    expect(candidates(index, { list: '2', a: '8' })).toEqual([])
    both.sink!.broad(true)
    expect(candidates(index, { list: '2', a: '8' })).toEqual(['both'])
    expect(candidates(index, { list: '1', a: '7' })).toEqual(['both'])
    both.sink!.broad(false)
    expect(candidates(index, { list: '2', a: '8' })).toEqual([])
  })

  it('keeps a shape without filings broad for good', () => {
    const index = new ViewIndex<string>()
    const none = new Routing([])
    index.add('none', none)
    none.sink!.broad(false)
    expect(index.isBroad('none')).toBe(true)
    expect(candidates(index, { list: '5' })).toEqual(['none'])
  })

  it('judges every shape of a domain when a row key cannot be computed', () => {
    const index = new ViewIndex<string>()
    const failing: ViewFiling = {
      domain: 'list',
      rowKey: (row) => {
        if (row['list'] === 'bad') throw new Error('unreadable')
        return row['list'] ?? undefined
      },
    }
    index.add('a', new Routing([failing], [['1']]))
    index.add('b', new Routing([failing], [['2']]))
    expect(candidates(index, { list: 'bad' }).sort()).toEqual(['a', 'b'])
  })

  it('takes a removed shape out of every bucket, and hears nothing from it after', () => {
    const index = new ViewIndex<string>()
    const a = new Routing([byColumn('list')], [['1', '2']])
    const b = new Routing([byColumn('list')], [['2']])
    index.add('a', a)
    index.add('b', b)
    const sink = a.sink!
    index.remove('a')
    expect(a.disconnected).toBe(1)
    expect(candidates(index, { list: '1' })).toEqual([])
    expect(candidates(index, { list: '2' })).toEqual(['b'])
    sink.file(0, '9')
    sink.broad(true)
    expect(candidates(index, { list: '9' })).toEqual([])
    expect(index.filed).toBe(1)
    index.remove('b')
    expect(index.filed).toBe(0)
    expect(index.size).toBe(0)
  })

  it('looks at no more shapes per row among 10k than among 10', () => {
    for (const shapes of [10, 10_000]) {
      const index = new ViewIndex<number>()
      let rowKeyCalls = 0
      const filing: ViewFiling = {
        domain: 'list',
        rowKey: (row) => {
          rowKeyCalls++
          return row['list'] ?? undefined
        },
      }
      for (let i = 0; i < shapes; i++) index.add(i, new Routing([filing], [[String(i), String(i + 1)]]))
      expect(candidates(index, { list: '5' }).sort((x, y) => x - y)).toEqual([4, 5])
      expect(rowKeyCalls).toBe(1)
    }
  })
})
