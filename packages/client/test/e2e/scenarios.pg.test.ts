import { describe, expect, it } from 'vitest'
import { useSluice } from '../harness.js'
import { runScenario } from './scenario-runner.js'
import { PLAIN_SCENARIOS } from './scenarios.js'

/**
 * The scenario runner against a real Sluice server on real Postgres: both
 * `@sluice/client`'s Shape and TanStack DB's Electric collection (npm) must
 * hold exactly the rows Postgres selects after the setup and after every
 * step, and a fresh pair must agree at the end. Subquery scenarios
 * (`SUBQUERY_SCENARIOS`) join this list once the server serves them.
 */
const sluice = useSluice()

describe('both clients follow a shape to the rows Postgres selects', () => {
  for (const scenario of PLAIN_SCENARIOS) {
    it(scenario.name, async () => {
      const report = await runScenario({ cluster: sluice.cluster, shapeUrl: sluice.shapeUrl }, scenario)
      expect(report.steps.map((s) => Object.keys(s.ms).sort())).toEqual(report.steps.map(() => ['sluice', 'tanstack']))
      console.log(`${scenario.name}: ms per step (sluice/tanstack) ${report.steps.map((s) => `${s.ms.sluice}/${s.ms.tanstack}`).join(' ')}`)
    })
  }
})
