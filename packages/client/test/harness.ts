import { type IncomingMessage, type Server, type ServerResponse, createServer, request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import { type BuildAppOptions, Pipeline, buildApp } from '@sluice/server'
import { type PostgresCluster, useTempDir, usePostgres } from '@sluice/test-utils'
import { afterAll, beforeAll, expect } from 'vitest'
import { type BackoffOptions, type Row, type Shape, type Timers, realTimers } from '../src/index.js'

/**
 * One real Sluice server (pipeline + HTTP app on an ephemeral port) on a real
 * Postgres, and a real HTTP proxy in front of it that forwards byte for byte
 * unless a test tells it to fail a request. Tests talk to the proxy.
 */
export interface Sluice {
  readonly cluster: PostgresCluster
  readonly pipeline: Pipeline
  readonly app: ReturnType<typeof buildApp>
  /** Base URL of the real server. */
  readonly serverUrl: string
  readonly proxy: FaultProxy
  /** `…/v1/shape` through the proxy. */
  readonly shapeUrl: string
}

export const LONG_POLL_MS = 1500
export const CHUNK_BYTES = 2048

export function useSluice(http: Partial<BuildAppOptions['http']> = {}): Sluice {
  const cluster = usePostgres()
  const dirs = useTempDir('client')
  const box: { -readonly [K in keyof Sluice]?: Sluice[K] } = {}
  beforeAll(async () => {
    box.cluster = cluster
    box.pipeline = await Pipeline.start({ connectionString: cluster.url, storageDir: await dirs.make('store'), flushIntervalMs: 5, chunkBytes: CHUNK_BYTES })
    box.app = buildApp({ shapes: box.pipeline.shapeService, http: { longPollTimeoutMs: LONG_POLL_MS, allowDelete: true, sseTimeoutMs: 10_000, ...http } })
    await box.app.listen({ port: 0, host: '127.0.0.1' })
    const port = (box.app.server.address() as AddressInfo).port
    box.serverUrl = `http://127.0.0.1:${port}`
    box.proxy = await FaultProxy.start(port)
    box.shapeUrl = `${box.proxy.url}/v1/shape`
  })
  afterAll(async () => {
    await box.proxy?.close()
    await box.app?.close()
    await box.pipeline?.stop()
  })
  return new Proxy(box as Sluice, {
    get(target, prop: string) {
      const value = (target as unknown as Record<string, unknown>)[prop]
      if (value === undefined) throw new Error(`useSluice(): .${prop} is not ready (use it inside a test or hook)`)
      return value
    },
  })
}

/** What the proxy does with one request. */
export type Fault =
  | { readonly kind: 'respond'; readonly status: number; readonly headers?: Record<string, string>; readonly body?: string }
  /** Cut the connection without an answer (a network error for the client). */
  | { readonly kind: 'destroy' }
  /** Forward, but send only the response headers and then end (an SSE stream cut at once). */
  | { readonly kind: 'headers-only' }
  /** Forward the response headers, then cut the connection: a body broken off by the network. */
  | { readonly kind: 'cut-body' }
  /** Forward, but drop the named response headers (a proxy or CORS setup hiding them). */
  | { readonly kind: 'strip-headers'; readonly names: readonly string[] }
  /** Never answer; the request stays open until the client gives up. */
  | { readonly kind: 'hang' }

export interface SeenRequest {
  readonly url: URL
  readonly headers: IncomingMessage['headers']
  readonly fault: Fault['kind'] | 'forwarded'
  /** The server's status, once it answered a forwarded request. */
  status: number | undefined
}

export type Interceptor = (request: { url: URL; headers: IncomingMessage['headers']; index: number }) => Fault | undefined

/** A node:http proxy that records every request and injects the faults it is told to. */
export class FaultProxy {
  readonly requests: SeenRequest[] = []
  interceptor: Interceptor | undefined
  readonly #sockets = new Set<import('node:net').Socket>()

  private constructor(
    private readonly server: Server,
    private readonly targetPort: number,
    readonly url: string,
  ) {
    server.on('connection', (socket) => {
      this.#sockets.add(socket)
      socket.on('close', () => this.#sockets.delete(socket))
    })
  }

  static async start(targetPort: number): Promise<FaultProxy> {
    let proxy: FaultProxy | undefined
    const server = createServer((req, res) => proxy!.handle(req, res))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    proxy = new FaultProxy(server, targetPort, `http://127.0.0.1:${(server.address() as AddressInfo).port}`)
    return proxy
  }

  /** Requests whose table parameter is `table`. */
  requestsFor(table: string): SeenRequest[] {
    return this.requests.filter((r) => r.url.searchParams.get('table') === table)
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', this.url)
    const fault = this.interceptor?.({ url, headers: req.headers, index: this.requests.length })
    const seen: SeenRequest = { url, headers: req.headers, fault: fault?.kind ?? 'forwarded', status: undefined }
    this.requests.push(seen)
    if (fault?.kind === 'destroy') {
      req.socket.destroy()
      return
    }
    if (fault?.kind === 'hang') return
    if (fault?.kind === 'respond') {
      res.writeHead(fault.status, { 'content-type': 'application/json', ...fault.headers })
      res.end(fault.body ?? '')
      return
    }
    const upstream = httpRequest(
      { host: '127.0.0.1', port: this.targetPort, path: req.url, method: req.method, headers: req.headers },
      (up) => {
        seen.status = up.statusCode
        const headers = { ...up.headers }
        if (fault?.kind === 'strip-headers') for (const name of fault.names) delete headers[name]
        res.writeHead(up.statusCode ?? 502, headers)
        if (fault?.kind === 'headers-only') {
          up.destroy()
          res.end()
          return
        }
        if (fault?.kind === 'cut-body') {
          up.destroy()
          res.flushHeaders()
          res.socket?.destroy()
          return
        }
        up.pipe(res)
      },
    )
    upstream.on('error', () => res.destroy())
    res.on('close', () => upstream.destroy())
    req.pipe(upstream)
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }
}

/** Fast retries for tests; the delays asked for are recorded (the real sleep still runs). */
export class RecordingTimers implements Timers {
  readonly sleeps: number[] = []
  now(): number {
    return realTimers.now()
  }
  sleep(ms: number, signal: AbortSignal): Promise<void> {
    this.sleeps.push(ms)
    return realTimers.sleep(ms, signal)
  }
}

export const FAST_BACKOFF: Partial<BackoffOptions> = { initialDelayMs: 10, maxDelayMs: 80 }

/** Commits `sql` in one transaction and returns its xid8 (as `pg_current_xact_id()` text). */
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

/** Rows of `items`-like tables as the default parsers produce them. */
export async function selectItems(cluster: PostgresCluster, table: string, where = 'true'): Promise<Map<string, Row>> {
  const { rows } = await cluster.query<{ id: string; title: string | null; n: number | null; f: number | null; done: boolean | null; tags: string[] | null; doc: unknown }>(
    `SELECT id::text AS id, title, n, f, done, tags, doc FROM ${table} WHERE ${where}`,
  )
  return new Map(
    rows.map((r) => [`"public"."${table}"/"${r.id}"`, { id: BigInt(r.id), title: r.title, n: r.n, f: r.f, done: r.done, tags: r.tags, doc: r.doc ?? null }]),
  )
}

export const ITEMS_DDL = (table: string): string =>
  `CREATE TABLE ${table} (id int8 PRIMARY KEY, title text NOT NULL, n int4, f float8, done bool, tags text[], doc jsonb)`

/** Rows as a plain sorted object, for `toEqual` with useful diffs. */
export function byKey(rows: ReadonlyMap<string, Row>): Record<string, Row> {
  return Object.fromEntries([...rows].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
}

export async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

export async function shapeMatches(shape: Shape, cluster: PostgresCluster, table: string, where?: string): Promise<void> {
  expect(byKey(shape.value)).toEqual(byKey(await selectItems(cluster, table, where)))
}

export function jsonSafe(_key: string, value: unknown): unknown {
  if (typeof value === 'bigint') return `${value}n`
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value)
  return value
}
