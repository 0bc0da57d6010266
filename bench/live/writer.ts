/**
 * The writer of the live benchmark, in a process of its own: one Postgres
 * connection committing single-row updates of `live_rows` at a fixed rate,
 * each into a uniformly random shape of `k < keys`, each stamped with
 * `<run>:<CLOCK_MONOTONIC ns>` taken just before the update is sent. Linux's
 * monotonic clock is one clock for every process on the machine, so the client
 * process subtracts it from its own reading on receipt. The latency measured
 * therefore includes the update's round trip and commit.
 *
 * Commands: `connect {connectionString, connections}`; `run {run, ms, rate,
 * keys, table?}` -> the writes made and how long the updates took (a writer
 * falling behind its schedule shows as `lateMs`; `table`, default the live
 * benchmark's, is any table with an int `id` and a text `stamp`: other
 * benchmarks drive theirs the same way); `burst {run, ms, keys}` -> every
 * connection commits updates back to back for `ms` (the busy pipeline of the
 * group-commit measurement), the writes made.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { serveCommands } from '../http/json-lines.js'
import { LIVE_TABLE } from './schema.js'

let client: pg.Client | undefined
let clients: pg.Client[] = []

async function connect(args: Record<string, unknown>): Promise<void> {
  clients = Array.from({ length: Number(args.connections ?? 1) }, () => new pg.Client({ connectionString: String(args.connectionString) }))
  await Promise.all(clients.map((c) => c.connect()))
  client = clients[0]
}

function update(c: pg.Client, runId: number, keys: number, table: string = LIVE_TABLE): Promise<unknown> {
  const k = Math.floor(Math.random() * keys)
  return c.query({ name: `stamp-${table}`, text: `UPDATE ${table} SET stamp = $1 WHERE id = $2`, values: [`${runId}:${process.hrtime.bigint()}`, k] })
}

async function burst(args: Record<string, unknown>): Promise<Record<string, number>> {
  const runId = Number(args.run)
  const keys = Number(args.keys)
  const until = performance.now() + Number(args.ms)
  let writes = 0
  const t0 = performance.now()
  await Promise.all(
    clients.map(async (c) => {
      while (performance.now() < until) {
        await update(c, runId, keys)
        writes++
      }
    }),
  )
  return { writes, wallMs: performance.now() - t0 }
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
    const u0 = performance.now()
    await update(c, runId, keys, table)
    const u = performance.now() - u0
    updateMs += u
    maxUpdateMs = Math.max(maxUpdateMs, u)
  }
  return { writes: count, wallMs: performance.now() - t0, meanUpdateMs: count === 0 ? 0 : updateMs / count, maxUpdateMs, lateMs }
}

serveCommands({ connect, run, burst })
