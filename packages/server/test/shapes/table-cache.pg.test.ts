import type { ShapeDefinitionParams } from '@sluice/protocol'
import { usePostgres } from '@sluice/test-utils'
import { beforeAll, describe, expect, it } from 'vitest'
import { TableCache } from '../../src/shapes/table-cache.js'
import type { TableInfo } from '../../src/shapes/index.js'

const cluster = usePostgres()

const refusePublishing = { addTable: async (): Promise<never> => Promise.reject(new Error('not in this test')) }

function params(where: string): ShapeDefinitionParams {
  return { table: { schema: 'public', name: 'cached' }, where, params: [], replica: 'default', log: 'full' }
}

async function mustLoad(cache: TableCache): Promise<TableInfo> {
  const info = await cache.load('public', 'cached')
  if (info === undefined) throw new Error('public.cached did not load')
  return info
}

describe('TableCache: compiled definitions', () => {
  beforeAll(async () => {
    await cluster.query('DROP TABLE IF EXISTS cached; CREATE TABLE cached (id int PRIMARY KEY, v text)')
  })

  it('prune drops what no shape uses, even after the table was forgotten', async () => {
    const cache = new TableCache(cluster, refusePublishing, 0)
    const info = await mustLoad(cache)
    for (let i = 0; i < 50; i++) await cache.compiled(info, params(`id = ${i}`))
    expect(cache.compiledCount).toBe(50)

    cache.prune((definition) => definition.where === '("id" = 7)')
    expect(cache.compiledCount).toBe(1)

    // A shape invalidated by DDL forgets its table; what was compiled for it must not outlive that.
    cache.forget(info)
    expect(cache.compiledCount).toBe(0)
  })

  it('compiling against a new version of the table drops those of the old one', async () => {
    const cache = new TableCache(cluster, refusePublishing, 0)
    const before = await mustLoad(cache)
    for (let i = 0; i < 10; i++) await cache.compiled(before, params(`id = ${i}`))
    await cluster.query('ALTER TABLE cached ADD COLUMN w int')
    const after = await mustLoad(cache)
    expect(after).not.toBe(before)
    await cache.compiled(after, params('id = 1'))
    expect(cache.compiledCount).toBe(1)
    // The same request again is answered from what was remembered (the same object).
    const again = await cache.compiled(after, params('id = 1'))
    expect(await cache.compiled(after, params('id = 1'))).toBe(again)
  })
})
