import { AbortedError, InvalidOptionsError } from '@sluice/client'
import { act, cleanup, render, screen, waitFor } from '@testing-library/react'
import { createServer } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { ShapeCache, ShapeCacheClosedError, ShapeCacheProvider, type UseShapeOptions, preloadShape, useShape } from '../src/index.js'
import { LONG_POLL_MS, type Todo, TODOS_DDL, sleep, useSluice } from './harness.js'

/** The cache's own life: closing it under mounted components, its defaults, and waits that give up. */

const sluice = useSluice()
const caches: ShapeCache[] = []

afterEach(async () => {
  cleanup()
  await Promise.all(caches.splice(0).map((cache) => cache.close()))
})

function newCache(options: ConstructorParameters<typeof ShapeCache>[0] = {}): ShapeCache {
  const cache = new ShapeCache(options)
  caches.push(cache)
  return cache
}

let tables = 0
async function newTable(): Promise<string> {
  const table = `cache_todos_${++tables}`
  await sluice.cluster.query(TODOS_DDL(table))
  await sluice.cluster.query(`INSERT INTO ${table} VALUES (1, 'milk', false)`)
  return table
}

function List({ options }: { options: UseShapeOptions }) {
  const { data, isLoading, isError, error } = useShape<Todo>(options)
  if (isError) return <p data-testid="list">error {(error as { code?: string }).code}</p>
  if (isLoading) return <p data-testid="list">loading</p>
  return <p data-testid="list">{data.map((t) => t.title).join(',')}</p>
}

describe('close() with components still mounted', () => {
  it('they render ShapeCacheClosedError without rows, nothing new starts, and the server hears no more', async () => {
    const table = await newTable()
    const cache = newCache()
    const options: UseShapeOptions = { url: sluice.shapeUrl, params: { table } }
    const { rerender } = render(
      <ShapeCacheProvider cache={cache}>
        <List options={options} />
      </ShapeCacheProvider>,
    )
    await waitFor(() => expect(screen.getByTestId('list').textContent).toBe('milk'))
    await act(() => cache.close())
    expect(screen.getByTestId('list').textContent).toBe('error cache_closed')
    const seen = sluice.requestsFor(table).length

    // Another component mounting the same key afterwards starts nothing either.
    rerender(
      <ShapeCacheProvider cache={cache}>
        <List options={options} />
        <List options={{ ...options, params: { table, where: 'id = 1' } }} />
      </ShapeCacheProvider>,
    )
    for (const node of screen.getAllByTestId('list')) expect(node.textContent).toBe('error cache_closed')
    expect(cache.size).toBe(0)
    await expect(preloadShape(cache, options)).rejects.toBeInstanceOf(ShapeCacheClosedError)
    await expect(cache.waitForTxid(options, 5)).rejects.toBeInstanceOf(ShapeCacheClosedError)
    await sluice.cluster.query(`INSERT INTO ${table} VALUES (2, 'eggs', false)`)
    await sleep(LONG_POLL_MS * 2)
    expect(sluice.requestsFor(table).length).toBe(seen)
  })
})

describe('the options of a shape over the cache defaults', () => {
  it('an own option left undefined does not hide its default, and the default is part of the shape key', async () => {
    const table = await newTable()
    const cache = newCache({ defaults: { log: 'changes_only' } })
    const bare: UseShapeOptions = { url: sluice.shapeUrl, params: { table } }
    expect(cache.keyOf({ ...bare, log: undefined })).toBe(cache.keyOf({ ...bare, log: 'changes_only' }))
    expect(cache.keyOf(bare)).not.toBe(cache.keyOf({ ...bare, log: 'full' }))
    const shape = await preloadShape<Todo>(cache, { ...bare, log: undefined })
    // changes_only: no snapshot rows, and that is what the server was asked for.
    expect(shape.rows).toEqual([])
    expect(sluice.requestsFor(table)[0]!.url.searchParams.get('log')).toBe('changes_only')
    const full = await preloadShape<Todo>(cache, { ...bare, log: 'full' })
    expect(full.rows.map((t) => t.title)).toEqual(['milk'])
  })

  it('a signal is refused: it would stop the stream for every component sharing it', () => {
    const cache = newCache()
    const options = { url: sluice.shapeUrl, params: { table: 'any' }, signal: new AbortController().signal } as UseShapeOptions
    expect(() => cache.keyOf(options)).toThrow(InvalidOptionsError)
    expect(() => cache.subscribe(options, () => {})).toThrow(InvalidOptionsError)
    expect(cache.size).toBe(0)
  })
})

describe('a preload that cannot finish', () => {
  it('gives up when its signal aborts (a server that never answers), and lets go of the shape', async () => {
    // A port that accepts nothing: the stream retries with backoff and is never up to date.
    const closed = createServer()
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve))
    const port = (closed.address() as { port: number }).port
    await new Promise<void>((resolve) => closed.close(() => resolve()))
    const cache = newCache({ gcTimeMs: 50 })
    const options: UseShapeOptions = { url: `http://127.0.0.1:${port}/v1/shape`, params: { table: 'nowhere' }, backoff: { initialDelayMs: 20, maxDelayMs: 50 } }
    await expect(preloadShape(cache, options, { signal: AbortSignal.timeout(300) })).rejects.toBeInstanceOf(AbortedError)
    await waitFor(() => expect(cache.size).toBe(0))
  })
})
