import type { AddressInfo } from 'node:net'
import { Pipeline, buildApp } from '@sluice/server'
import { type PostgresCluster, useTempDir, usePostgres } from '@sluice/test-utils'
import { afterAll, beforeAll } from 'vitest'

/** Short enough that a test sees several live rounds; long enough not to spin on a busy machine. */
export const LONG_POLL_MS = 1500

export interface SeenRequest {
  readonly method: string
  readonly url: URL
}

/**
 * A real Sluice server (pipeline + HTTP app on an ephemeral port) on a real
 * Postgres. The server itself records every request it receives and how many
 * are in flight per table, so tests count what reached it, not what a client
 * says it sent.
 */
export interface Sluice {
  readonly cluster: PostgresCluster
  readonly shapeUrl: string
  readonly requests: SeenRequest[]
  requestsFor(table: string): SeenRequest[]
  inFlight(table: string): number
  maxInFlight(table: string): number
}

export function useSluice(): Sluice {
  const cluster = usePostgres()
  const dirs = useTempDir('react')
  const requests: SeenRequest[] = []
  const inFlight = new Map<string, number>()
  const maxInFlight = new Map<string, number>()
  let pipeline: Pipeline | undefined
  let app: ReturnType<typeof buildApp> | undefined
  let shapeUrl: string | undefined
  beforeAll(async () => {
    pipeline = await Pipeline.start({ connectionString: cluster.url, storageDir: await dirs.make('store'), flushIntervalMs: 5, chunkBytes: 2048 })
    app = buildApp({ shapes: pipeline.shapeService, http: { longPollTimeoutMs: LONG_POLL_MS } })
    app.addHook('onRequest', async (request) => {
      const url = new URL(request.url, 'http://sluice')
      requests.push({ method: request.method, url })
      const table = url.searchParams.get('table')
      if (table === null) return
      const now = (inFlight.get(table) ?? 0) + 1
      inFlight.set(table, now)
      maxInFlight.set(table, Math.max(now, maxInFlight.get(table) ?? 0))
      // 'close' fires whether the answer was sent or the client went away.
      request.raw.once('close', () => inFlight.set(table, (inFlight.get(table) ?? 1) - 1))
    })
    await app.listen({ port: 0, host: '127.0.0.1' })
    shapeUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/v1/shape`
  })
  afterAll(async () => {
    await app?.close()
    await pipeline?.stop()
  })
  return {
    cluster,
    get shapeUrl() {
      if (shapeUrl === undefined) throw new Error('useSluice(): the server is not started yet')
      return shapeUrl
    },
    requests,
    requestsFor: (table) => requests.filter((r) => r.url.searchParams.get('table') === table),
    inFlight: (table) => inFlight.get(table) ?? 0,
    maxInFlight: (table) => maxInFlight.get(table) ?? 0,
  }
}

/** Commits `sql` in one transaction and returns its xid8 (`pg_current_xact_id()` as text). */
export async function writeTx(cluster: PostgresCluster, sql: string, values: unknown[] = []): Promise<string> {
  const client = await cluster.connect()
  try {
    await client.query('BEGIN')
    await client.query(sql, values)
    const { rows } = await client.query<{ txid: string }>('SELECT pg_current_xact_id()::text AS txid')
    await client.query('COMMIT')
    return rows[0]!.txid
  } finally {
    await client.end()
  }
}

export const TODOS_DDL = (table: string): string => `CREATE TABLE ${table} (id int4 PRIMARY KEY, title text NOT NULL, done bool NOT NULL DEFAULT false)`

export type Todo = { readonly id: number; readonly title: string; readonly done: boolean }

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
