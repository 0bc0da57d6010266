/**
 * What one row costs a shape whose where clause holds a hostile LIKE pattern:
 * compiles `t LIKE '<pattern>'` as a shape would, evaluates it on rows of
 * long repetitive text, and prints the median time of one evaluation per
 * pattern. A probe of the evaluator, not a benchmark of Sluice.
 *
 *   cd bench && node --import tsx where/like-probe.ts [text length, default 100000] [runs, default 5]
 */
import { compileWhereSync, loadWhereParser } from '../../packages/server/src/where/index.js'

const length = Number(process.argv[2] ?? 100_000)
const runs = Number(process.argv[3] ?? 5)
await loadWhereParser()

const patterns: ReadonlyArray<readonly [string, string]> = [
  ['%_a_a… (1,000 pairs) b%', `%${'_a'.repeat(1_000)}b%`],
  ['%_a_a… (3,000 pairs) b%', `%${'_a'.repeat(3_000)}b%`],
  ["%aaa… (3,000) _b%", `%${'a'.repeat(3_000)}_b%`],
  ['%abc_def%', '%abc_def%'],
  ['%needle%', '%needle%'],
]
const text = 'a'.repeat(length)
console.log(`text of ${length} characters, median of ${runs} evaluations`)
for (const [name, pattern] of patterns) {
  const clause = compileWhereSync(`t LIKE '${pattern}'`, { columns: [{ name: 't', type: 'text' }] })
  const times: number[] = []
  for (let i = 0; i < runs; i++) {
    const started = performance.now()
    clause.test({ t: text })
    times.push(performance.now() - started)
  }
  times.sort((a, b) => a - b)
  console.log(`${name.padEnd(30)} ${times[times.length >> 1]!.toFixed(2)} ms`)
}
