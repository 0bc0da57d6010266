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
import type { LiveWaiters } from './live-waiters.js'
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
export async function serveSse(options: ServeSseOptions): Promise<SseOutcome> {
  const { raw, waiters, handle } = options
  const timeoutMs = options.timeoutMs ?? DEFAULT_SSE_TIMEOUT_MS
  const keepAliveMs = options.keepAliveMs ?? DEFAULT_SSE_KEEP_ALIVE_MS
  const stream = new Stream(raw)
  try {
    raw.writeHead(200, sseHeaders(options.headers, options.cacheControl ?? liveSseCacheControl(timeoutMs)))
    raw.flushHeaders()

    let after = options.after
    const deadline = waiters.now() + timeoutMs
    let lastWrite = waiters.now()
    // Data already waiting is sent at once and the stream stays open: ending it
    // here would make every SSE request under a steady stream of commits a
    // short one, which the official client takes for a proxy that buffers SSE
    // and falls back to long-polling for good.
    const first = await options.read(after)
    if (first === undefined) return stream.gone ? 'disconnected' : 'invalidated'
    if (first.entryCount > 0) {
      after = first.nextOffset
      await stream.write(framed(first))
      if (first.reachedHead) await stream.write(frameEvent(options.upToDate(first.nextOffset)))
      lastWrite = waiters.now()
    }
    const signal = options.signal ? AbortSignal.any([options.signal, stream.closed]) : stream.closed
    /** Sends everything past `after` up to the head, chunk by chunk: `'gone'` when the shape is, `'empty'` when there was nothing. */
    const drain = async (): Promise<'sent' | 'empty' | 'gone'> => {
      for (let sent = false; ; sent = true) {
        const batch = await options.read(after)
        if (batch === undefined) return 'gone'
        if (batch.entryCount === 0 || stream.gone) return sent ? 'sent' : 'empty'
        after = batch.nextOffset
        await stream.write(framed(batch))
        lastWrite = waiters.now()
        if (batch.reachedHead) {
          await stream.write(frameEvent(options.upToDate(batch.nextOffset)))
          return 'sent'
        }
      }
    }
    for (;;) {
      if (stream.gone) return 'disconnected'
      if (options.signal?.aborted) return 'aborted'
      if (options.isInvalidated?.()) return 'invalidated'
      if (waiters.now() >= deadline) return 'timeout'
      // Checked and registered in one synchronous step (see SseRead).
      if (options.read.hasDataAfter?.(after)) {
        const drained = await drain()
        if (drained === 'gone') return stream.gone ? 'disconnected' : 'invalidated'
        if (drained === 'sent') continue
        // 'empty' despite the check (a reader that disagrees with itself): wait rather than spin.
      }
      const keepAliveAt = lastWrite + keepAliveMs
      const result = await waiters.wait(handle, { timeoutMs: Math.min(deadline, keepAliveAt) - waiters.now(), signal })
      if (result === 'invalidated') return 'invalidated'
      if (result === 'aborted') return stream.gone ? 'disconnected' : 'aborted' // our signal, or waiters.close()
      if (result === 'timeout') {
        if (waiters.now() >= deadline) return 'timeout'
        // Read once more before a comment: the safety net for a reader without hasDataAfter.
        const drained = await drain()
        if (drained === 'gone') return stream.gone ? 'disconnected' : 'invalidated'
        if (drained === 'empty' && waiters.now() >= keepAliveAt) {
          await stream.write(KEEP_ALIVE_COMMENT)
          lastWrite = waiters.now()
        }
        continue
      }
      // 'advanced'
      if ((await drain()) === 'gone') return stream.gone ? 'disconnected' : 'invalidated'
    }
  } catch (err) {
    stream.destroy()
    throw err
  } finally {
    stream.end()
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
      return { bytes, events, entryCount: got.entryCount, nextOffset: got.nextOffset, reachedHead: got.reachedHead }
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

/** The response side: writes with backpressure, notices the client leaving. */
class Stream {
  private readonly controller = new AbortController()
  private readonly onClose = (): void => {
    // 'close' after a normal end too; only an unfinished response means the client left.
    if (!this.raw.writableFinished) this.controller.abort()
  }

  constructor(private readonly raw: ServerResponse) {
    raw.on('close', this.onClose)
    if (raw.destroyed) this.controller.abort()
  }

  /** Aborts when the client disconnects. */
  get closed(): AbortSignal {
    return this.controller.signal
  }

  get gone(): boolean {
    return this.controller.signal.aborted
  }

  /** Resolves once the bytes are handed to the socket, or the client is gone. */
  write(bytes: Uint8Array): Promise<void> {
    if (this.gone || this.raw.destroyed) return Promise.resolve()
    if (this.raw.write(bytes)) return Promise.resolve()
    return new Promise((resolve) => {
      const done = (): void => {
        this.raw.off('drain', done)
        this.controller.signal.removeEventListener('abort', done)
        resolve()
      }
      this.raw.on('drain', done)
      this.controller.signal.addEventListener('abort', done, { once: true })
    })
  }

  destroy(): void {
    this.raw.destroy()
  }

  end(): void {
    this.raw.off('close', this.onClose)
    if (!this.raw.destroyed && !this.raw.writableEnded) this.raw.end()
    this.controller.abort() // lets AbortSignal.any drop its follower
  }
}
