import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import { beforeEach, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { caughtUp, compareShape, shapeParams, sorted, usePipelines } from './harness.js'
import { readLog } from './log-replay.js'

/*
 * Streamed transactions (Postgres streams one past logical_decoding_work_mem,
 * here 64kB, before it commits) are routed as they arrive and their lines
 * kept aside until the commit (src/shapes/routed-ahead.ts). These check that
 * nothing of such a transaction shows before its commit, that all of it shows
 * after, and that the cases the prepared lines cannot serve (a shape joining
 * the table meanwhile, a rolled-back subtransaction, a truncate) are routed
 * from the buffered copy at the commit, correctly.
 */

const cluster = usePostgres()
const dirs = useTempDir('routed-ahead')
const pipelines = usePipelines(cluster, dirs)
const STREAMING = { logical_decoding_work_mem: '64kB' }
/** Far past 64kB of decoded changes: Postgres streams several segments before the commit. */
const ROWS = 20_000

beforeEach(async () => {
  await cluster.query('DROP TABLE IF EXISTS t')
  await cluster.query('CREATE TABLE t (id int8 PRIMARY KEY, k int4 NOT NULL, payload text)')
})

const insert = (from: number, to: number) => `INSERT INTO t SELECT i, i % 10, 'row ' || i FROM generate_series(${from}, ${to}) i`

async function until(what: string, ok: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await sleep(10)
  }
}

/** The open transaction's changes have arrived and are being routed ahead: the replication stream is past them. */
async function routingAhead(pipeline: Pipeline): Promise<void> {
  await until('a streamed transaction is routed ahead', () => pipeline.ahead.routing === 1)
}

async function ready(pipeline: Pipeline, where?: string): Promise<string> {
  const shape = await pipeline.shapes.resolve(shapeParams('public', 't', where === undefined ? {} : { where }))
  await pipeline.shapes.ready(shape.handle)
  return shape.handle
}

describe('a streamed transaction routed while it arrives', () => {
  it('is invisible to readers until it commits, then complete, with one LSN and `last` on each shape\'s final line', { timeout: 120_000 }, async () => {
    const { pipeline, dir } = await pipelines.start({ replicationSettings: STREAMING })
    const every = await ready(pipeline)
    const three = await ready(pipeline, 'k = 3')
    const log = pipeline.shapes.log(every)!
    const entriesBefore = log.head().entryCount

    const tx = await cluster.connect()
    try {
      await tx.query('BEGIN')
      await tx.query(insert(1, ROWS))
      await routingAhead(pipeline)
      // A later small transaction passes it and is published on its own.
      await cluster.query(`INSERT INTO t VALUES (${ROWS + 1}, 3, 'other')`)
      await caughtUp(pipeline, cluster)
      expect(log.head().entryCount).toBe(entriesBefore + 1)
      expect(readLog(log).slice(-1)[0]!.message.value).toMatchObject({ id: String(ROWS + 1) })
      await tx.query('COMMIT')
    } finally {
      await tx.end()
    }
    await caughtUp(pipeline, cluster)
    expect(pipeline.router.transactionsRoutedAhead).toBe(1)
    expect(readdirSync(join(dir, 'spill', 'routed'))).toEqual([])

    const lines = readLog(log).slice(-ROWS)
    expect(new Set(lines.map((l) => l.message.headers['lsn'])).size).toBe(1)
    expect(lines.every((l, i) => l.message.headers['op_position'] === i * 2)).toBe(true)
    expect(lines.map((l, i) => (l.message.headers['last'] === true ? i : -1)).filter((i) => i >= 0)).toEqual([ROWS - 1])
    for (const [handle, where] of [[every, undefined], [three, 'k = 3']] as const) {
      const c = await compareShape(pipeline, cluster, handle, where === undefined ? {} : { where })
      expect(sorted(c.actual)).toEqual(sorted(c.expected))
    }
  })

  it('leaves nothing behind when it rolls back', { timeout: 120_000 }, async () => {
    const { pipeline, dir } = await pipelines.start({ replicationSettings: STREAMING })
    const every = await ready(pipeline)
    const entries = pipeline.shapes.log(every)!.head().entryCount
    const tx = await cluster.connect()
    try {
      await tx.query('BEGIN')
      await tx.query(insert(1, ROWS))
      await routingAhead(pipeline)
      await tx.query('ROLLBACK')
    } finally {
      await tx.end()
    }
    await until('the abort arrived', () => pipeline.ahead.routing === 0)
    await caughtUp(pipeline, cluster)
    expect(pipeline.shapes.log(every)!.head().entryCount).toBe(entries)
    expect(readdirSync(join(dir, 'spill', 'routed'))).toEqual([])
  })

  it('is routed from its buffered copy when a shape joins its table before the commit, and that shape gets all of it', { timeout: 120_000 }, async () => {
    const { pipeline } = await pipelines.start({ replicationSettings: STREAMING })
    const every = await ready(pipeline)
    const tx = await cluster.connect()
    let late: string
    try {
      await tx.query('BEGIN')
      await tx.query(insert(1, ROWS))
      await routingAhead(pipeline)
      // Its snapshot cannot see the open transaction, so it needs the rows routed before it joined.
      late = await ready(pipeline, 'k = 7')
      expect(pipeline.ahead.routing).toBe(0)
      await tx.query(insert(ROWS + 1, ROWS + 100))
      await tx.query('COMMIT')
    } finally {
      await tx.end()
    }
    await caughtUp(pipeline, cluster)
    expect(pipeline.router.transactionsRoutedAhead).toBe(0)
    for (const [handle, where] of [[every, undefined], [late, 'k = 7']] as const) {
      const c = await compareShape(pipeline, cluster, handle, where === undefined ? {} : { where })
      expect(c.actual.size).toBe(where === undefined ? ROWS + 100 : (ROWS + 100) / 10)
      expect(sorted(c.actual)).toEqual(sorted(c.expected))
    }
  })

  it('is routed from its buffered copy when a subtransaction rolls back, without that subtransaction\'s rows', { timeout: 120_000 }, async () => {
    const { pipeline } = await pipelines.start({ replicationSettings: STREAMING })
    const every = await ready(pipeline)
    const tx = await cluster.connect()
    try {
      await tx.query('BEGIN')
      await tx.query(insert(1, ROWS))
      await tx.query('SAVEPOINT s')
      await tx.query(insert(ROWS + 1, 2 * ROWS))
      await tx.query('ROLLBACK TO SAVEPOINT s')
      await tx.query(insert(2 * ROWS + 1, 2 * ROWS + 50))
      await tx.query('COMMIT')
    } finally {
      await tx.end()
    }
    await caughtUp(pipeline, cluster)
    const c = await compareShape(pipeline, cluster, every)
    expect(c.actual.size).toBe(ROWS + 50)
    expect(sorted(c.actual)).toEqual(sorted(c.expected))
  })

  it('is routed from its buffered copy when it truncates the table, which invalidates the shape at the commit', { timeout: 120_000 }, async () => {
    const { pipeline } = await pipelines.start({ replicationSettings: STREAMING })
    const every = await ready(pipeline)
    const tx = await cluster.connect()
    try {
      await tx.query('BEGIN')
      await tx.query(insert(1, ROWS))
      await routingAhead(pipeline)
      await tx.query('TRUNCATE t')
      await tx.query(insert(1, 10))
      expect(pipeline.shapes.log(every)).toBeDefined()
      await tx.query('COMMIT')
    } finally {
      await tx.end()
    }
    await caughtUp(pipeline, cluster)
    expect(pipeline.router.transactionsRoutedAhead).toBe(0)
    expect(pipeline.router.has(every)).toBe(false)
  })
})
