/**
 * What the catalog watch (packages/server/src/shapes/catalog-watch.ts) costs Postgres each second: its one
 * query over every table with shapes (`loadTableStates`), side by side in one run with the alternative of
 * asking per table with the loader requests use (`loadTable`, one query each, run one after another).
 * Measures: wall time from Node on one connection, median of `ROUNDS` rounds per table count, over tables
 * of six columns with a two-column primary key. Does not measure: a busy database, catalog bloat, the
 * comparison in JavaScript afterwards, or any other machine.
 *
 *   node --import tsx --conditions=sluice-source catalog/run.ts      (from bench/; QUICK=1 for a smoke run)
 */
import { loadTable, loadTableStates } from '@sluice/server'
import { startPostgres } from '@sluice/test-utils'
import pg from 'pg'

const QUICK = process.env['QUICK'] === '1'
const COUNTS = QUICK ? [1, 10] : [1, 10, 100, 1000]
const ROUNDS = QUICK ? 3 : 21

const cluster = await startPostgres()
const db = new pg.Pool({ connectionString: cluster.url, max: 1 })
try {
  const most = Math.max(...COUNTS)
  await db.query(`DO $$ BEGIN FOR i IN 1..${most} LOOP
    EXECUTE format('CREATE TABLE bench_t%s (id int8, k text, a int4, b text, c timestamptz, d jsonb, PRIMARY KEY (id, k))', i);
  END LOOP; END $$`)
  const { rows } = await db.query<{ oid: string; name: string }>(
    `SELECT oid::int8::text AS oid, relname AS name FROM pg_class WHERE relname LIKE 'bench_t%' AND relkind = 'r' ORDER BY oid`,
  )
  const tables = rows.map((r) => ({ oid: Number(r.oid), schema: 'public', name: r.name }))
  console.log('| tables | one query (loadTableStates), median ms | a query per table (loadTable), median ms | ratio |')
  console.log('|---:|---:|---:|---:|')
  for (const n of COUNTS) {
    const some = tables.slice(0, n)
    const oids = some.map((t) => t.oid)
    const one: number[] = []
    const each: number[] = []
    for (let round = 0; round < ROUNDS; round++) {
      // Alternated within a round, so load on the machine falls on both alike.
      let t = performance.now()
      const states = await loadTableStates(db, oids)
      one.push(performance.now() - t)
      if (states.size !== n) throw new Error(`expected ${n} states, got ${states.size}`)
      t = performance.now()
      for (const table of some) await loadTable(db, table)
      each.push(performance.now() - t)
    }
    const a = median(one)
    const b = median(each)
    console.log(`| ${n} | ${a.toFixed(2)} | ${b.toFixed(2)} | ${(b / a).toFixed(1)}x |`)
  }
} finally {
  await db.end()
  await cluster.stop()
}

function median(values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y)
  return sorted[Math.floor(sorted.length / 2)]!
}
