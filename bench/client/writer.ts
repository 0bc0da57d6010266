/**
 * The live-update writer, in a process of its own: `connections` Postgres
 * connections committing transactions of `rowsPerTx` row updates of
 * `client_live` on a fixed schedule (`rate` rows/s), each transaction one
 * `UPDATE ... WHERE id BETWEEN` of its block (see `schema.ts`), stamped with
 * its number (`seq`) and `CLOCK_MONOTONIC` ns taken just before it is sent.
 * A transaction waits for a free connection when all are busy: a writer that
 * cannot keep the schedule shows it as a lower achieved rate and `maxLateMs`.
 *
 * Commands: `connect {connectionString, connections}`;
 * `run {fromSeq, seconds, rate, rowsPerTx, blocks}` -> transactions and rows
 * written, wall time, achieved rate, mean/max transaction time, lateness.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { serveCommands } from '../http/json-lines.js'
import { LIVE_TABLE, blockOf } from './schema.js'

let clients: pg.Client[] = []

async function connect(args: Record<string, unknown>): Promise<void> {
  const n = Number(args.connections)
  clients = await Promise.all(
    Array.from({ length: n }, async () => {
      const c = new pg.Client({ connectionString: String(args.connectionString) })
      await c.connect()
      return c
    }),
  )
}

async function run(args: Record<string, unknown>): Promise<Record<string, number>> {
  const fromSeq = Number(args.fromSeq)
  const rate = Number(args.rate)
  const rowsPerTx = Number(args.rowsPerTx)
  const blocks = Number(args.blocks)
  const txPerSec = rate / rowsPerTx
  const count = Math.round(Number(args.seconds) * txPerSec)
  const idle = [...clients]
  const waiting: Array<(c: pg.Client) => void> = []
  const release = (c: pg.Client): void => {
    const next = waiting.shift()
    if (next === undefined) idle.push(c)
    else next(c)
  }
  const acquire = (): Promise<pg.Client> => {
    const c = idle.pop()
    return c === undefined ? new Promise((resolve) => waiting.push(resolve)) : Promise.resolve(c)
  }
  let txMs = 0
  let maxTxMs = 0
  let maxLateMs = 0
  const inFlight = new Set<Promise<void>>()
  const t0 = performance.now()
  for (let i = 0; i < count; i++) {
    const due = t0 + (i * 1000) / txPerSec
    const wait = due - performance.now()
    if (wait > 1) await sleep(wait)
    const c = await acquire()
    maxLateMs = Math.max(maxLateMs, performance.now() - due)
    const seq = fromSeq + i
    const { first, last } = blockOf(seq, blocks, rowsPerTx)
    const u0 = performance.now()
    const p = c
      .query({
        name: 'live-update',
        text: `UPDATE ${LIVE_TABLE} SET seq = $1, stamp_ns = $2, score = score + 1, updated_at = now() WHERE id BETWEEN $3 AND $4`,
        values: [seq, process.hrtime.bigint().toString(), first, last],
      })
      .then((r) => {
        if (r.rowCount !== rowsPerTx) throw new Error(`transaction ${seq} updated ${r.rowCount} rows, expected ${rowsPerTx}`)
        const ms = performance.now() - u0
        txMs += ms
        maxTxMs = Math.max(maxTxMs, ms)
        release(c)
      })
    const tracked = p.finally(() => inFlight.delete(tracked))
    inFlight.add(tracked)
  }
  await Promise.all(inFlight)
  const wallMs = performance.now() - t0
  return {
    fromSeq,
    endSeq: fromSeq + count,
    transactions: count,
    rows: count * rowsPerTx,
    wallMs,
    targetRowsPerSec: rate,
    achievedRowsPerSec: (count * rowsPerTx) / (wallMs / 1000),
    meanTxMs: count === 0 ? 0 : txMs / count,
    maxTxMs,
    maxLateMs,
  }
}

async function end(): Promise<null> {
  await Promise.all(clients.map((c) => c.end()))
  clients = []
  return null
}

serveCommands({ connect, run, end })
