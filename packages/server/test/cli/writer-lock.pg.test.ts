/**
 * One writer per storage directory, decided by a kernel lock (issue: "who
 * writes is decided by a lock the kernel releases when its holder dies"):
 * `sluice start` right after a kill -9 of the last writer always starts, and
 * a `--standby` on the same storage waits, then takes over where the killed
 * writer left off, with the same handles and offsets.
 */
import { chmod } from 'node:fs/promises'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { type Run, sluice } from './sluice-run.js'

const dirs = useTempDir('writer-lock')
const cluster = usePostgres()

const HTTP = /HTTP: +(http:\/\/127\.0\.0\.1:\d+)/

async function storageDir(): Promise<string> {
  const dir = await dirs.make('store')
  await chmod(dir, 0o755)
  return dir
}

function start(dir: string, extra: readonly string[] = []): Run {
  return sluice(['start', '--port', '0', '--storage-dir', dir, '--database-url', cluster.url, '--log-level', 'info', ...extra])
}

interface ShapeResponse {
  readonly status: number
  readonly handle: string | null
  readonly offset: string | null
  readonly rows: readonly unknown[]
}

async function get(url: string): Promise<ShapeResponse> {
  const r = await fetch(url)
  const body = (await r.json()) as Array<{ value?: unknown }>
  return {
    status: r.status,
    handle: r.headers.get('electric-handle'),
    offset: r.headers.get('electric-offset'),
    rows: Array.isArray(body) ? body.filter((m) => m.value !== undefined).map((m) => m.value) : [],
  }
}

const RESTART_ROUNDS = process.env.SOAK === '1' ? 100 : 5

describe('writer lock', () => {
  it('starts on every restart right after a kill -9, and keeps every shape and row', { timeout: 60_000 + RESTART_ROUNDS * 30_000 }, async () => {
    const dir = await storageDir()
    await cluster.query('CREATE TABLE lock_items (id int PRIMARY KEY, title text)')
    const rounds = RESTART_ROUNDS
    let handle: string | null = null
    const failures: string[] = []
    for (let i = 0; i < rounds; i++) {
      const run = start(dir)
      try {
        const [, url] = await run.waitFor(HTTP, 120_000)
        await cluster.query('INSERT INTO lock_items VALUES ($1, $2)', [i, `item ${i}`])
        const shape = await get(`${url}/v1/shape?table=lock_items&offset=-1`)
        expect(shape.status).toBe(200)
        if (handle === null) handle = shape.handle
        expect(shape.handle).toBe(handle)
      } catch (error) {
        failures.push(`round ${i}: ${String(error)}\n${run.stderr.slice(-2000)}`)
      }
      run.child.kill('SIGKILL')
      await run.exited
    }
    expect(failures).toEqual([])
    // The last start, after the last kill: the shape holds every row Postgres has.
    const last = start(dir)
    const [, url] = await last.waitFor(HTTP, 120_000)
    const { rows: expected } = await cluster.query('SELECT id::text, title FROM lock_items ORDER BY lock_items.id')
    let offset = '-1'
    const rows: unknown[] = []
    for (let n = 0; n < 50; n++) {
      const part = await get(`${url}/v1/shape?table=lock_items&offset=${offset}${offset === '-1' ? '' : `&handle=${handle}`}`)
      expect(part.handle).toBe(handle)
      rows.push(...part.rows)
      if (part.offset === offset) break
      offset = part.offset!
    }
    const latest = new Map<string, unknown>()
    for (const row of rows as Array<{ id: string }>) latest.set(row.id, row)
    expect([...latest.values()].sort((a, b) => Number((a as { id: string }).id) - Number((b as { id: string }).id))).toEqual(expected)
    last.child.kill('SIGINT')
    expect((await last.exited).code).toBe(0)
  })

  it('refuses a second writer after --writer-lock-wait, naming the writer', async () => {
    const dir = await storageDir()
    const writer = start(dir)
    await writer.waitFor(HTTP, 120_000)
    const second = start(dir, ['--writer-lock-wait', '500ms'])
    const exit = await second.exited
    expect(exit.code).not.toBe(0)
    expect(second.stdout + second.stderr).toContain(`held for writing by process ${writer.child.pid}`)
    writer.child.kill('SIGINT')
    expect((await writer.exited).code).toBe(0)
  })

  it('a --standby waits for the writer, then takes over after its kill -9 with the same handles and offsets', async () => {
    const dir = await storageDir()
    await cluster.query('CREATE TABLE standby_items (id int PRIMARY KEY, title text)')
    await cluster.query("INSERT INTO standby_items VALUES (1, 'one')")
    const writer = start(dir)
    const [, writerUrl] = await writer.waitFor(HTTP, 120_000)
    const initial = await get(`${writerUrl}/v1/shape?table=standby_items&offset=-1`)
    expect(initial.rows).toEqual([{ id: '1', title: 'one' }])

    const standby = start(dir, ['--standby'])
    await standby.waitFor(/standby: waiting for the writer lock/, 120_000)
    expect(standby.stdout).not.toMatch(HTTP)
    await cluster.query("INSERT INTO standby_items VALUES (2, 'two')")
    const killedAt = performance.now()
    writer.child.kill('SIGKILL')
    await writer.exited
    // Written while no writer runs: the standby must pick it up from the slot.
    await cluster.query("INSERT INTO standby_items VALUES (3, 'three')")
    const [, url] = await standby.waitFor(HTTP, 120_000)
    const servingMs = performance.now() - killedAt
    const resumed = await get(`${url}/v1/shape?table=standby_items&handle=${initial.handle}&offset=${initial.offset}`)
    expect(resumed.status).toBe(200)
    expect(resumed.handle).toBe(initial.handle)
    let rows = [...resumed.rows]
    let offset = resumed.offset!
    for (let n = 0; rows.length < 2 && n < 10; n++) {
      const next = await get(`${url}/v1/shape?table=standby_items&handle=${initial.handle}&offset=${offset}&live=true`)
      expect(next.status).toBe(200)
      rows = [...rows, ...next.rows]
      offset = next.offset!
    }
    expect(rows).toEqual([
      { id: '2', title: 'two' },
      { id: '3', title: 'three' },
    ])
    console.log(`standby: serving ${Math.round(servingMs)} ms after the writer's kill -9, every row ${Math.round(performance.now() - killedAt)} ms after it`)
    standby.child.kill('SIGINT')
    expect((await standby.exited).code).toBe(0)
  })
})
