/**
 * Initial sync of one table from a real Sluice server on a real Postgres: our
 * Shape against the official @electric-sql/client Shape, alternating, each a
 * fresh client on the same (already snapshotted) shape, so the figure is client
 * work + HTTP, not the server's snapshot. It does not measure live updates.
 *
 *   node --import tsx --conditions=sluice-source packages/client/bench/initial-sync.ts [rows=20000] [reps=5]
 */
import type { AddressInfo } from 'node:net'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Shape as ElectricShape, ShapeStream as ElectricStream } from '@electric-sql/client'
import { Pipeline, buildApp } from '@sluice/server'
import { startPostgres } from '@sluice/test-utils'
import { Shape, ShapeStream } from '../src/index.js'

const rows = Number(process.argv[2] ?? 20_000)
const reps = Number(process.argv[3] ?? 5)
const cluster = await startPostgres()
const dir = await mkdtemp(join(tmpdir(), 'client-bench-'))
const pipeline = await Pipeline.start({ connectionString: cluster.url, storageDir: dir })
const app = buildApp({ shapes: pipeline.shapeService, http: {} })
await app.listen({ port: 0, host: '127.0.0.1' })
const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/v1/shape`
try {
  await cluster.query(`CREATE TABLE bench (id int8 PRIMARY KEY, title text NOT NULL, n int4, f float8, done bool, tags text[], doc jsonb)`)
  await cluster.query(
    `INSERT INTO bench SELECT i, 'title ' || i, i, i / 3.0, i % 2 = 0, ARRAY['a' || i, 'b'], jsonb_build_object('i', i) FROM generate_series(1, $1) i`,
    [rows],
  )
  const ours = async (): Promise<number> => {
    const shape = new Shape(new ShapeStream({ url, params: { table: 'bench' } }))
    await shape.ready()
    const n = shape.rows.length
    await shape.stop()
    return n
  }
  const official = async (): Promise<number> => {
    const controller = new AbortController()
    const shape = new ElectricShape(new ElectricStream({ url, params: { table: 'bench' }, signal: controller.signal }) as unknown as ConstructorParameters<typeof ElectricShape>[0])
    const n = (await shape.rows).length
    controller.abort()
    return n
  }
  await ours() // the server takes its snapshot here, outside the timings
  const times: Record<string, number[]> = { '@sluice/client': [], '@electric-sql/client': [] }
  for (let rep = 0; rep < reps; rep++) {
    for (const [name, run] of [['@sluice/client', ours], ['@electric-sql/client', official]] as const) {
      const start = performance.now()
      const n = await run()
      times[name]!.push(performance.now() - start)
      if (n !== rows) throw new Error(`${name} synced ${n} rows, expected ${rows}`)
    }
  }
  for (const [name, list] of Object.entries(times)) {
    const sorted = [...list].sort((a, b) => a - b)
    const median = sorted[Math.floor(sorted.length / 2)]!
    console.log(`${name.padEnd(22)} median ${median.toFixed(0).padStart(6)} ms  ${(rows / (median / 1000)).toFixed(0).padStart(8)} rows/s  (runs: ${list.map((t) => t.toFixed(0)).join(', ')})`)
  }
} finally {
  await app.close()
  await pipeline.stop()
  await cluster.stop()
  await rm(dir, { recursive: true, force: true })
}
