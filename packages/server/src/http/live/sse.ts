/**
 * Server-sent events for `live=true&live_sse=true` (docs/protocol.md §5.5), on a
 * bare `node:http` response so it does not depend on fastify (the route hands
 * over `reply.raw` after `reply.hijack()`).
 *
 * - Headers go out at once: the caller's (electric-handle, -offset, -cursor,
 *   etag, CORS…) plus `content-type: text/event-stream`, `connection:
 *   keep-alive` and the SSE cache-control (`public, max-age=59` for 60 s).
 * - Data already past `after` goes out at once, chunk after chunk up to the
 *   head, as one `data: <json>\n\n` event per message, then an up-to-date event.
 * - The stream is then held: each time the shape advances, the new entries are
 *   read chunk after chunk up to the head, framed one event per message, and
 *   closed by an up-to-date event. `: keep-alive\n\n` after `keepAliveMs` of
 *   silence; the stream ends after `timeoutMs`, or silently when the shape is
 *   invalidated (the next request gets the 409), or when the client goes away.
 *
 * No per-stream timer: keep-alive and end-of-stream deadlines are the timeouts
 * of `LiveWaiters.wait`, i.e. buckets of the one shared timer wheel.
 * Messages are split out of the stored bytes by a byte scan, not a JSON parse
 * (`split-entries.ts`); the entry count the store reports is checked against it.
 */
import type { ServerResponse } from 'node:http'
import type { LogOffset } from '@sluice/protocol'
import { ResponseHeader, SSE_CONTENT_TYPE, compareOffsets, liveSseCacheControl } from '@sluice/protocol'
import type { ShapeLogStore } from '@sluice/storage'
import { readSpansAsync } from '@sluice/storage'
import { type LiveWaiters, type WaitResult, Waiter } from './live-waiters.js'
import { SharedRange, type SharedReads } from './shared-reads.js'
import { KEEP_ALIVE_COMMENT, MalformedEntriesError, frameEntries, frameEvent } from './split-entries.js'

/** Electric's `sse_timeout`. */
export const DEFAULT_SSE_TIMEOUT_MS = 60_000
/** Electric's `keepalive_interval`. */
export const DEFAULT_SSE_KEEP_ALIVE_MS = 21_000

/** One range of the log, as `ShapeLog.read` describes it, with its bytes read. */
export interface SseBatch {
  /** The stored bytes: each entry's JSON followed by `,` (a missing last `,` is tolerated). */
  readonly bytes: Uint8Array
  readonly entryCount: number
  /** Offset of the last entry of the range; `after` when empty. */
  readonly nextOffset: LogOffset
  /** The range ends at the published head. */
  readonly reachedHead: boolean
  /** `bytes` framed as SSE events already (shared by the streams woken by one write). */
  readonly events?: Buffer | undefined
  /** The events and then the up-to-date line as one more event, in one buffer shared by the streams woken by one write. */
  readonly eventsThen?: ((upToDate: string) => Promise<Buffer>) | undefined
}

export interface ServeSseOptions {
  /** The response; nothing must have been written to it yet. */
  readonly raw: ServerResponse
  /** Headers to send with the 200 (Electric headers, CORS, …). Ours override same-named ones. */
  readonly headers: Readonly<Record<string, string | number | string[]>>
  /** `cache-control`; default `liveSseCacheControl(timeoutMs)`; `false` sends none (`send_cache_headers: false`). */
  readonly cacheControl?: string | false
  readonly handle: string
  /** The request offset: entries strictly after it are sent. */
  readonly after: LogOffset
  /** Entries strictly after `after`, to their chunk end; `undefined` when the shape is gone. `readFromStore` makes one. */
  readonly read: SseRead
  /** The up-to-date control line (JSON, no framing) for a batch ending at `nextOffset`. */
  readonly upToDate: (nextOffset: LogOffset) => string | Uint8Array
  readonly waiters: LiveWaiters
  /** Checked before every wait: the shape was rotated or deleted. */
  readonly isInvalidated?: () => boolean
  /** Stream lifetime; default 60 s. */
  readonly timeoutMs?: number
  /** Silence before a keep-alive comment; default 21 s. */
  readonly keepAliveMs?: number
  /** Ends the stream (server shutdown). */
  readonly signal?: AbortSignal
}

/**
 * Reads a range for `serveSse`. `hasDataAfter`, when present, is a synchronous
 * check of the published head (true also when the shape is gone), run right
 * before each wait: `read` is asynchronous, so a flush can land between its
 * look at the head and the wait, and only this check (in the same synchronous
 * step as the wait) sees it. Without it such a batch goes out at the next
 * flush or, at the latest, at the next keep-alive tick, where the stream reads
 * again before sending a comment. `readFromStore` provides it.
 */
export type SseRead = ((after: LogOffset) => SseBatch | undefined | Promise<SseBatch | undefined>) & {
  readonly hasDataAfter?: ((after: LogOffset) => boolean) | undefined
}

/**
 * How the stream ended: `'timeout'`
 * the stream lifetime passed; `'invalidated'` the shape went away (silent end);
 * `'disconnected'` the client closed the connection; `'aborted'` the signal or
 * `waiters.close()` ended it.
 */
export type SseOutcome = 'timeout' | 'invalidated' | 'disconnected' | 'aborted'

/**
 * Serves one SSE request to its end. Rejects only if `read` throws or the stored
 * bytes are malformed; the headers have been sent by then, so the response is
 * destroyed first (the client sees a broken stream and retries).
 */
export function serveSse(options: ServeSseOptions): Promise<SseOutcome> {
  return new Promise<SseOutcome>((resolve, reject) => startSse(options, (outcome, error) => (outcome === undefined ? reject(error) : resolve(outcome))))
}

/**
 * `serveSse` with a callback instead of a promise: `ended` is called once,
 * with the outcome, or with `undefined` and the error where `serveSse` would
 * reject. What the route uses: a held stream then keeps no promise, no
 * reaction and no resolving functions of its own (a parked stream's memory is
 * what ten thousand of them cost).
 */
export function startSse(options: ServeSseOptions, ended: SseEnded): void {
  const headers = sseHeaders(options.headers, options.cacheControl ?? liveSseCacheControl(options.timeoutMs ?? DEFAULT_SSE_TIMEOUT_MS))
  // The stream keeps its options for its whole life, the headers are sent once: not kept.
  const kept: ServeSseOptions = { ...options, headers: NO_HEADERS }
  new SseStream(kept, ended).start(headers)
}

/** How `startSse` reports the end of a stream: an outcome, or `undefined` and the error. */
export type SseEnded = (outcome: SseOutcome | undefined, error?: unknown) => void

const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({})

/**
 * One stream. Between batches it is parked on the live waiters as itself (a
 * `Waiter`), with no suspended call, promise or abort signal of its own, the
 * way a parked long-poll is (`DataWait`); an async step runs only while a
 * batch is read and written. Ten thousand streams woken by one write each
 * take the write's shared events, up-to-date line included, in one socket
 * write.
 */
class SseStream extends Waiter {
  private after: LogOffset
  private readonly deadline: number
  private readonly keepAliveMs: number
  private lastWrite: number
  /** The client went away before the stream ended. */
  private gone = false
  /** `options.signal` fired (server shutdown). */
  private aborted = false
  private ended = false
  /** Set while a write waits for the socket to drain: called when it does, or when the client leaves. */
  private drained: (() => void) | undefined = undefined
  private readonly onClose = (): void => {
    // 'close' after a normal end too; only an unfinished response means the client left.
    if (!this.options.raw.writableFinished) this.leave()
  }
  /** Made only for a stream given a signal (the route gives none). */
  private onAbort: (() => void) | undefined = undefined

  constructor(
    private readonly options: ServeSseOptions,
    private readonly onEnd: SseEnded,
  ) {
    super()
    const now = options.waiters.now()
    this.after = options.after
    this.deadline = now + (options.timeoutMs ?? DEFAULT_SSE_TIMEOUT_MS)
    this.keepAliveMs = options.keepAliveMs ?? DEFAULT_SSE_KEEP_ALIVE_MS
    this.lastWrite = now
  }

  start(headers: Record<string, string | number | string[]>): void {
    const { raw, signal } = this.options
    raw.on('close', this.onClose)
    if (raw.destroyed) this.gone = true
    if (signal !== undefined) {
      if (signal.aborted) this.aborted = true
      else {
        this.onAbort = () => {
          this.aborted = true
          if (this.isParked) this.options.waiters.cancel(this)
        }
        signal.addEventListener('abort', this.onAbort, { once: true })
      }
    }
    try {
      raw.writeHead(200, headers)
      raw.flushHeaders()
    } catch (error) {
      this.fail(error)
      return
    }
    // HEAD: the stream's headers, and no body to hold the connection open for (Node would only drop its bytes).
    if (raw.req?.method === 'HEAD') return this.finish('timeout')
    // Data already waiting is sent at once and the stream stays open: ending it
    // here would make every SSE request under a steady stream of commits a
    // short one, which the official client takes for a proxy that buffers SSE
    // and falls back to long-polling for good.
    this.pump('advanced')
  }

  /** What comes next, decided in one synchronous step with the head check (see SseRead): end, send what is there, or park. */
  private next(checkHead: boolean): void {
    const { waiters, read } = this.options
    if (this.gone) return this.finish('disconnected')
    if (this.aborted) return this.finish('aborted')
    if (this.options.isInvalidated?.()) return this.finish('invalidated')
    const now = waiters.now()
    if (now >= this.deadline) return this.finish('timeout')
    if (checkHead && read.hasDataAfter?.(this.after)) return this.pump('check')
    const keepAliveAt = this.lastWrite + this.keepAliveMs
    const early = waiters.park(this, this.options.handle, Math.min(this.deadline, keepAliveAt) - now)
    if (early !== undefined) this.wake(early)
  }

  wake(result: WaitResult): void {
    if (this.ended) return
    if (result === 'advanced') return this.pump('advanced')
    if (result === 'invalidated') return this.finish('invalidated')
    if (result === 'aborted') return this.finish(this.gone ? 'disconnected' : 'aborted')
    if (this.options.waiters.now() >= this.deadline) return this.finish('timeout')
    // Read once more before a comment: the safety net for a reader without hasDataAfter.
    this.pump('timeout')
  }

  /**
   * Sends what is past `after`, then goes on with `next`. After a timeout, a
   * comment if there was nothing and the silence has lasted. Found nothing
   * after the head check said there was (a reader that disagrees with
   * itself): park rather than spin.
   */
  private pump(reason: 'advanced' | 'check' | 'timeout'): void {
    this.drain().then(
      async (drained) => {
        if (this.ended) return
        if (drained === 'gone') return this.finish(this.gone ? 'disconnected' : 'invalidated')
        if (drained === 'empty' && reason === 'timeout' && this.options.waiters.now() >= this.lastWrite + this.keepAliveMs) {
          await this.write(KEEP_ALIVE_COMMENT)
          this.lastWrite = this.options.waiters.now()
        }
        this.next(!(drained === 'empty' && reason === 'check'))
      },
    ).catch((error: unknown) => this.fail(error))
  }

  /** Sends everything past `after` up to the head, chunk by chunk: `'gone'` when the shape is, `'empty'` when there was nothing. */
  private async drain(): Promise<'sent' | 'empty' | 'gone'> {
    const { read, upToDate } = this.options
    for (let sent = false; ; sent = true) {
      const got = read(this.after)
      const batch = got instanceof Promise ? await got : got
      if (batch === undefined) return 'gone'
      if (batch.entryCount === 0 || this.gone) return sent ? 'sent' : 'empty'
      this.after = batch.nextOffset
      let bytes: Buffer
      if (!batch.reachedHead) bytes = framed(batch)
      else {
        const line = upToDate(batch.nextOffset)
        bytes = typeof line === 'string' && batch.eventsThen !== undefined ? await batch.eventsThen(line) : Buffer.concat([framed(batch), frameEvent(line)])
      }
      await this.write(bytes)
      this.lastWrite = this.options.waiters.now()
      if (batch.reachedHead) return 'sent'
    }
  }

  /** Hands the bytes to the socket; the promise, when there is one, resolves once the socket drains or the client is gone. */
  private write(bytes: Uint8Array): Promise<void> | undefined {
    const { raw } = this.options
    if (this.gone || raw.destroyed) return undefined
    if (raw.write(bytes)) return undefined
    return new Promise<void>((resolve) => {
      // Nothing else ends a stream whose client stopped reading: parked or not, its deadline is only looked at
      // between writes. So a write that has not drained by then (and not within a keep-alive interval of now,
      // a slow reader's time to catch up) cuts the connection, and the 'close' that follows ends the stream.
      const stalled = setTimeout(() => raw.destroy(), Math.max(this.deadline - this.options.waiters.now(), this.keepAliveMs))
      const done = (): void => {
        clearTimeout(stalled)
        raw.off('drain', done)
        this.drained = undefined
        resolve()
      }
      this.drained = done
      raw.on('drain', done)
    })
  }

  private leave(): void {
    this.gone = true
    if (this.isParked) this.options.waiters.cancel(this)
    this.drained?.()
  }

  private cleanUp(): boolean {
    if (this.ended) return false
    this.ended = true
    const { raw, signal, waiters } = this.options
    raw.off('close', this.onClose)
    if (this.onAbort !== undefined) signal?.removeEventListener('abort', this.onAbort)
    if (this.isParked) waiters.cancel(this)
    this.drained?.()
    return true
  }

  private finish(outcome: SseOutcome): void {
    if (!this.cleanUp()) return
    const { raw } = this.options
    if (!raw.destroyed && !raw.writableEnded) raw.end()
    this.onEnd(outcome)
  }

  private fail(error: unknown): void {
    if (!this.cleanUp()) return
    this.options.raw.destroy()
    this.onEnd(undefined, error)
  }
}

/**
 * A `read` for `serveSse` straight from the store: `store.get(handle).read(after)`,
 * its spans read (on the thread pool for file spans) and released. With
 * `shared`, streams (and long-polls) woken by the same write at the same
 * offset get one read and one framing of it (`shared-reads.ts`).
 */
export function readFromStore(
  store: Pick<ShapeLogStore, 'get'>,
  handle: string,
  shared?: SharedReads,
): ((after: LogOffset) => Promise<SseBatch | undefined>) & { hasDataAfter(after: LogOffset): boolean } {
  const hasDataAfter = (after: LogOffset): boolean => {
    const log = store.get(handle)
    return log === undefined || compareOffsets(log.head().lastOffset, after) > 0
  }
  const read = async (after: LogOffset): Promise<SseBatch | undefined> => {
    const log = store.get(handle)
    if (!log) return undefined
    const got = shared === undefined ? log.read(after) : shared.read(log, after)
    if (got instanceof SharedRange) {
      // Asked for in this turn: a shared file range is only held until the turn ends.
      const [bytes, events] = await Promise.all([got.bytes(), got.sseEvents()])
      const eventsThen = (upToDate: string): Promise<Buffer> => got.sseEventsThen(upToDate)
      return { bytes, events, eventsThen, entryCount: got.entryCount, nextOffset: got.nextOffset, reachedHead: got.reachedHead }
    }
    const read = got
    try {
      const bytes = read.entryCount === 0 ? Buffer.alloc(0) : await readSpansAsync(read)
      return { bytes, entryCount: read.entryCount, nextOffset: read.nextOffset, reachedHead: read.reachedHead }
    } finally {
      read.release()
    }
  }
  return Object.assign(read, { hasDataAfter })
}

function framed(batch: SseBatch): Buffer {
  if (batch.events !== undefined) return batch.events
  const { events, entryCount } = frameEntries(batch.bytes)
  if (entryCount !== batch.entryCount) {
    throw new MalformedEntriesError(`stored range has ${entryCount} entries by scan, ${batch.entryCount} by the store`)
  }
  return events
}

const OURS = new Set<string>([ResponseHeader.contentType, ResponseHeader.connection, ResponseHeader.cacheControl])

function sseHeaders(
  given: Readonly<Record<string, string | number | string[]>>,
  cacheControl: string | false,
): Record<string, string | number | string[]> {
  const out: Record<string, string | number | string[]> = {}
  for (const [name, value] of Object.entries(given)) if (!OURS.has(name.toLowerCase())) out[name] = value
  out[ResponseHeader.contentType] = SSE_CONTENT_TYPE
  out[ResponseHeader.connection] = 'keep-alive'
  if (cacheControl !== false) out[ResponseHeader.cacheControl] = cacheControl
  return out
}
