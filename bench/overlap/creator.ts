/**
 * The load generator of the creation measurement, in a process of its own.
 *
 * `create {baseUrl, from, count}`: `count` requests for new shapes
 * `createWhere(j)` sent at once, each on its own keep-alive socket, each
 * followed (non-live) until `electric-up-to-date`: that is when its client has
 * the whole initial snapshot. A 503 (admission control) is retried after its
 * `retry-after`, as the protocol asks, and counted. Returns each request's
 * time from the burst's start to up-to-date, and the counts.
 *
 * `select {connectionString, from, count, connections}`: the ceiling, the same
 * number of plain SELECTs of the same rows straight to Postgres, all queued at
 * once on a pool of `connections` (Sluice's snapshot connections).
 */
import http from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { serveCommands } from '../http/json-lines.js'
import { getWhole, header, retryAfterMs } from './http-get.js'
import { CREATE_TABLE, createSelectSql, createWhere, shapePath } from './schema.js'

/** Pause after a network error or an unexpected status before trying again. */
const ERROR_PAUSE_MS = 1000
/** A request that has not reached up-to-date after this many attempts is counted as failed. */
const MAX_ATTEMPTS = 100

interface Outcome {
  ms: number
  ok: boolean
}

async function create(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const base = new URL(String(args.baseUrl))
  const from = Number(args.from)
  const count = Number(args.count)
  const agent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY, maxFreeSockets: count + 16 })
  const counts = { requests: 0, retries503: 0, networkErrors: 0, otherStatus: 0, failed: 0 }
  const statuses: Record<string, number> = {}
  const t0 = performance.now()
  const one = async (j: number): Promise<Outcome> => {
    const shape = shapePath(CREATE_TABLE, createWhere(j))
    let handle: string | undefined
    let offset = '-1'
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      let path = `${shape}&offset=${offset}`
      if (handle !== undefined) path += `&handle=${encodeURIComponent(handle)}`
      let r
      try {
        r = await getWhole(base, path, agent)
      } catch {
        counts.networkErrors++
        await sleep(ERROR_PAUSE_MS)
        continue
      }
      counts.requests++
      statuses[r.status] = (statuses[r.status] ?? 0) + 1
      if (r.status === 503) {
        counts.retries503++
        await sleep(retryAfterMs(r, ERROR_PAUSE_MS))
        continue
      }
      if (r.status === 409) {
        handle = header(r, 'electric-handle')
        offset = '-1'
        continue
      }
      if (r.status !== 200) {
        counts.otherStatus++
        await sleep(ERROR_PAUSE_MS)
        continue
      }
      if (header(r, 'electric-up-to-date') !== undefined) return { ms: performance.now() - t0, ok: true }
      handle = header(r, 'electric-handle') ?? handle
      offset = header(r, 'electric-offset') ?? offset
    }
    counts.failed++
    return { ms: performance.now() - t0, ok: false }
  }
  const outcomes = await Promise.all(Array.from({ length: count }, (_, i) => one(from + i)))
  agent.destroy()
  return {
    totalMs: performance.now() - t0,
    times: outcomes.filter((o) => o.ok).map((o) => o.ms),
    ...counts,
    statuses,
  }
}

async function select(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const from = Number(args.from)
  const count = Number(args.count)
  const pool = new pg.Pool({ connectionString: String(args.connectionString), max: Number(args.connections) })
  try {
    // Connections opened before the clock starts: Sluice's snapshot pool is open before its first request too.
    await Promise.all(Array.from({ length: Number(args.connections) }, async () => (await pool.connect()).release()))
    const t0 = performance.now()
    const times = await Promise.all(
      Array.from({ length: count }, async (_, i) => {
        const { rows } = await pool.query(createSelectSql(from + i))
        if (rows.length !== 1) throw new Error(`${createSelectSql(from + i)} returned ${rows.length} rows`)
        return performance.now() - t0
      }),
    )
    return { totalMs: performance.now() - t0, times }
  } finally {
    await pool.end()
  }
}

serveCommands({ create, select })
