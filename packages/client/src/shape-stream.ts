import { ResponseHeader, type ShapeSchema } from '@sluice/protocol'
import { type BackoffOptions, DEFAULT_BACKOFF, backoffDelay, parseRetryAfter } from './backoff.js'
import { FetchError, InvalidOptionsError, MissingHeadersError, NetworkError, isRetryable } from './errors.js'
import { type Message, isUpToDateMessage, parseBody, parseMessage } from './messages.js'
import { requestHeaders, requestUrl } from './request-url.js'
import { lastChangeOffset, parseSchema, readText, readTextWatched, sseEvents } from './response-reading.js'
import type { ReadWatch } from './sse-reader.js'
import {
  DEFAULT_LIVE_REQUEST_TIMEOUT_MS,
  DEFAULT_SSE_IDLE_TIMEOUT_MS,
  DEFAULT_MIN_SSE_CONNECTION_MS,
  type Dynamic,
  type RetryOptions,
  type ShapeParams,
  type ShapeStreamOptions,
  type Timers,
  realTimers,
  validateParams,
} from './stream-options.js'
import { type ResponseEvent, type StreamEvent, type StreamState, initialState, transition } from './stream-state.js'
import { type Row, type RowParser, createRowParserInPlace } from './value-parser.js'

/**
 * A shape's log, followed over HTTP (docs/protocol.md): `-1`, then chunk after
 * chunk until up to date, then live requests (long-poll, or SSE with a
 * fallback to long-poll), through 409 resets, retries and backoff.
 *
 * The loop makes one request at a time and publishes each response's messages
 * to every subscriber, awaiting them all before the next request: a slow
 * subscriber slows the stream instead of growing a buffer. The protocol state
 * lives in an immutable value driven by the transition table of
 * `stream-state.ts` (SPEC.md); this class does the I/O around it.
 */

export type Subscriber<T extends Row> = (messages: ReadonlyArray<Message<T>>) => void | Promise<void>

interface Subscription<T extends Row> {
  readonly callback: Subscriber<T>
  readonly onError: ((error: unknown) => void) | undefined
}

/** What a request sent ahead came to: its response, or the error the loop will meet when it gets to it. */
type AheadResult = { readonly url: string; readonly response: Response } | { readonly error: unknown }

/** A catch-up request sent before the loop got to it (see `#sendAhead`), and the position it asks for. */
interface Ahead {
  readonly handle: string | undefined
  readonly offset: string
  readonly cacheBuster: string | undefined
  readonly expiredHandle: string | undefined
  readonly controller: AbortController
  readonly unlink: () => void
  readonly result: Promise<AheadResult>
}

class LiveTimeout extends Error {
  override readonly name = 'LiveTimeout'
}

export class ShapeStream<T extends Row = Row> {
  readonly options: ShapeStreamOptions
  #state: StreamState
  #params: ShapeParams
  #headers: Readonly<Record<string, Dynamic<string>>>
  readonly #subscribers = new Set<Subscription<T>>()
  readonly #controller = new AbortController()
  readonly #fetch: typeof fetch
  readonly #timers: Timers
  readonly #random: () => number
  readonly #backoff: BackoffOptions
  readonly #stateListeners = new Set<(state: StreamState) => void>()
  #parser: { schema: ShapeSchema | undefined; parse: RowParser } | undefined
  #running: Promise<void> | undefined
  #ahead: Ahead | undefined
  #lastSyncedAt: number | undefined
  #requests = 0

  constructor(options: ShapeStreamOptions) {
    validateParams(options.params)
    if (options.offset !== undefined && options.offset !== '-1' && options.offset !== 'now' && options.handle === undefined) {
      throw new InvalidOptionsError(`offset ${options.offset} needs the shape handle it belongs to`)
    }
    this.options = options
    this.#params = options.params
    this.#headers = options.headers ?? {}
    this.#fetch = options.fetch ?? ((input, init) => fetch(input, init))
    this.#timers = options.timers ?? realTimers
    this.#random = options.random ?? Math.random
    this.#backoff = { ...DEFAULT_BACKOFF, ...options.backoff }
    this.#state = initialState({
      offset: options.offset ?? '-1',
      handle: options.offset === 'now' ? undefined : options.handle,
      transport: options.liveSse === true ? 'sse' : 'long-poll',
    })
    const signal = options.signal
    if (signal !== undefined) {
      if (signal.aborted) this.#controller.abort(signal.reason)
      else signal.addEventListener('abort', () => this.#controller.abort(signal.reason), { once: true })
    }
  }

  /** The protocol state (immutable; see SPEC.md). */
  get state(): StreamState {
    return this.#state
  }

  get shapeHandle(): string | undefined {
    return this.#state.handle
  }

  /** Offset of the next request: after everything published so far. */
  get lastOffset(): string {
    return this.#state.offset
  }

  get schema(): ShapeSchema | undefined {
    return this.#state.schema
  }

  get isUpToDate(): boolean {
    return this.#state.kind === 'live'
  }

  /** When the stream last reached the head of the log (ms since the epoch). */
  get lastSyncedAt(): number | undefined {
    return this.#lastSyncedAt
  }

  get isStopped(): boolean {
    return this.#state.kind === 'stopped'
  }

  /** The error that stopped the stream, if one did. */
  get error(): unknown {
    return this.#state.kind === 'stopped' ? this.#state.error : undefined
  }

  /** Requests made so far (every attempt counts). */
  get requestCount(): number {
    return this.#requests
  }

  /**
   * Receives every batch of messages; the stream waits for the returned promise
   * before its next request. The first subscriber starts the stream.
   */
  subscribe(callback: Subscriber<T>, onError?: (error: unknown) => void): () => void {
    const subscription: Subscription<T> = { callback, onError }
    this.#subscribers.add(subscription)
    this.#running ??= this.#run()
    return () => {
      this.#subscribers.delete(subscription)
    }
  }

  /** Called with each new state; returns an unsubscribe function. */
  onStateChange(listener: (state: StreamState) => void): () => void {
    this.#stateListeners.add(listener)
    return () => {
      this.#stateListeners.delete(listener)
    }
  }

  /** Stops the stream (as the `signal` option would); resolves once the loop has ended. */
  async stop(): Promise<void> {
    this.#controller.abort(new DOMException('stream stopped', 'AbortError'))
    await this.#running
  }

  /** Resolves when the loop has ended (stopped by an error or an abort). */
  get done(): Promise<void> {
    return this.#running ?? Promise.resolve()
  }

  #dispatch(event: StreamEvent): void {
    const before = this.#state
    this.#state = transition(before, event)
    if (this.#state.kind === 'live' && (event.type === 'response' || event.type === 'sseBatch')) this.#lastSyncedAt = this.#timers.now()
    if (this.#state === before) return
    for (const listener of this.#stateListeners) {
      try {
        listener(this.#state)
      } catch (error) {
        // A listener's bug must not stop the sync loop (nor reject it, unhandled).
        console.error(error)
      }
    }
  }

  async #run(): Promise<void> {
    try {
      await this.#loop()
    } finally {
      this.#dropAhead()
    }
  }

  async #loop(): Promise<void> {
    while (this.#state.kind !== 'stopped') {
      if (this.#controller.signal.aborted) {
        this.#dispatch({ type: 'abort' })
        break
      }
      try {
        const state = this.#state
        if (state.kind === 'live' && state.transport === 'sse') await this.#sseRequest()
        else await this.#request()
      } catch (error) {
        await this.#handleError(error)
      }
    }
  }

  async #request(): Promise<void> {
    const state = this.#state
    const isLive = state.kind === 'live'
    const sent = await this.#open(state)
    try {
      const { url, response } = sent
      if (await this.#handleStatus(url, response)) return
      const handle = response.headers.get(ResponseHeader.handle)
      const offset = response.headers.get(ResponseHeader.offset)
      const schemaText = response.headers.get(ResponseHeader.schema)
      const cursor = response.headers.get(ResponseHeader.cursor)
      const missing: string[] = []
      if (handle === null) missing.push(ResponseHeader.handle)
      if (offset === null) missing.push(ResponseHeader.offset)
      if (!isLive && schemaText === null && response.status === 200) missing.push(ResponseHeader.schema)
      if (isLive && cursor === null) missing.push(ResponseHeader.cursor)
      if (missing.length > 0 || handle === null || offset === null) throw new MissingHeadersError(url, missing)
      const schema = state.schema ?? (schemaText === null ? undefined : parseSchema(schemaText))
      const event: ResponseEvent = { type: 'response', handle, offset, schema, cursor: cursor ?? undefined, upToDate: response.headers.has(ResponseHeader.upToDate) }
      if (!event.upToDate) this.#sendAhead(transition(state, event))
      const text = sent.watch === undefined ? await readText(response, url) : await readTextWatched(response, url, sent.watch)
      const messages = parseBody<T>(text, this.#rowParser(schema))
      this.#dispatch(event)
      await this.#publish(messages)
    } finally {
      sent.release()
    }
  }

  /**
   * The response for `state`'s request: the one sent ahead for it if there is
   * one, else a new request (live ones with their watchdog).
   */
  async #open(state: StreamState): Promise<{ url: string; response: Response; release: () => void; watch?: ReadWatch }> {
    const ahead = this.#takeAhead(state)
    if (ahead !== undefined) {
      const sent = await ahead.result
      if ('error' in sent) {
        ahead.unlink()
        throw sent.error
      }
      return { ...sent, release: ahead.unlink }
    }
    const url = await this.#url(state, false)
    const headers = await this.#requestHeaders(false)
    const controller = new AbortController()
    const unlink = link(this.#controller.signal, controller)
    let watch: ReturnType<typeof networkWatchdog> | undefined
    if (state.kind === 'live') {
      const timeoutMs = this.options.liveRequestTimeoutMs ?? DEFAULT_LIVE_REQUEST_TIMEOUT_MS
      watch = networkWatchdog(timeoutMs, () => controller.abort(new LiveTimeout(`nothing from a live request for ${timeoutMs} ms`)))
    }
    const release = (): void => {
      watch?.stop()
      unlink()
    }
    try {
      const response = await this.#send(url, headers, controller.signal)
      // The watchdog is for a connection that brings nothing: from here it runs only while the body's next
      // bytes are awaited. A live answer can be a whole chunk (up to 10 MiB) that a slow link takes longer
      // than the watchdog to bring, and aborting it while it moves would only ask for it again.
      watch?.got()
      return { url, response, release, ...(watch === undefined ? {} : { watch }) }
    } catch (error) {
      release()
      throw error
    }
  }

  /**
   * Sends the request of `next` (the state the current response leads to) now,
   * while the current body is still being read, parsed and published, when
   * that request is a catch-up one: the server then works on the next chunk
   * and the kernel buffers it meanwhile, instead of both ends taking turns.
   * At most one request is ahead, and its body is read only when the loop gets
   * to it, so a slow subscriber still holds the stream back.
   */
  #sendAhead(next: StreamState): void {
    this.#dropAhead()
    if (next.kind !== 'syncing') return
    const controller = new AbortController()
    const unlink = link(this.#controller.signal, controller)
    const result = (async (): Promise<AheadResult> => {
      const url = await this.#url(next, false)
      const headers = await this.#requestHeaders(false)
      return { url, response: await this.#send(url, headers, controller.signal) }
    })().catch((error: unknown) => ({ error }))
    this.#ahead = { handle: next.handle, offset: next.offset, cacheBuster: next.cacheBuster, expiredHandle: next.expiredHandle, controller, unlink, result }
  }

  /** The request sent ahead, if it is `state`'s; any other one is dropped. */
  #takeAhead(state: StreamState): Ahead | undefined {
    const ahead = this.#ahead
    if (ahead === undefined) return undefined
    if (
      state.kind === 'syncing' &&
      ahead.handle === state.handle &&
      ahead.offset === state.offset &&
      ahead.cacheBuster === state.cacheBuster &&
      ahead.expiredHandle === state.expiredHandle
    ) {
      this.#ahead = undefined
      return ahead
    }
    this.#dropAhead()
    return undefined
  }

  #dropAhead(): void {
    const ahead = this.#ahead
    if (ahead === undefined) return
    this.#ahead = undefined
    ahead.controller.abort(new DOMException('request sent ahead no longer needed', 'AbortError'))
    ahead.unlink()
    void ahead.result.then((sent) => {
      if ('response' in sent) void sent.response.body?.cancel().catch(() => {})
    })
  }

  /**
   * One SSE connection: events are buffered until an up-to-date closes a batch
   * (so subscribers never see half a transaction), then published; the stream
   * resumes after the batch's last change. Streams that end or break quickly
   * with nothing delivered, or bring nothing for `sseIdleTimeoutMs`, count
   * towards the fallback to long-poll. A request whose answer, or whose next
   * bytes, take longer than that is abandoned and retried (the server sends a
   * keep-alive every 21 s).
   */
  async #sseRequest(): Promise<void> {
    const state = this.#state
    const url = await this.#url(state, true)
    const headers = await this.#requestHeaders(true)
    const controller = new AbortController()
    const unlink = link(this.#controller.signal, controller)
    const timeoutMs = this.options.sseIdleTimeoutMs ?? DEFAULT_SSE_IDLE_TIMEOUT_MS
    let timedOut = false
    const watchdog = networkWatchdog(timeoutMs, () => {
      timedOut = true
      controller.abort(new LiveTimeout(`nothing from an SSE request for ${timeoutMs} ms`))
    })
    const started = this.#timers.now()
    let streaming = false
    let delivered = 0
    try {
      const response = await this.#send(url, headers, controller.signal)
      watchdog.got()
      if (await this.#handleStatus(url, response)) return
      const contentType = response.headers.get(ResponseHeader.contentType) ?? ''
      if (!contentType.startsWith('text/event-stream') || response.body === null) {
        await response.body?.cancel().catch(() => {})
        this.#dispatch({ type: 'sseUnsupported' })
        return
      }
      streaming = true
      const cursor = response.headers.get(ResponseHeader.cursor) ?? undefined
      const parse = this.#rowParser(state.schema)
      let batch: Array<Message<T>> = []
      for await (const data of sseEvents(response.body, url, watchdog)) {
        const message = parseMessage<T>(data, parse)
        batch.push(message)
        if (!isUpToDateMessage(message)) continue
        this.#dispatch({ type: 'sseBatch', lastChangeOffset: lastChangeOffset(batch), cursor })
        const published = batch
        batch = []
        delivered += published.length
        await this.#publish(published)
        if (this.#controller.signal.aborted) return
      }
      if (this.#state.kind === 'live') {
        this.#dispatch({ type: 'sseEnded', short: delivered === 0 && this.#timers.now() - started < this.#minSse() })
      }
    } catch (error) {
      // A stream that broke soon with nothing delivered is as suspect as one that ended so, and so is one
      // silent past the watchdog (a proxy that buffers event streams, whose events would come only at the
      // stream's end). A request that failed before its stream began (offline, a 5xx, a 429) says nothing
      // about SSE: it is retried with backoff, and a brief outage must not switch SSE off for good.
      if (this.#state.kind === 'live' && streaming && !this.#controller.signal.aborted && isRetryable(error)) {
        this.#dispatch({ type: 'sseEnded', short: delivered === 0 && (timedOut || this.#timers.now() - started < this.#minSse()) })
      }
      throw error
    } finally {
      watchdog.stop()
      unlink()
    }
  }

  #minSse(): number {
    return this.options.minSseConnectionMs ?? DEFAULT_MIN_SSE_CONNECTION_MS
  }

  async #send(url: string, headers: Record<string, string>, signal: AbortSignal): Promise<Response> {
    this.#requests++
    try {
      return await this.#fetch(url, { headers, signal })
    } catch (error) {
      if (this.#controller.signal.aborted) throw error
      throw new NetworkError(url, signal.aborted ? signal.reason : error)
    }
  }

  /** 409 and error statuses; returns true when the response has been dealt with. */
  async #handleStatus(url: string, response: Response): Promise<boolean> {
    if (response.status === 409) {
      await response.body?.cancel().catch(() => {})
      const handle = response.headers.get(ResponseHeader.handle) ?? undefined
      this.#dispatch({ type: 'mustRefetch', handle, cacheBuster: randomToken(this.#random) })
      await this.#publish([{ headers: { control: 'must-refetch' } }])
      return true
    }
    if (response.status >= 400 || response.status < 200) {
      const text = await response.text().catch(() => '')
      throw new FetchError(response.status, url, text, response.headers)
    }
    return false
  }

  async #handleError(error: unknown): Promise<void> {
    this.#dropAhead()
    if (this.#controller.signal.aborted) {
      this.#dispatch({ type: 'abort' })
      return
    }
    if (isRetryable(error)) {
      this.#dispatch({ type: 'retryableError' })
      const failures = this.#state.failures
      if (failures <= this.#backoff.maxRetries) {
        const retryAfter = error instanceof FetchError ? parseRetryAfter(error.headers[ResponseHeader.retryAfter] ?? null, this.#timers.now()) : undefined
        const delay = backoffDelay(failures, this.#backoff, retryAfter, this.#random)
        try {
          await this.#timers.sleep(delay, this.#controller.signal)
        } catch {
          // Aborted while waiting: the loop sees the signal.
        }
        return
      }
    }
    const asError = error instanceof Error ? error : new Error(String(error))
    let retry: void | RetryOptions
    try {
      retry = await this.options.onError?.(asError)
    } catch (thrown) {
      this.#stopWith(thrown)
      return
    }
    if (retry !== undefined && retry !== null && typeof retry === 'object') {
      if (retry.params !== undefined) {
        const params = { ...this.#params, ...retry.params } as ShapeParams
        try {
          validateParams(params)
        } catch (invalid) {
          // Params the stream cannot send (a reserved name): the stream stops with that error, as with any option.
          this.#stopWith(invalid)
          return
        }
        this.#params = params
      }
      if (retry.headers !== undefined) this.#headers = { ...this.#headers, ...retry.headers }
      this.#dispatch({ type: 'recovered' })
      return
    }
    this.#stopWith(asError)
  }

  #stopWith(error: unknown): void {
    this.#dispatch({ type: 'fatalError', error })
    for (const subscription of this.#subscribers) tell(subscription.onError, error)
  }

  async #publish(messages: ReadonlyArray<Message<T>>): Promise<void> {
    if (messages.length === 0) return
    await Promise.all(
      [...this.#subscribers].map(async ({ callback, onError }) => {
        try {
          await callback(messages)
        } catch (error) {
          // One failing subscriber must not starve the others or stop the stream; without an error
          // callback of its own, its error goes to the console rather than nowhere.
          tell(onError ?? console.error, error)
        }
      }),
    )
  }

  #rowParser(schema: ShapeSchema | undefined): RowParser {
    if (this.#parser === undefined || this.#parser.schema !== schema) {
      // In place: the values are fresh from JSON.parse and reach subscribers only as the parsed row.
      this.#parser = { schema, parse: createRowParserInPlace(schema ?? {}, this.options.parser) }
    }
    return this.#parser.parse
  }

  #url(state: StreamState, sse: boolean): Promise<string> {
    return requestUrl({ url: this.options.url, params: this.#params, log: this.options.log ?? 'full' }, state, sse)
  }

  #requestHeaders(sse: boolean): Promise<Record<string, string>> {
    return requestHeaders(this.#headers, sse)
  }
}

/** Calls a subscriber's error callback; one that throws in turn is reported to the console. */
function tell(onError: ((error: unknown) => void) | undefined, error: unknown): void {
  try {
    onError?.(error)
  } catch (thrown) {
    console.error(thrown)
  }
}

/**
 * A timer that fires when the stream has waited on the network for `ms` in one
 * go: a connection gone half-open (a laptop asleep, a NAT that dropped its
 * state) brings nothing, not even keep-alives, until TCP gives up hours later.
 * It runs from its creation (the request) until `got()`, then again from each
 * `waiting()`: the time a slow subscriber takes between reads does not count.
 */
function networkWatchdog(ms: number, onTimeout: () => void): { waiting(): void; got(): void; stop(): void } {
  let since: number | undefined = Date.now()
  let timer: ReturnType<typeof setTimeout> | undefined
  const check = (): void => {
    timer = undefined
    if (since === undefined) return
    const waited = Date.now() - since
    if (waited >= ms) onTimeout()
    else timer = setTimeout(check, ms - waited)
  }
  timer = setTimeout(check, ms)
  return {
    waiting: () => {
      since = Date.now()
      timer ??= setTimeout(check, ms)
    },
    got: () => {
      since = undefined
    },
    stop: () => {
      clearTimeout(timer)
      timer = undefined
      since = undefined
    },
  }
}

function randomToken(random: () => number): string {
  return `${Math.floor(random() * 2 ** 32).toString(36)}${Math.floor(random() * 2 ** 32).toString(36)}`
}

/** Aborts `child` when `parent` aborts; returns the unlink function. */
function link(parent: AbortSignal, child: AbortController): () => void {
  if (parent.aborted) {
    child.abort(parent.reason)
    return () => {}
  }
  const onAbort = (): void => child.abort(parent.reason)
  parent.addEventListener('abort', onAbort, { once: true })
  return () => parent.removeEventListener('abort', onAbort)
}
