/**
 * What one row costs a where clause over a large constant array: `tags && $1`,
 * `tags <@ $1` and `name LIKE ANY ($1)` with a parameter of N elements,
 * evaluated on rows of a few elements. Prints the median time per row.
 * A probe of the evaluator, not a benchmark of Sluice.
 *
 *   cd bench && node --import tsx where/array-probe.ts [elements, default 10000] [rows, default 200]
 */
import { compileWhereSync, loadWhereParser } from '../../packages/server/src/where/index.js'

const elements = Number(process.argv[2] ?? 10_000)
const rowCount = Number(process.argv[3] ?? 200)
await loadWhereParser()

const values = Array.from({ length: elements }, (_, i) => `v${i}`)
const array = `{${values.join(',')}}`
const columns = [
  { name: 'tags', type: 'text', dims: 1 },
  { name: 'name', type: 'text' },
]
const rows = Array.from({ length: rowCount }, (_, i) => ({ tags: `{x${i},y${i},v${i % 7}}`, name: `n${i}` }))
const cases: ReadonlyArray<readonly [string, string]> = [
  ['tags && $1', array],
  ['tags <@ $1', array],
  ['name LIKE ANY ($1)', `{${values.map((v) => `%${v}%`).join(',')}}`],
]
console.log(`a parameter of ${elements} elements, ${rowCount} rows, median per row`)
for (const [where, param] of cases) {
  const clause = compileWhereSync(where, { columns, params: [param], limits: { maxArrayElements: Math.max(elements, 10_000) } })
  const times: number[] = []
  for (const row of rows) {
    const started = performance.now()
    clause.test(row)
    times.push(performance.now() - started)
  }
  times.sort((a, b) => a - b)
  console.log(`${where.padEnd(22)} ${times[times.length >> 1]!.toFixed(3)} ms`)
}
