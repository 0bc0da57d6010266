import { FetchError, MemoryShapeStorage } from '@sluice/client'
import { act, cleanup, render, screen, waitFor } from '@testing-library/react'
import { StrictMode, useOptimistic, useState, useTransition } from 'react'
import { renderToString } from 'react-dom/server'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { ShapeCache, ShapeCacheProvider, type UseShapeOptions, preloadShape, useShape } from '../src/index.js'
import { LONG_POLL_MS, type Todo, TODOS_DDL, sleep, useSluice, writeTx } from './harness.js'

const sluice = useSluice()
const caches: ShapeCache[] = []

afterEach(async () => {
  cleanup()
  await Promise.all(caches.splice(0).map((cache) => cache.close()))
})

function newCache(gcTimeMs = 5_000): ShapeCache {
  const cache = new ShapeCache({ gcTimeMs })
  caches.push(cache)
  return cache
}

let tables = 0
async function newTable(rows: ReadonlyArray<[number, string, boolean?]> = []): Promise<string> {
  const table = `todos_${++tables}`
  await sluice.cluster.query(TODOS_DDL(table))
  for (const [id, title, done] of rows) await sluice.cluster.query(`INSERT INTO ${table} VALUES ($1, $2, $3)`, [id, title, done ?? false])
  return table
}

const todos = (table: string, extra: Partial<UseShapeOptions['params']> = {}): UseShapeOptions => ({
  url: sluice.shapeUrl,
  params: { table, ...extra },
})

function TodoList({ table, label = 'list' }: { table: string; label?: string }) {
  const { data, isLoading, isError, error } = useShape<Todo>(todos(table))
  if (isError) return <p data-testid={label}>error {error instanceof FetchError ? error.status : String(error)}</p>
  if (isLoading) return <p data-testid={label}>loading</p>
  const sorted = [...data].sort((a, b) => a.id - b.id)
  return <p data-testid={label}>{sorted.map((t) => `${t.id}:${t.title}${t.done ? '+' : ''}`).join(',') || 'empty'}</p>
}

describe('useShape against a real server', () => {
  it('renders the initial rows, then every insert, update and delete made in Postgres', async () => {
    const table = await newTable([[1, 'milk'], [2, 'eggs']])
    render(
      <ShapeCacheProvider cache={newCache()}>
        <TodoList table={table} />
      </ShapeCacheProvider>,
    )
    expect(screen.getByTestId('list').textContent).toBe('loading')
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:milk,2:eggs'))
    await sluice.cluster.query(`INSERT INTO ${table} VALUES (3, 'bread', false)`)
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:milk,2:eggs,3:bread'))
    await sluice.cluster.query(`UPDATE ${table} SET done = true, title = 'oat milk' WHERE id = 1`)
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:oat milk+,2:eggs,3:bread'))
    await sluice.cluster.query(`DELETE FROM ${table} WHERE id = 2`)
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:oat milk+,3:bread'))
  })

  it('re-renders a selecting component only when its selection changes', async () => {
    const table = await newTable([[1, 'a', true], [2, 'b'], [3, 'c']])
    const renders: number[] = []
    function DoneCount() {
      const { data, isLoading } = useShape<Todo, number>(todos(table), (rows) => rows.filter((t) => t.done).length)
      renders.push(data)
      return <span data-testid="count">{isLoading ? 'loading' : data}</span>
    }
    render(
      <ShapeCacheProvider cache={newCache()}>
        <DoneCount />
        <TodoList table={table} />
      </ShapeCacheProvider>,
    )
    await waitFor(() => expect(screen.getByTestId('count').textContent).toBe('1'))
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:a+,2:b,3:c'))
    const settled = renders.length
    // Two syncs that leave the done count alone: the list shows them, the count does not render.
    await sluice.cluster.query(`UPDATE ${table} SET title = 'bee' WHERE id = 2`)
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:a+,2:bee,3:c'))
    await sluice.cluster.query(`INSERT INTO ${table} VALUES (4, 'd', false)`)
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:a+,2:bee,3:c,4:d'))
    expect(renders.length).toBe(settled)
    await sluice.cluster.query(`UPDATE ${table} SET done = true WHERE id = 4`)
    await waitFor(() => expect(screen.getByTestId('count').textContent).toBe('2'))
    expect(renders.slice(settled)).toEqual([2])
  })

  it('shares one stream between components asking for the same shape in different spellings', async () => {
    const table = await newTable([[1, 'a'], [2, 'b']])
    const cache = newCache()
    function Filtered({ label, options }: { label: string; options: UseShapeOptions }) {
      const { data, isLoading } = useShape<Todo>(options)
      return <p data-testid={label}>{isLoading ? 'loading' : data.map((t) => t.title).sort().join(',')}</p>
    }
    render(
      <ShapeCacheProvider cache={cache}>
        <Filtered label="one" options={todos(table, { where: 'id >= $1', params: ['1'], columns: ['id', 'title', 'done'] })} />
        <Filtered label="two" options={todos(table, { where: 'id >= $1', params: { 1: '1' }, columns: ['title', 'done', 'id'], replica: 'default' })} />
      </ShapeCacheProvider>,
    )
    await waitFor(() => expect(screen.getByTestId('one').textContent).toBe('a,b'))
    await waitFor(() => expect(screen.getByTestId('two').textContent).toBe('a,b'))
    await sluice.cluster.query(`INSERT INTO ${table} VALUES (3, 'c', false)`)
    await waitFor(() => expect(screen.getByTestId('two').textContent).toBe('a,b,c'))
    expect(screen.getByTestId('one').textContent).toBe('a,b,c')
    expect(cache.size).toBe(1)
    expect(sluice.requestsFor(table).filter((r) => r.url.searchParams.get('offset') === '-1')).toHaveLength(1)
    expect(sluice.maxInFlight(table)).toBe(1)
  })

  it('makes one stream under StrictMode (double render, mount-unmount-mount)', async () => {
    const table = await newTable([[1, 'strict']])
    // Counted at fetch too: a stream stopped before its first request reaches the server still calls fetch.
    const fetched: URL[] = []
    const cache = new ShapeCache({
      gcTimeMs: 0,
      defaults: {
        fetch: (input, init) => {
          fetched.push(new URL(String(input)))
          return fetch(input, init)
        },
      },
    })
    caches.push(cache)
    render(
      <StrictMode>
        <ShapeCacheProvider cache={cache}>
          <TodoList table={table} />
        </ShapeCacheProvider>
      </StrictMode>,
    )
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:strict'))
    await sluice.cluster.query(`INSERT INTO ${table} VALUES (2, 'mode', false)`)
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:strict,2:mode'))
    expect(cache.size).toBe(1)
    expect(fetched.filter((url) => url.searchParams.get('offset') === '-1')).toHaveLength(1)
    expect(sluice.requestsFor(table).filter((r) => r.url.searchParams.get('offset') === '-1')).toHaveLength(1)
    expect(sluice.maxInFlight(table)).toBe(1)
  })

  it('keeps the shape through its grace period, then stops it: the server sees no more requests', async () => {
    const table = await newTable([[1, 'a']])
    const cache = newCache(300)
    const tree = (
      <ShapeCacheProvider cache={cache}>
        <TodoList table={table} />
      </ShapeCacheProvider>
    )
    const first = render(tree)
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:a'))
    const shape = cache.get(todos(table))!
    first.unmount()
    // Back within the grace period: the same shape, its rows at once, no new initial request.
    render(tree)
    expect(screen.getByTestId('list').textContent).toBe('1:a')
    expect(cache.get(todos(table))).toBe(shape)
    cleanup()
    await waitFor(() => expect(cache.size).toBe(0))
    expect(shape.stream.isStopped).toBe(true)
    await waitFor(() => expect(sluice.inFlight(table)).toBe(0))
    const seen = sluice.requestsFor(table).length
    // A write would answer any live request still waiting; none may come for two long-poll rounds.
    await sluice.cluster.query(`INSERT INTO ${table} VALUES (2, 'b', false)`)
    await sleep(2 * LONG_POLL_MS)
    expect(sluice.requestsFor(table)).toHaveLength(seen)
    expect(sluice.requestsFor(table).filter((r) => r.url.searchParams.get('offset') === '-1')).toHaveLength(1)
  })

  it('reports a 4xx (a table that does not exist) as isError with the FetchError', async () => {
    render(
      <ShapeCacheProvider cache={newCache()}>
        <TodoList table="no_such_table" />
      </ShapeCacheProvider>,
    )
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('error 400'))
    const shapeRequests = sluice.requestsFor('no_such_table')
    expect(shapeRequests.length).toBeGreaterThan(0)
  })

  it('preloadShape resolves with an up-to-date shape that a later mount renders at once', async () => {
    const table = await newTable([[1, 'pre'], [2, 'loaded']])
    const cache = newCache()
    const shape = await preloadShape<Todo>(cache, todos(table))
    expect(shape.isUpToDate).toBe(true)
    expect(shape.rows.map((t) => t.title).sort()).toEqual(['loaded', 'pre'])
    render(
      <ShapeCacheProvider cache={cache}>
        <TodoList table={table} />
      </ShapeCacheProvider>,
    )
    expect(screen.getByTestId('list').textContent).toBe('1:pre,2:loaded')
    expect(sluice.requestsFor(table).filter((r) => r.url.searchParams.get('offset') === '-1')).toHaveLength(1)
  })

  it('throws a clear error with no cache, and takes options.cache without a provider', async () => {
    const table = await newTable([[1, 'direct']])
    const cache = newCache()
    function Direct() {
      const { data } = useShape<Todo>({ ...todos(table), cache })
      return <p data-testid="direct">{data.map((t) => t.title).join(',')}</p>
    }
    render(<Direct />)
    await waitFor(() => expect(screen.getByTestId('direct').textContent).toBe('direct'))
    cleanup()
    // React reports the render error on the window too; keep it from jsdom's console.
    const onError = (event: ErrorEvent): void => event.preventDefault()
    window.addEventListener('error', onError)
    try {
      expect(() => render(<TodoList table={table} />)).toThrow(/no ShapeCache. Wrap the tree in <ShapeCacheProvider/)
    } finally {
      window.removeEventListener('error', onError)
    }
  })

  it('drops an optimistic row when its transaction arrives through the stream (useOptimistic + waitForTxid)', async () => {
    const table = await newTable([[1, 'synced']])
    let add: ((id: number, title: string) => void) | undefined
    function Optimistic() {
      const { data, isLoading, waitForTxid } = useShape<Todo>(todos(table))
      const [shown, addOptimistic] = useOptimistic<ReadonlyArray<Todo & { pending?: boolean }>, Todo>(data, (rows, todo) => [...rows, { ...todo, pending: true }])
      const [, startTransition] = useTransition()
      add = (id, title) =>
        startTransition(async () => {
          addOptimistic({ id, title, done: false })
          const txid = await writeTx(sluice.cluster, `INSERT INTO ${table} VALUES ($1, $2, false)`, [id, title])
          await waitForTxid(txid)
        })
      if (isLoading) return <p data-testid="opt">loading</p>
      return <p data-testid="opt">{[...shown].sort((a, b) => a.id - b.id).map((t) => `${t.title}${t.pending === true ? '?' : ''}`).join(',')}</p>
    }
    render(
      <ShapeCacheProvider cache={newCache()}>
        <Optimistic />
      </ShapeCacheProvider>,
    )
    await waitFor(() => expect(screen.getByTestId('opt').textContent).toBe('synced'))
    act(() => add!(2, 'fresh'))
    expect(screen.getByTestId('opt').textContent).toBe('synced,fresh?')
    await waitFor(() => expect(screen.getByTestId('opt').textContent).toBe('synced,fresh'))
  })

  it('hydrates server markup without a mismatch, then syncs', async () => {
    const table = await newTable([[1, 'hydrated']])
    const cache = newCache()
    const tree = (
      <ShapeCacheProvider cache={cache}>
        <TodoList table={table} />
      </ShapeCacheProvider>
    )
    const container = document.createElement('div')
    container.innerHTML = renderToString(tree)
    expect(container.textContent).toBe('loading')
    document.body.append(container)
    const consoleError = vi.spyOn(console, 'error')
    try {
      render(tree, { container, hydrate: true })
      await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:hydrated'))
      expect(consoleError).not.toHaveBeenCalled()
    } finally {
      consoleError.mockRestore()
    }
  })

  it('switches shapes when the options change, and closes the one left behind after its grace period', async () => {
    const a = await newTable([[1, 'in a']])
    const b = await newTable([[1, 'in b']])
    const cache = newCache(100)
    let show: ((table: string) => void) | undefined
    function Switcher() {
      const [table, setTable] = useState(a)
      show = setTable
      return <TodoList table={table} />
    }
    render(
      <ShapeCacheProvider cache={cache}>
        <Switcher />
      </ShapeCacheProvider>,
    )
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:in a'))
    const shapeA = cache.get(todos(a))!
    act(() => show!(b))
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:in b'))
    await waitFor(() => expect(shapeA.stream.isStopped).toBe(true))
    expect(cache.get(todos(a))).toBeUndefined()
    expect(cache.size).toBe(1)
  })

  it('resumes from the cache storage: a fresh cache renders the saved rows and does not re-sync from -1', async () => {
    const table = await newTable([[1, 'kept']])
    const storage = new MemoryShapeStorage()
    const first = new ShapeCache({ storage })
    caches.push(first)
    await preloadShape(first, todos(table))
    await first.close()
    await sluice.cluster.query(`INSERT INTO ${table} VALUES (2, 'new', false)`)
    const second = new ShapeCache({ storage })
    caches.push(second)
    render(
      <ShapeCacheProvider cache={second}>
        <TodoList table={table} />
      </ShapeCacheProvider>,
    )
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('1:kept,2:new'))
    expect(sluice.requestsFor(table).filter((r) => r.url.searchParams.get('offset') === '-1')).toHaveLength(1)
  })
})
