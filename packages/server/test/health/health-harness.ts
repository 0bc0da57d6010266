import type { PostgresCluster } from '@sluice/test-utils'
import { setTimeout as sleep } from 'node:timers/promises'
import { type Res, call, shapeUrl } from '../http/http-harness.js'

/** The body of `/v1/health`. */
export interface HealthBody {
  readonly status: string
  readonly reason?: string
  readonly message?: string
  readonly reasons?: ReadonlyArray<{ code: string; message: string; since: string }>
}

export async function health(port: number): Promise<{ status: number; body: HealthBody; res: Res }> {
  const res = await call(port, '/v1/health')
  return { status: res.status, body: res.json() as HealthBody, res }
}

/**
 * Polls `check` until it returns a value (not undefined), or throws after
 * `timeoutMs` naming what it waited for. A wait for the system to reach a
 * state, never an assertion on how fast it got there.
 */
export async function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    try {
      const value = await check()
      if (value !== undefined) return value
    } catch (error) {
      last = error
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last === undefined ? '' : ` (last error: ${String(last)})`}`)
    await sleep(50)
  }
}

/** Health once it answers with `status` (and names `code`); its body. A timeout names the last answer seen. */
export async function healthBecomes(port: number, status: 200 | 503, code?: string, timeoutMs?: number): Promise<HealthBody> {
  let last: { status: number; body: HealthBody } | undefined
  try {
    return await until(
      `/v1/health to answer ${status}${code === undefined ? '' : ` ${code}`}`,
      async () => {
        const h = await health(port)
        last = { status: h.status, body: h.body }
        if (h.status !== status) return undefined
        if (code !== undefined && !h.body.reasons?.some((r) => r.code === code)) return undefined
        return h.body
      },
      timeoutMs,
    )
  } catch (error) {
    throw new Error(`${(error as Error).message}; it last answered ${JSON.stringify(last)}`)
  }
}

type Row = Record<string, unknown>

/**
 * A client of one shape over real HTTP, as Electric's clients follow one:
 * `offset=-1`, then from its last offset until up-to-date, applying inserts,
 * updates and deletes to the rows it holds, and starting over on a 409.
 */
export class ShapeClient {
  readonly rows = new Map<string, Row>()
  private handle: string | undefined
  private offset = '-1'

  constructor(
    private readonly port: number,
    private readonly table: string,
    /** Further shape parameters (`where`, `columns`...). */
    private readonly params: Readonly<Record<string, string>> = {},
  ) {}

  /** Requests until up-to-date; returns how many requests it made. */
  async catchUp(): Promise<number> {
    for (let requests = 1; ; requests++) {
      if (requests > 500) throw new Error(`shape ${this.table} never became up-to-date`)
      const params: Record<string, string> = { ...this.params, table: this.table, offset: this.offset }
      if (this.handle !== undefined) params['handle'] = this.handle
      const res = await call(this.port, shapeUrl(params))
      if (res.status === 409) {
        this.rows.clear()
        this.handle = undefined
        this.offset = '-1'
        continue
      }
      if (res.status !== 200) throw new Error(`GET ${this.table} at ${this.offset}: ${res.status} ${res.text}`)
      this.handle = res.header('electric-handle')
      this.offset = res.header('electric-offset')!
      for (const m of res.json() as Array<{ key?: string; value?: Row; headers: Record<string, unknown> }>) {
        const op = m.headers['operation']
        if (m.key === undefined) continue
        if (op === 'insert') this.rows.set(m.key, { ...m.value })
        else if (op === 'update') this.rows.set(m.key, { ...this.rows.get(m.key), ...m.value })
        else if (op === 'delete') this.rows.delete(m.key)
      }
      if (res.header('electric-up-to-date') !== undefined) return requests
    }
  }

  /** The rows as `[id, v]` sorted by id, to compare with `selectRows`. */
  sorted(): Array<[string, unknown]> {
    return [...this.rows.values()].map((r): [string, unknown] => [String(r['id']), r['v'] ?? null]).sort(byId)
  }
}

/** `SELECT id, v` of a table (where `where`) as text, sorted by id: what a client of that shape must end up with. */
export async function selectRows(cluster: PostgresCluster, table: string, where = 'true'): Promise<Array<[string, unknown]>> {
  const { rows } = await cluster.query<{ id: string; v: string | null }>(`SELECT id::text AS id, v FROM ${table} WHERE ${where}`)
  return rows.map((r): [string, unknown] => [r.id, r.v]).sort(byId)
}

function byId(a: [string, unknown], b: [string, unknown]): number {
  return Number(a[0]) - Number(b[0])
}
