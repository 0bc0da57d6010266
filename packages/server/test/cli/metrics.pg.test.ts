// /metrics against a real pipeline and a real Postgres.
import { usePostgres, useTempDir } from '@sluice/test-utils'
import Fastify from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import { metricsRoute } from '../../src/http/metrics-route.js'
import { ServerMetrics } from '../../src/metrics.js'
import type { Pipeline } from '../../src/pipeline.js'
import { caughtUp, shapeParams, startPipeline } from '../pipeline/harness.js'

const cluster = usePostgres()
const dirs = useTempDir('metrics')
const cleanup: Array<() => Promise<unknown>> = []
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c()
})

/** Sample values by metric name (and label string), from the Prometheus text format. */
function parse(text: string): Map<string, number> {
  const values = new Map<string, number>()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const at = line.lastIndexOf(' ')
    values.set(line.slice(0, at), Number(line.slice(at + 1)))
  }
  return values
}

async function setup(): Promise<{ pipeline: Pipeline; metrics: ServerMetrics; scrape: () => Promise<Map<string, number>>; raw: () => Promise<{ type: string; body: string }> }> {
  const pipeline = await startPipeline(cluster, await dirs.make('store'))
  cleanup.push(() => pipeline.stop())
  const metrics = new ServerMetrics({ pipeline, connectionString: cluster.url, slotName: 'sluice_slot', sampleMaxAgeMs: 0 })
  cleanup.push(() => metrics.close())
  const app = Fastify()
  app.register(metricsRoute, { metrics })
  cleanup.push(() => app.close())
  const raw = async (): Promise<{ type: string; body: string }> => {
    const res = await app.inject({ method: 'GET', url: '/metrics' })
    expect(res.statusCode).toBe(200)
    return { type: String(res.headers['content-type']), body: res.body }
  }
  return { pipeline, metrics, raw, scrape: async () => parse((await raw()).body) }
}

describe('/metrics', () => {
  it('reports replication, shapes, flushes, slot WAL and the HTTP counters from a live pipeline', async () => {
    await cluster.query('CREATE TABLE IF NOT EXISTS metric_items (id int PRIMARY KEY, v text)')
    const { pipeline, metrics, raw, scrape } = await setup()
    const { type, body } = await raw()
    expect(type).toMatch(/^text\/plain; version=0\.0\.4/)
    for (const name of [
      'sluice_replication_lag_bytes',
      'sluice_replication_lag_seconds',
      'sluice_transactions_routed_total',
      'sluice_transactions_routed_ahead_total',
      'sluice_shapes',
      'sluice_live_waiters',
      'sluice_http_bytes_served_total',
      'sluice_storage_flush_duration_seconds',
      'sluice_slot_retained_wal_bytes',
    ]) {
      expect(body).toContain(`# TYPE ${name} `)
    }
    // Node's process metrics come along, from our registry (not the global one).
    expect(body).toContain('process_cpu_user_seconds_total')

    const before = await scrape()
    expect(before.get('sluice_shapes')).toBe(0)
    expect(before.get('sluice_metrics_postgres_up')).toBe(1)
    expect(before.get('sluice_slot_retained_wal_bytes')).toBeGreaterThanOrEqual(0)

    const shape = await pipeline.shapes.resolve(shapeParams('public', 'metric_items'))
    await pipeline.shapes.ready(shape.handle)
    for (let i = 0; i < 5; i++) await cluster.query('INSERT INTO metric_items VALUES ($1, $2)', [i, `v${i}`])
    await caughtUp(pipeline, cluster)

    metrics.addBytesServed(1234, 'sendfile')
    metrics.addBytesServed(66, 'pread')
    metrics.setLiveWaiters(7)
    const durableBefore = Number(pipeline.store.durableLsn)
    const after = await scrape()
    expect(after.get('sluice_shapes')).toBe(1)
    expect(after.get('sluice_shapes_creating')).toBe(0)
    expect(after.get('sluice_shapes_ready_total')).toBe(1)
    // Five inserts and the harness's marker transaction(s).
    expect(after.get('sluice_transactions_routed_total')! - before.get('sluice_transactions_routed_total')!).toBeGreaterThanOrEqual(6)
    expect(after.get('sluice_transactions_routed_total')).toBe(pipeline.router.transactionsRouted)
    expect(after.get('sluice_http_bytes_served_total')).toBe(1300)
    // By path; this ServerMetrics was given no body path, so pread is the one in use.
    expect(after.get('sluice_http_body_bytes_total{path="sendfile"}')).toBe(1234)
    expect(after.get('sluice_http_body_bytes_total{path="pread"}')).toBe(66)
    expect(after.get('sluice_http_body_path{path="pread"}')).toBe(1)
    expect(after.get('sluice_http_body_path{path="sendfile"}')).toBe(0)
    expect(after.get('sluice_live_waiters')).toBe(7)
    expect(after.get('sluice_storage_flush_duration_seconds_count')).toBeGreaterThan(0)
    expect(after.get('sluice_storage_flush_duration_seconds_sum')).toBeGreaterThan(0)
    // Idle WAL (nothing subscribed to it) may move the watermark on while the scrape runs.
    expect(after.get('sluice_durable_lsn')).toBeGreaterThanOrEqual(durableBefore)
    expect(after.get('sluice_durable_lsn')).toBeLessThanOrEqual(Number(pipeline.store.durableLsn))
    expect(after.get('sluice_storage_tail_bytes')).toBe(pipeline.store.stats().tailBytes)
    expect(after.get('sluice_storage_journal_segments')).toBeGreaterThanOrEqual(1)
    expect(after.get('sluice_storage_paused')).toBe(0)
    expect(after.get('sluice_storage_pauses')).toBe(0)
    expect(after.get('sluice_compactions_total')).toBe(0)
    expect(after.get('sluice_compaction_running')).toBe(0)
    expect(after.get('sluice_healthy')).toBe(1)
    expect(after.get('sluice_health_reason{code="storage_disk_full"}')).toBe(0)
    expect(after.get('sluice_storage_commit_failures_total')).toBe(0)
    expect(after.get('sluice_replication_connected')).toBe(1)
    // Caught up: Postgres's current position is at most a few records past what is durable.
    const lag = after.get('sluice_replication_lag_bytes')!
    expect(lag).toBeGreaterThanOrEqual(0)
    expect(lag).toBeLessThan(64 * 1024)
    expect(after.get('sluice_replication_lag_seconds')).toBeGreaterThanOrEqual(0)

    // Lag in bytes grows with WAL Sluice has not made durable: pause the stream and write.
    pipeline.replication.pause()
    await cluster.query("INSERT INTO metric_items SELECT g, repeat('x', 100) FROM generate_series(100, 2100) g")
    const paused = await scrape()
    expect(paused.get('sluice_replication_lag_bytes')).toBeGreaterThan(100_000)
    expect(paused.get('sluice_slot_retained_wal_bytes')).toBeGreaterThan(100_000)
    // A paused stream is what /v1/health reports too.
    expect(paused.get('sluice_healthy')).toBe(0)
    expect(paused.get('sluice_health_reason{code="replication_paused"}')).toBe(1)
    pipeline.replication.resume()
    await caughtUp(pipeline, cluster)
    expect((await scrape()).get('sluice_replication_lag_bytes')).toBeLessThan(64 * 1024)

    // Invalidation is counted by reason.
    await cluster.query('TRUNCATE metric_items')
    const deadline = Date.now() + 30_000
    let invalidated: number | undefined
    while (Date.now() < deadline) {
      const now = await scrape()
      invalidated = [...now.entries()].find(([k]) => k.startsWith('sluice_shapes_invalidated_total{'))?.[1]
      if (invalidated === 1) break
      await new Promise((r) => setTimeout(r, 50))
    }
    expect(invalidated).toBe(1)
  })

  it('caches the Postgres sample and survives Postgres being unreachable', async () => {
    const { pipeline } = await setup()
    const cached = new ServerMetrics({ pipeline, connectionString: 'postgres://nobody@127.0.0.1:1/none', slotName: 'sluice_slot', defaultMetrics: false })
    cleanup.push(() => cached.close())
    const values = parse(await cached.metrics())
    expect(values.get('sluice_metrics_postgres_up')).toBe(0)
    expect(values.has('sluice_replication_lag_bytes')).toBe(true)
  })
})
