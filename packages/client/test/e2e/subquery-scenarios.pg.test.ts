import { describe, expect, it } from 'vitest'
import { useSluice } from '../harness.js'
import { ALL_CLIENTS, runScenario } from './scenario-runner.js'
import { SUBQUERY_SCENARIOS } from './scenarios.js'

/**
 * Shapes whose where clause has subqueries (docs/protocol.md §3.6), through
 * every client the runner knows: after the setup and every step, each holds
 * exactly the rows Postgres selects, and fresh clients agree at the end.
 */
const sluice = useSluice()
const CLIENTS = ALL_CLIENTS

describe('every client follows a subquery shape to the rows Postgres selects', () => {
  for (const scenario of SUBQUERY_SCENARIOS) {
    it(scenario.name, async () => {
      const report = await runScenario({ cluster: sluice.cluster, shapeUrl: sluice.shapeUrl }, scenario, { clients: CLIENTS })
      expect(report.steps.map((s) => Object.keys(s.ms).sort())).toEqual(report.steps.map(() => [...CLIENTS].sort()))
      console.log(`${scenario.name}: ms per step (${CLIENTS.join('/')}) ${report.steps.map((s) => CLIENTS.map((c) => s.ms[c]).join('/')).join(' ')}`)
    })
  }
})
