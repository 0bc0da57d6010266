/**
 * A minimal client that follows one shape by docs/protocol.md alone: `offset=-1`,
 * then each response's electric-offset and electric-handle, then `live=true`
 * with the last electric-cursor once up-to-date; a 409 restarts from `-1`
 * with the new handle (which the server ignores at `-1` but which makes the
 * URL, and so the cache key, new). Rows are kept as Postgres text, merged the
 * way `replica=default` updates require (changed columns only).
 */

type Row = Record<string, string | null>

interface Message {
  readonly key?: string
  readonly value?: Row
  readonly headers: { readonly operation?: string; readonly control?: string }
}

export interface FollowerOptions {
  /** Where to send requests, e.g. nginx's `http://127.0.0.1:<port>`. */
  readonly baseUrl: string
  readonly table: string
  /** Checked after every up-to-date response; true ends `run()`. */
  readonly done: (follower: ShapeFollower) => boolean
  readonly signal?: AbortSignal
}

export class ShapeFollower {
  readonly rows = new Map<string, Row>()
  /** Every URL requested, in order (path and query). */
  readonly urls: string[] = []
  handle: string | undefined
  offset = '-1'
  cursor: string | undefined
  live = false
  refetches = 0
  private liveReached!: () => void
  /** Resolves at the first up-to-date: the initial sync is complete. */
  readonly reachedLive = new Promise<void>((resolve) => (this.liveReached = resolve))

  constructor(private readonly options: FollowerOptions) {}

  /** The row whose `id` column is `id`, if the shape holds it. */
  byId(id: string): Row | undefined {
    for (const row of this.rows.values()) if (row['id'] === id) return row
    return undefined
  }

  nextUrl(): string {
    const params = new URLSearchParams({ table: this.options.table, offset: this.offset })
    if (this.handle !== undefined) params.set('handle', this.handle)
    if (this.live) {
      params.set('live', 'true')
      params.set('cursor', this.cursor ?? '')
    }
    return `/v1/shape?${params.toString()}`
  }

  async run(): Promise<void> {
    for (;;) {
      const url = this.nextUrl()
      this.urls.push(url)
      const res = await fetch(`${this.options.baseUrl}${url}`, this.options.signal === undefined ? {} : { signal: this.options.signal })
      const text = await res.text()
      if (res.status === 409) {
        this.mustRefetch(res.headers.get('electric-handle') ?? undefined, url, text)
        continue
      }
      if (res.status !== 200) throw new Error(`${url}: ${res.status} ${text}`)
      const messages = JSON.parse(text) as Message[]
      let refetch = false
      for (const message of messages) {
        if (message.headers.control === 'must-refetch') refetch = true
        else this.apply(message)
      }
      if (refetch) {
        this.mustRefetch(res.headers.get('electric-handle') ?? undefined, url, text)
        continue
      }
      const handle = res.headers.get('electric-handle')
      const offset = res.headers.get('electric-offset')
      if (handle === null || offset === null) throw new Error(`${url}: 200 without electric-handle/electric-offset`)
      this.handle = handle
      this.offset = offset
      if (this.live) {
        const cursor = res.headers.get('electric-cursor')
        if (cursor === null) throw new Error(`${url}: live 200 without electric-cursor`)
        this.cursor = cursor
      }
      if (res.headers.has('electric-up-to-date')) {
        this.live = true
        this.liveReached()
        if (this.options.done(this)) return
      }
    }
  }

  private mustRefetch(handle: string | undefined, url: string, body: string): void {
    if (handle === undefined) throw new Error(`${url}: must-refetch without electric-handle: ${body}`)
    this.refetches++
    this.handle = handle
    this.offset = '-1'
    this.live = false
    this.cursor = undefined
    this.rows.clear()
  }

  private apply(message: Message): void {
    const { key, value, headers } = message
    if (headers.operation === undefined) return
    if (key === undefined) throw new Error(`a change without a key: ${JSON.stringify(message)}`)
    switch (headers.operation) {
      case 'insert':
        this.rows.set(key, { ...value })
        break
      case 'update': {
        const old = this.rows.get(key)
        if (old === undefined) throw new Error(`update of a row never inserted: ${key}`)
        this.rows.set(key, { ...old, ...value })
        break
      }
      case 'delete':
        if (!this.rows.delete(key)) throw new Error(`delete of a row never inserted: ${key}`)
        break
      default:
        throw new Error(`unknown operation ${headers.operation}`)
    }
  }
}
