// @vitest-environment node
import { renderToString } from 'react-dom/server'
import { afterAll, describe, expect, it } from 'vitest'
import { ShapeCache, ShapeCacheProvider, useShape } from '../src/index.js'
import { TODOS_DDL, type Todo, useSluice } from './harness.js'

const sluice = useSluice()
const cache = new ShapeCache()
afterAll(() => cache.close())

function Count({ table }: { table: string }) {
  const { data, isLoading, shape } = useShape<Todo, number>({ url: sluice.shapeUrl, params: { table } }, (rows) => rows.length)
  return <p>{isLoading ? `loading ${data} ${shape === undefined ? 'no shape' : 'shape'}` : `${data} rows`}</p>
}

describe('server rendering', () => {
  it('renders the loading state and sends no request, with no DOM in sight', async () => {
    expect(typeof document).toBe('undefined')
    await sluice.cluster.query(TODOS_DDL('ssr_todos'))
    await sluice.cluster.query(`INSERT INTO ssr_todos VALUES (1, 'a', false)`)
    const html = renderToString(
      <ShapeCacheProvider cache={cache}>
        <Count table="ssr_todos" />
      </ShapeCacheProvider>,
    )
    expect(html).toBe('<p>loading 0 no shape</p>')
    // Anything started would have made its first request by now; a later health check proves the server answers.
    await fetch(sluice.shapeUrl.replace('/v1/shape', '/v1/health'))
    expect(sluice.requestsFor('ssr_todos')).toEqual([])
    expect(sluice.requests.map((r) => r.url.pathname)).toEqual(['/v1/health'])
    expect(cache.size).toBe(0)
  })
})
