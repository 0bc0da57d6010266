/**
 * The writer of the live-latency measurement, in a process of its own: one
 * Postgres connection committing single-row updates of `http_live` at a fixed
 * rate, each into a uniformly random shape, each stamped with
 * `<run>:<CLOCK_MONOTONIC ns>` taken just before the update is sent. Linux's
 * monotonic clock is one clock for every process on the machine, so the client
 * process subtracts it from its own reading on receipt. The latency measured
 * therefore includes the update's round trip and commit.
 *
 * Commands: `connect {connectionString}`; `run {run, ms, rate, keys, table?}` ->
 * the writes made and how long the updates took (a writer falling behind its
 * schedule shows as `lateMs`). `table` (default `http_live`) is any table with
 * an int `id` and a text `stamp`: other benchmarks drive theirs the same way.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { serveCommands } from './json-lines.js'
import { LIVE_TABLE } from './schema.js'

let client: pg.Client | undefined

async function connect(args: Record<string, unknown>): Promise<void> {
  client = new pg.Client({ connectionString: String(args.connectionString) })
  await client.connect()
}

async function run(args: Record<string, unknown>): Promise<Record<string, number>> {
  const c = client
  if (c === undefined) throw new Error('not connected')
  const runId = Number(args.run)
  const ms = Number(args.ms)
  const rate = Number(args.rate)
  const keys = Number(args.keys)
  const table = typeof args.table === 'string' ? args.table : LIVE_TABLE
  const count = Math.floor((ms / 1000) * rate)
  const t0 = performance.now()
  let updateMs = 0
  let maxUpdateMs = 0
  let lateMs = 0
  for (let i = 0; i < count; i++) {
    const due = t0 + (i * 1000) / rate
    const wait = due - performance.now()
    if (wait > 1) await sleep(wait)
    else lateMs = Math.max(lateMs, -wait)
    const k = Math.floor(Math.random() * keys)
    const u0 = performance.now()
    await c.query({ name: `stamp-${table}`, text: `UPDATE ${table} SET stamp = $1 WHERE id = $2`, values: [`${runId}:${process.hrtime.bigint()}`, k] })
    const u = performance.now() - u0
    updateMs += u
    maxUpdateMs = Math.max(maxUpdateMs, u)
  }
  return { writes: count, wallMs: performance.now() - t0, meanUpdateMs: count === 0 ? 0 : updateMs / count, maxUpdateMs, lateMs }
}

serveCommands({ connect, run })
