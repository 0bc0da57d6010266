import { describe, expect, it } from 'vitest'
import { useSluice } from '../harness.js'
import { ALL_CLIENTS, runScenario } from './scenario-runner.js'
import { PLAIN_SCENARIOS, SUBQUERY_SCENARIOS } from './scenarios.js'

/**
 * The scenario runner against a real Sluice server on real Postgres:
 * `@sluice/client`'s Shape (long-poll and SSE) and TanStack DB's Electric
 * collection (npm, in its eager, progressive and on-demand modes) must each
 * hold exactly the rows Postgres selects after the setup and after every
 * step, and fresh clients must agree at the end. Plain where clauses first,
 * then shapes with subqueries (docs/protocol.md §3.6).
 */
const sluice = useSluice()
const CLIENTS = ALL_CLIENTS

const SETS = [
  { title: 'every client follows a shape to the rows Postgres selects', scenarios: PLAIN_SCENARIOS },
  { title: 'every client follows a subquery shape to the rows Postgres selects', scenarios: SUBQUERY_SCENARIOS },
]

for (const set of SETS) {
  describe(set.title, () => {
    for (const scenario of set.scenarios) {
      it(scenario.name, async () => {
        const report = await runScenario({ cluster: sluice.cluster, shapeUrl: sluice.shapeUrl }, scenario, { clients: CLIENTS })
        expect(report.steps.map((s) => Object.keys(s.ms).sort())).toEqual(report.steps.map(() => [...CLIENTS].sort()))
        console.log(`${scenario.name}: ms per step (${CLIENTS.join('/')}) ${report.steps.map((s) => CLIENTS.map((c) => s.ms[c]).join('/')).join(' ')}`)
      })
    }
  })
}
