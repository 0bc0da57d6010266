/**
 * The fan-out benchmark's writer, in a process of its own: one Postgres
 * connection; each `write {write, rows}` is one transaction updating `rows`
 * rows, row 0 last (its `mark` is `end:<write>`). It answers with
 * CLOCK_MONOTONIC taken just before COMMIT is sent (the clients' clock too:
 * Linux has one monotonic clock for every process) and the commit's round trip.
 */
import pg from 'pg'
import { serveCommands } from '../http/json-lines.js'
import { END_MARK, FANOUT_TABLE, PAD_BYTES, writeMark } from './schema.js'

let client: pg.Client | undefined

async function connect(args: Record<string, unknown>): Promise<void> {
  client = new pg.Client({ connectionString: String(args.connectionString) })
  await client.connect()
}

async function write(args: Record<string, unknown>): Promise<{ commitNs: string; commitMs: number }> {
  const c = client
  if (c === undefined) throw new Error('not connected')
  const mark = writeMark(Number(args.write))
  const rows = Number(args.rows)
  const pad = 'p'.repeat(PAD_BYTES)
  await c.query('BEGIN')
  if (rows > 1) await c.query(`UPDATE ${FANOUT_TABLE} SET mark = $1, pad = $2 WHERE id BETWEEN 1 AND $3`, [`w:${mark}`, pad, rows - 1])
  await c.query(`UPDATE ${FANOUT_TABLE} SET mark = $1, pad = $2 WHERE id = 0`, [`${END_MARK}${mark}`, pad])
  const commitNs = process.hrtime.bigint()
  const t0 = performance.now()
  await c.query('COMMIT')
  return { commitNs: commitNs.toString(), commitMs: performance.now() - t0 }
}

serveCommands({ connect, write })
