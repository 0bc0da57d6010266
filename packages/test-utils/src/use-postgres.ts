import { afterAll, beforeAll } from 'vitest'
import { startPostgres, type PostgresCluster, type StartPostgresOptions } from './start-postgres.js'

/**
 * Starts a cluster in beforeAll and stops it in afterAll, whether the tests
 * passed or not. The returned object stands for the cluster; it can be used in
 * tests and hooks (not at collection time, before beforeAll has run).
 */
export function usePostgres(options: StartPostgresOptions = {}): PostgresCluster {
  let cluster: PostgresCluster | undefined
  beforeAll(async () => {
    cluster = await startPostgres(options)
  }, 120_000)
  afterAll(async () => {
    await cluster?.stop()
  }, 120_000)

  return new Proxy({} as PostgresCluster, {
    get(_target, prop) {
      if (cluster === undefined) {
        // Keep `await usePostgres()` and inspection harmless rather than throwing from them.
        if (prop === 'then' || typeof prop === 'symbol') return undefined
        throw new Error(`usePostgres(): the cluster is not started yet (read .${prop} inside a test or hook)`)
      }
      const value: unknown = Reflect.get(cluster, prop)
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(cluster) : value
    },
  })
}
