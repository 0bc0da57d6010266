import type { Message, Row, ShapeStreamInterface, ShapeStreamOptions } from '@electric-sql/client'
import { Shape, ShapeStream, isChangeMessage, isControlMessage } from '@electric-sql/client'
import { setTimeout as sleep } from 'node:timers/promises'

/**
 * Helpers for driving the official `@electric-sql/client` against a real
 * Sluice server. Nothing here stands in for the client or the server: the
 * fetch wrapper only records what the client asked and what it got back, so
 * a test can say *how* the client reached a state (which URLs, which status
 * codes, which headers), not only that it did.
 */

export interface RecordedExchange {
  readonly url: URL
  readonly method: string
  readonly status: number
  readonly headers: Headers
}

/** A fetch that passes everything to the real fetch and records each exchange. */
export function recordingFetch(log: RecordedExchange[]): typeof fetch {
  return async (input, init) => {
    const href = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url
    const method = init?.method ?? (input instanceof Request ? input.method : 'GET')
    const res = await fetch(input, init)
    log.push({ url: new URL(href), method, status: res.status, headers: res.headers })
    return res
  }
}

/** Every message a stream delivered, batch by batch, plus any error it reported. */
export class StreamLog<T extends Row<unknown> = Row> {
  readonly batches: Array<Array<Message<T>>> = []
  readonly errors: unknown[] = []
  readonly unsubscribe: () => void

  constructor(readonly stream: ShapeStream<T>) {
    this.unsubscribe = stream.subscribe(
      (messages) => {
        this.batches.push(messages)
      },
      (error) => {
        this.errors.push(error)
      },
    )
  }

  get messages(): Array<Message<T>> {
    return this.batches.flat()
  }

  /** Change messages (insert/update/delete), in order. */
  changes(): Array<Message<T> & { key: string; value: T; headers: { operation: string } }> {
    return this.messages.filter(isChangeMessage) as never
  }

  controls(): string[] {
    return this.messages.filter(isControlMessage).map((m) => m.headers.control)
  }

  /** Resolves once `predicate` holds; rejects after `timeoutMs` (a deadline for a hung test, not a timing check). */
  async until(predicate: (log: this) => boolean, what: string, timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs
    while (!predicate(this)) {
      if (this.errors.length > 0) throw new Error(`stream failed while waiting for ${what}: ${String(this.errors[0])}`)
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; controls seen: ${this.controls().join(',')}`)
      await sleep(10)
    }
  }

  /** Resolves at the next up-to-date after the ones seen so far. */
  async nextUpToDate(what: string, timeoutMs?: number): Promise<void> {
    const seen = this.controls().filter((c) => c === 'up-to-date').length
    await this.until((l) => l.controls().filter((c) => c === 'up-to-date').length > seen, what, timeoutMs)
  }
}

/** Waits for `predicate` to hold, polling; the deadline only ends a hung test. */
export async function eventually(predicate: () => boolean | Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(10)
  }
}

/**
 * Collects what the client prints with console.warn (it reports protocol
 * trouble that way: a 409 without a handle, SSE falling back to long-polling)
 * until `restore()`.
 */
export function captureWarnings(): { readonly warnings: string[]; restore(): void } {
  const warnings: string[] = []
  const original = console.warn
  console.warn = (...args: unknown[]) => {
    warnings.push(args.map(String).join(' '))
  }
  return { warnings, restore: () => void (console.warn = original) }
}

/** A ShapeStream on the given server with an abort controller the test owns. */
export function openStream(
  url: string,
  options: Omit<ShapeStreamOptions, 'url'>,
  exchanges?: RecordedExchange[],
): { stream: ShapeStream<Row>; abort: AbortController } {
  const abort = new AbortController()
  const stream = new ShapeStream<Row>({
    url,
    signal: abort.signal,
    ...(exchanges === undefined ? {} : { fetchClient: recordingFetch(exchanges) }),
    ...options,
  })
  return { stream, abort }
}

/**
 * A Shape over a stream. The client's published types are not written for
 * `exactOptionalPropertyTypes` (its ShapeStream's `shapeHandle?: string` does
 * not satisfy its own interface under that flag), hence the one cast.
 */
export function shapeOf(stream: ShapeStream<Row>): Shape<Row> {
  return new Shape(stream as unknown as ShapeStreamInterface<Row>)
}

/** The row key the protocol specifies (docs/protocol.md §3.3) for a plain relation and primary key. */
export function rowKey(schema: string, table: string, ...pk: string[]): string {
  return `"${schema}"."${table}"` + pk.map((v) => `/"${v.replaceAll('/', '//')}"`).join('')
}
