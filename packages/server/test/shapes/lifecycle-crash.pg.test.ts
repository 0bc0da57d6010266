/**
 * A kill -9 while shapes expire (the `sluice` command as a user runs it): the
 * restart starts, every shape it restores serves exactly Postgres's rows, no
 * half-deleted shape is left behind (logs/shapes holds only whole shapes,
 * trash/ empties), and a client coming back with a handle retired before the
 * crash gets 409, including for a table dropped while the server was down
 * (a handle the restarted process never saw is still known as retired).
 */
import { chmod, readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { storedIds } from '../replica/stored-ids.js'
import { eventually } from '../compat/compat-harness.js'
import { type Run, sluice } from '../cli/sluice-run.js'

const dirs = useTempDir('lifecycle-crash')
const cluster = usePostgres()

const HTTP = /HTTP: +(http:\/\/127\.0\.0\.1:\d+)/
const SHAPES = 120
const ROUNDS = process.env.SOAK === '1' ? 10 : 1
/** Creations at once: enough to make the shapes quickly, few enough for the default snapshot pool. */
const CONCURRENCY = 8

function start(dir: string, extra: readonly string[]): Run {
  return sluice(['start', '--port', '0', '--storage-dir', dir, '--database-url', cluster.url, '--log-level', 'info', '--client-shapes-per-minute', '0', ...extra])
}

interface Followed {
  readonly where: string
  readonly handle: string
  readonly offset: string
}

async function create(url: string, table: string, where: string): Promise<Followed> {
  let r = await fetch(`${url}/v1/shape?table=${table}&offset=-1&where=${encodeURIComponent(where)}`)
  expect(r.status).toBe(200)
  await r.arrayBuffer()
  const handle = r.headers.get('electric-handle')!
  // To up-to-date, so the offset is the log's head.
  for (;;) {
    const offset = r.headers.get('electric-offset')!
    if (r.headers.has('electric-up-to-date')) return { where, handle, offset }
    r = await fetch(`${url}/v1/shape?table=${table}&offset=${offset}&handle=${handle}&where=${encodeURIComponent(where)}`)
    await r.arrayBuffer()
    // On a slow machine the shape may expire between two requests: it is followed up to there.
    if (r.status === 409) return { where, handle, offset }
    expect(r.status).toBe(200)
  }
}

async function rowsOf(url: string, table: string, where: string): Promise<number[]> {
  const ids: number[] = []
  let r = await fetch(`${url}/v1/shape?table=${table}&offset=-1&where=${encodeURIComponent(where)}`)
  for (;;) {
    expect(r.status).toBe(200)
    const body = (await r.json()) as Array<{ value?: { id: string } }>
    for (const m of body) if (m.value !== undefined) ids.push(Number(m.value.id))
    if (r.headers.has('electric-up-to-date')) return ids.sort((a, b) => a - b)
    r = await fetch(`${url}/v1/shape?table=${table}&offset=${r.headers.get('electric-offset')}&handle=${r.headers.get('electric-handle')}&where=${encodeURIComponent(where)}`)
  }
}

const expiredLines = (run: Run): number => run.stdout.split('\n').filter((l) => l.includes('"reason":"expired"')).length

describe('a crash while shapes expire', () => {
  it('restarts with whole shapes only, each equal to Postgres, and 409 for handles retired before the crash', { timeout: 120_000 * ROUNDS }, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const dir = await dirs.make('store')
      await chmod(dir, 0o755)
      const table = `crash_items_${round}`
      const gone = `crash_gone_${round}`
      await cluster.query(`CREATE TABLE ${table} (id int4 PRIMARY KEY, n int4); INSERT INTO ${table} SELECT i, i FROM generate_series(1, ${SHAPES + 10}) i;`)
      await cluster.query(`CREATE TABLE ${gone} (id int4 PRIMARY KEY); INSERT INTO ${gone} VALUES (1)`)

      const first = start(dir, ['--shape-ttl', '3s'])
      const url = (await first.waitFor(HTTP, 120_000))[1]!
      const goneShape = await create(url, gone, 'id > 0')
      const followed: Followed[] = []
      const wheres = Array.from({ length: SHAPES }, (_, i) => `n > ${i}`)
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          for (let where = wheres.shift(); where !== undefined; where = wheres.shift()) followed.push(await create(url, table, where))
        }),
      )
      // Kill while the sweep deletes: some shapes gone, others not yet.
      await eventually(() => expiredLines(first) >= SHAPES / 4, 'shapes to expire', 60_000)
      first.child.kill('SIGKILL')
      await first.exited
      const expiredBeforeCrash = new Set(
        first.stdout
          .split('\n')
          .filter((l) => l.includes('"reason":"expired"'))
          .map((l) => (JSON.parse(l) as { handle: string }).handle),
      )
      await cluster.query(`DROP TABLE ${gone}`)

      const second = start(dir, ['--shape-ttl', '0'])
      const url2 = (await second.waitFor(HTTP, 120_000))[1]!
      try {
        // Only whole shapes in shapes/; the trash of the interrupted deletions is emptied.
        await eventually(async () => (await readdir(join(dir, 'logs', 'trash'))).length === 0, 'the trash to empty')
        const kept = new Set(storedIds(join(dir, 'logs')))
        for (const handle of kept) expect(expiredBeforeCrash.has(handle), `${handle} was expired before the crash`).toBe(false)

        for (const shape of followed) {
          const back = await fetch(`${url2}/v1/shape?table=${table}&offset=${shape.offset}&handle=${shape.handle}&where=${encodeURIComponent(shape.where)}`)
          await back.arrayBuffer()
          if (kept.has(shape.handle)) expect(back.status, shape.where).toBe(200)
          else {
            // Retired before the crash (or half deleted by it): a 409 naming the replacement.
            expect(back.status, shape.where).toBe(409)
            expect(back.headers.get('electric-handle')).not.toBe(shape.handle)
          }
        }
        // Every shape, restored or made again, serves Postgres's rows.
        for (const shape of followed.slice(0, 20)) {
          const { rows } = await cluster.query<{ id: number }>(`SELECT id FROM ${table} WHERE ${shape.where} ORDER BY id`)
          expect(await rowsOf(url2, table, shape.where)).toEqual(rows.map((r) => r.id))
        }
        // The handle of a shape whose table was dropped while the server was down: 409, not a 400.
        const orphan = await fetch(`${url2}/v1/shape?table=${gone}&offset=${goneShape.offset}&handle=${goneShape.handle}&where=${encodeURIComponent('id > 0')}`)
        expect(orphan.status).toBe(409)
      } finally {
        second.child.kill('SIGTERM')
        await second.exited
      }
      await cluster.dropReplicationSlots()
    }
  })
})
