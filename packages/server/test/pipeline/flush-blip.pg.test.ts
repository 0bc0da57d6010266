/**
 * Transient sync failures: one fdatasync fails (an I/O error the disk
 * recovers from), the store rolls back what it had not published and retries
 * a moment later, and the stream is replayed from the durable watermark.
 * Whatever the retry publishes before the replay, the shape ends equal to
 * Postgres: under bursts of commits, and with WAL no shape reads (whose idle
 * position is promised to the store a moment after its keepalive) right
 * after each failed commit, and while a large transaction is routed from its
 * buffer (its routing goes on across the failure: nothing it routed after the
 * rollback may be promised or kept, or the replay skips it as durable, or
 * writes only part of it again). SOAK=1: more rounds.
 */
import { type FsPort, nodeFs } from '@sluice/storage'
import { createFaultyFs, usePostgres, useTempDir } from '@sluice/test-utils'
import { afterEach, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { caughtUp, compareShape, shapeParams, sorted, startPipeline } from './harness.js'

const cluster = usePostgres()
const dirs = useTempDir('flush-blip')
const ROUNDS = process.env['SOAK'] === '1' ? 200 : 10
const running: Pipeline[] = []
afterEach(async () => {
  for (const p of running.splice(0)) await p.stop()
})

describe('a single failed sync', () => {
  it('loses and duplicates nothing, under bursts and beside idle WAL', { timeout: 600_000 }, async () => {
    await cluster.query(`CREATE TABLE blip (id int4 PRIMARY KEY, v text); CREATE TABLE blip_other (id serial PRIMARY KEY, v text)`)
    const faulty = createFaultyFs<FsPort>(nodeFs)
    const pipeline = await startPipeline(cluster, await dirs.make('store'), { storageFs: faulty.fs })
    running.push(pipeline)
    const shape = await pipeline.shapes.resolve(shapeParams('public', 'blip'))
    await pipeline.shapes.ready(shape.handle)
    let id = 0
    for (let round = 0; round < ROUNDS; round++) {
      faulty.rules.failNext('fdatasync', { code: 'EIO', times: 1 })
      await Promise.all(Array.from({ length: 10 }, () => cluster.query(`INSERT INTO blip VALUES ($1, 'burst')`, [++id])))
      await new Promise((r) => setTimeout(r, 50))
      faulty.rules.failNext('fdatasync', { code: 'EIO', times: 1 })
      await cluster.query(`INSERT INTO blip VALUES ($1, 'alone')`, [++id])
      for (let i = 0; i < 5; i++) {
        await cluster.query(`INSERT INTO blip_other (v) VALUES ('x')`)
        await new Promise((r) => setTimeout(r, 20))
      }
      await new Promise((r) => setTimeout(r, 400))
    }
    faulty.rules.clear()
    await cluster.query(`INSERT INTO blip VALUES ($1, 'last')`, [++id])
    await caughtUp(pipeline, cluster)
    const failures = pipeline.health.commitFailures
    console.log(`flush blips: ${ROUNDS} rounds, ${failures} failed commits`)
    expect(failures).toBeGreaterThan(0)
    const c = await compareShape(pipeline, cluster, shape.handle)
    expect(c.actual.size).toBe(id)
    expect(sorted(c.actual)).toEqual(sorted(c.expected))
  })

  it('loses and duplicates nothing when syncs fail while a large transaction is routed from its buffer', { timeout: 600_000 }, async () => {
    await cluster.query(`CREATE TABLE blip_big (id int4 PRIMARY KEY, v text)`)
    const faulty = createFaultyFs<FsPort>(nodeFs)
    // Transactions past 256 KiB are streamed by Postgres and routed from the spill buffer at their commit, batch by batch.
    const pipeline = await startPipeline(cluster, await dirs.make('store'), { storageFs: faulty.fs, maxTransactionBytes: 256 * 1024 })
    running.push(pipeline)
    const shape = await pipeline.shapes.resolve(shapeParams('public', 'blip_big'))
    await pipeline.shapes.ready(shape.handle)
    const BIG_ROUNDS = process.env['SOAK'] === '1' ? 30 : 6
    let id = 0
    for (let round = 0; round < BIG_ROUNDS; round++) {
      const from = id + 1
      id += 60_000
      await cluster.query(`INSERT INTO blip_big SELECT i, repeat('v', 40) FROM generate_series(${from}, ${id}) i`)
      // One sync fails at a different moment of the transaction's routing in each round.
      await new Promise((r) => setTimeout(r, 100 + round * 60))
      faulty.rules.failNext('fdatasync', { code: 'EIO', times: 1 })
      await cluster.query(`INSERT INTO blip_big VALUES ($1, 'small')`, [++id])
      await new Promise((r) => setTimeout(r, 1_500))
    }
    faulty.rules.clear()
    await cluster.query(`INSERT INTO blip_big VALUES ($1, 'last')`, [++id])
    await caughtUp(pipeline, cluster, 240_000)
    const failures = pipeline.health.commitFailures
    console.log(`flush blips: ${BIG_ROUNDS} large transactions, ${failures} failed commits`)
    expect(failures).toBeGreaterThan(0)
    const c = await compareShape(pipeline, cluster, shape.handle)
    expect(c.actual.size).toBe(id)
    expect(sorted(c.actual)).toEqual(sorted(c.expected))
  })
})
