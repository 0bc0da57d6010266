import { once } from 'node:events'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import type { ShapeInvalidated } from '../../src/shapes/shape-manager.js'
import { caughtUp, compareShape, parseLsnText, shapeParams, sorted, usePipelines } from './harness.js'

/**
 * The three ways the pipeline notices DDL on a table with shapes
 * (docs/architecture.md §2), each on its own: the Relation message Postgres
 * sends again before the table's next change, the check of restored shapes
 * against their table, and the catalog watch.
 */

const cluster = usePostgres()
const dirs = useTempDir('pipeline-ddl')
const { start, stop } = usePipelines(cluster, dirs)

describe('DDL that changes a row’s key', () => {
  it('a new primary key under REPLICA IDENTITY FULL: the shapes go before the next change is routed', async () => {
    await cluster.query(`CREATE TABLE rel_pk (id int4 PRIMARY KEY, a text NOT NULL); INSERT INTO rel_pk VALUES (1, 'x')`)
    // No catalog watch: only the Relation message that precedes the insert can tell.
    const { pipeline } = await start({ catalogCheckMs: 0 })
    const events: Array<ShapeInvalidated & { routedBefore: bigint }> = []
    pipeline.shapes.on('invalidated', (e) => events.push({ ...e, routedBefore: pipeline.router.lastRoutedLsn }))
    const all = await pipeline.shapes.resolve(shapeParams('public', 'rel_pk'))
    const some = await pipeline.shapes.resolve(shapeParams('public', 'rel_pk', { where: "a <> 'z'" }))
    await Promise.all([all, some].map((s) => pipeline.shapes.ready(s.handle)))
    await cluster.query(`ALTER TABLE rel_pk DROP CONSTRAINT rel_pk_pkey, ADD PRIMARY KEY (id, a)`)
    // Under the old key this insert would update row 1; under the new one it is a second row.
    const writer = await cluster.connect()
    let insertAt: bigint
    try {
      await writer.query(`BEGIN; INSERT INTO rel_pk VALUES (1, 'y')`)
      // Below the insert's commit LSN, which the walsender sends only after it.
      const { rows } = await writer.query<{ lsn: string }>(`SELECT pg_current_wal_insert_lsn()::text AS lsn`)
      insertAt = parseLsnText(rows[0]!.lsn)
      await writer.query('COMMIT')
    } finally {
      await writer.end()
    }
    await caughtUp(pipeline, cluster)
    expect(events.map((e) => e.handle).sort()).toEqual([all.handle, some.handle].sort())
    for (const e of events) {
      expect(e.reason.kind).toBe('schema_change')
      expect(e.reason.detail).toContain('primary key')
      expect(e.routedBefore).toBeLessThan(insertAt)
    }
    const fresh = await pipeline.shapes.resolve(shapeParams('public', 'rel_pk'))
    expect(fresh.table.primaryKey).toEqual(['id', 'a'])
  })

  it('a shape whose table got a new primary key while the server was down is not restored', async () => {
    await cluster.query(`CREATE TABLE down_pk (id int4 PRIMARY KEY, a text NOT NULL); INSERT INTO down_pk VALUES (1, 'x')`)
    const { pipeline, dir } = await start({ catalogCheckMs: 0 })
    const before = await pipeline.shapes.resolve(shapeParams('public', 'down_pk'))
    await pipeline.shapes.ready(before.handle)
    await caughtUp(pipeline, cluster)
    await stop(pipeline)
    await cluster.query(`ALTER TABLE down_pk DROP CONSTRAINT down_pk_pkey, ADD PRIMARY KEY (a)`)
    const { pipeline: second } = await start({ catalogCheckMs: 0 }, dir)
    expect(second.shapes.status(before.handle)).not.toBe('active')
    expect(second.store.get(before.handle)).toBeUndefined()
    const after = await second.shapes.resolve(shapeParams('public', 'down_pk'))
    expect(after.handle).not.toBe(before.handle)
    expect(after.table.primaryKey).toEqual(['a'])
  })
})

describe('the catalog watch', () => {
  it('invalidates the shapes of a dropped table with no request and no change to tell it', async () => {
    await cluster.query(`CREATE TABLE watched (id int4 PRIMARY KEY); INSERT INTO watched VALUES (1)`)
    const { pipeline } = await start({ catalogCheckMs: 50 })
    const shape = await pipeline.shapes.resolve(shapeParams('public', 'watched'))
    await pipeline.shapes.ready(shape.handle)
    const invalidated = once(pipeline.shapes, 'invalidated') as Promise<[ShapeInvalidated]>
    await cluster.query(`DROP TABLE watched`)
    const [event] = await invalidated
    expect(event.handle).toBe(shape.handle)
    expect(event.reason.kind).toBe('table_dropped')
    expect(pipeline.shapes.status(shape.handle)).toBe('expired')
    expect(pipeline.store.get(shape.handle)).toBeUndefined()
  })
})

describe('a partitioned table', () => {
  it('has every partition made REPLICA IDENTITY FULL, so deletes and updates of non-key columns in a partition reach a shape filtering on them; a partition created later invalidates the shape', async () => {
    await cluster.query(`
      CREATE TABLE zoned (id int4, region text, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
      CREATE TABLE zoned_eu PARTITION OF zoned FOR VALUES IN ('eu');
      CREATE TABLE zoned_us PARTITION OF zoned FOR VALUES IN ('us') PARTITION BY LIST (id);
      CREATE TABLE zoned_us_rest PARTITION OF zoned_us DEFAULT;
      INSERT INTO zoned VALUES (1, 'eu', 'a'), (2, 'us', 'a'), (3, 'eu', 'b'), (4, 'us', 'a')`)
    const { pipeline } = await start({ catalogCheckMs: 50 })
    const where = "v = 'a'"
    const shape = await pipeline.shapes.resolve(shapeParams('public', 'zoned', { where }))
    await pipeline.shapes.ready(shape.handle)
    const { rows } = await cluster.query(`SELECT relname, relreplident FROM pg_class WHERE relname LIKE 'zoned%' AND relkind IN ('r', 'p') ORDER BY 1`)
    expect(rows.map((r) => [r['relname'], r['relreplident']])).toEqual([
      ['zoned', 'f'],
      ['zoned_eu', 'f'],
      ['zoned_us', 'f'],
      ['zoned_us_rest', 'f'],
    ])
    // Only the old row's v tells that 1 and 2 leave the shape.
    await cluster.query(`DELETE FROM zoned WHERE id = 1; UPDATE zoned SET v = 'z' WHERE id = 2; UPDATE zoned SET v = 'a' WHERE id = 3`)
    await caughtUp(pipeline, cluster)
    const c = await compareShape(pipeline, cluster, shape.handle, { where })
    expect(sorted(c.actual)).toEqual(sorted(c.expected))
    expect([...c.actual.keys()].sort()).toEqual(['"public"."zoned"/"3"/"eu"', '"public"."zoned"/"4"/"us"'])

    const invalidated = once(pipeline.shapes, 'invalidated') as Promise<[ShapeInvalidated]>
    await cluster.query(`CREATE TABLE zoned_asia PARTITION OF zoned FOR VALUES IN ('asia')`)
    const [event] = await invalidated
    expect(event.handle).toBe(shape.handle)
    // The next request makes the shape again, and the new partition FULL with it.
    const again = await pipeline.shapes.resolve(shapeParams('public', 'zoned', { where }))
    await pipeline.shapes.ready(again.handle)
    const asia = await cluster.query(`SELECT relreplident FROM pg_class WHERE relname = 'zoned_asia'`)
    expect(asia.rows[0]!['relreplident']).toBe('f')
  })
})
