/**
 * The subquery benchmark's writer, in a process of its own: one Postgres
 * connection. Times are epoch milliseconds (`performance.timeOrigin + now()`,
 * one clock for every process on the machine), taken when COMMIT returned.
 *
 * Commands: `connect {connectionString}`; `burst {transactions, rows, maxId}`
 * -> outer-table writes back to back: each transaction updates `rows` random
 * todos; the time taken and an LSN inside the last transaction; `moveIn {user, list}` ->
 * a member row (the user's shape gains the list's todos); `insertTodo {id,
 * list}` -> a todo (the equality baseline's change).
 */
import pg from 'pg'
import { serveCommands } from '../http/json-lines.js'

let client: pg.Client | undefined
const now = (): number => performance.timeOrigin + performance.now()

async function connect(args: Record<string, unknown>): Promise<void> {
  client = new pg.Client({ connectionString: String(args.connectionString) })
  await client.connect()
}

async function burst(args: Record<string, unknown>): Promise<{ ms: number; lsn: string; changes: number }> {
  const c = client!
  const transactions = Number(args.transactions)
  const rows = Number(args.rows)
  const maxId = Number(args.maxId)
  const t0 = performance.now()
  let lsn = '0/0'
  for (let i = 0; i < transactions; i++) {
    const ids = Array.from({ length: rows }, () => 1 + Math.floor(Math.random() * maxId))
    await c.query('BEGIN')
    await c.query({ name: 'touch', text: "UPDATE todos SET title = 'burst ' || $2::int || '.' || id WHERE id = ANY($1::int4[])", values: [ids, i] })
    // Inside the last transaction, below its commit record: the server has routed it once its durable LSN passes this.
    if (i === transactions - 1) lsn = (await c.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn')).rows[0]!.lsn
    await c.query('COMMIT')
  }
  return { ms: performance.now() - t0, lsn, changes: transactions * rows }
}

async function moveIn(args: Record<string, unknown>): Promise<{ committedAt: number }> {
  await client!.query('INSERT INTO members (user_id, list_id) VALUES ($1, $2)', [Number(args.user), Number(args.list)])
  return { committedAt: now() }
}

async function insertTodo(args: Record<string, unknown>): Promise<{ committedAt: number }> {
  await client!.query("INSERT INTO todos (id, list_id, title) VALUES ($1, $2, 'new')", [Number(args.id), Number(args.list)])
  return { committedAt: now() }
}

serveCommands({ connect, burst, moveIn, insertTodo })
