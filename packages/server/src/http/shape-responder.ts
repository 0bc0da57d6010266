import { Readable } from 'node:stream'
import {
  CacheControl,
  type LogOffset,
  MUST_REFETCH_BODY,
  RequestHeader,
  ResponseHeader,
  type ShapeRequest,
  SluiceError,
  UP_TO_DATE_VALUE,
  compareOffsets,
  etagValue,
  formatOffset,
  formatRequestOffset,
  ifNoneMatchIncludes,
  invalidRequest,
  isBeforeAll,
  nonLiveCacheControl,
  upToDateMessage,
} from '@sluice/protocol'
import { type LogRead, type ShapeLog, StorageError } from '@sluice/storage'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { type ResolvedShape, type ShapeService, headOffset } from '../shape-service.js'
import { type Admission, type AdmissionWaiter, type RequestKind, clientKey } from './admission.js'
import type { HttpMetrics } from './http-metrics.js'
import {
  DataWait,
  type LiveWaiters,
  type LongPollResult,
  SharedRange,
  type SharedReads,
  type WaitForDataOptions,
  readFromStore,
  startSse,
} from './live/index.js'
import type { Sendfile } from '@sluice/sendfile'
import type { BodyPath } from './body-path.js'
import { BUFFERED_BODY_MAX_BYTES, STREAM_PIECE_BYTES, streamedLogBody } from './log-body.js'
import { type LongPollParking, ParkedLongPoll, wouldWait } from './parked-long-polls.js'
import { RangeCache } from './range-cache.js'
import { type ReadyShape, awaitReady, replacementHandle, resolveShape } from './open-shape.js'
import type { HttpOptions } from './options.js'
import { schemaHeader } from './schema-header.js'
import { liveCursor, liveHeaders, mustRefetchHeaders, rangeHeaders } from './shape-headers.js'
import { canSendfile, fileBytes, sendfileBody } from './sendfile-body.js'
import type { SharedBodies } from './shared-bodies.js'
import type { StalledSends } from './stalled-sends.js'

/**
 * One GET of `/v1/shape` from admission to answer (`shape-routes.ts` registers
 * the route): `QueuedRequest` while it waits for an admission slot, then
 * `ShapeResponder`, which resolves the shape, waits for data when it must
 * (parked on the live waiters as its own wait) and sends the body by the
 * app's body path.
 */

/** The waiter registry (src/http/live), shared by long-polls and SSE streams. */
export type ShapeWaiters = LiveWaiters

/** What every GET of one app shares: made once in `shapeRoutes`, not per request. */
export interface ShapeReadContext {
  readonly shapes: ShapeService
  readonly http: HttpOptions
  readonly waiters: ShapeWaiters
  readonly metrics: HttpMetrics | undefined
  readonly bodyPath: BodyPath
  /** Bodies of identical reads in flight, shared. */
  readonly bodies: SharedBodies
  /** Bodies of ranges recently served, kept (`range-cache.ts`). */
  readonly ranges: RangeCache
  /** `waitForData` for a long-poll: data after the offset, while the shape stays active. */
  readonly untilData: WaitForDataOptions
  /** `waitForData` for an offset past the head: the head reaching it. */
  readonly untilReached: WaitForDataOptions
  /** Counts one read of a log range (the `sluice_http_log_reads_total` metric). */
  readonly countRead: () => void
  /** Live requests woken by one write read its entries once (`live/shared-reads.ts`). */
  readonly sharedReads: SharedReads
  /** Admission control of new shapes (`Admission.creationGate` and `replacementGate`). */
  readonly admission: Admission
  /** Bodies being sent, cut when their client stops taking them. */
  readonly stalled: StalledSends
  /** Where live requests that wait are parked outside node:http; undefined: they wait in it. */
  readonly parking?: LongPollParking | undefined
}

/**
 * A GET over its kind's limit, waiting in the admission queue for a slot: it
 * starts its `ShapeResponder` when admitted, is answered the 503 when refused,
 * and leaves the queue at once if its client goes away, having started nothing.
 */
export class QueuedRequest implements AdmissionWaiter {
  private onClose: (() => void) | undefined = undefined

  constructor(
    private readonly context: ShapeReadContext,
    private readonly request: FastifyRequest,
    private readonly reply: FastifyReply,
    private readonly req: ShapeRequest,
    private readonly kind: RequestKind,
  ) {}

  queued(): void {
    const cancel = (): void => this.context.admission.cancel(this.kind, this)
    // Gone before it was queued: its 'close' has been emitted already.
    if (this.reply.raw.destroyed) return cancel()
    this.onClose = cancel
    this.reply.raw.once('close', cancel)
  }

  admitted(): void {
    this.stopListening()
    new ShapeResponder(this.context, this.request, this.reply, this.req, this.kind).start()
  }

  refused(error: SluiceError): void {
    this.stopListening()
    this.reply.send(error)
  }

  private stopListening(): void {
    if (this.onClose !== undefined) this.reply.raw.off('close', this.onClose)
    this.onClose = undefined
  }
}

/** What `serve` returns when the request waits for data: its answer is sent when the wait ends. */
const WAITING = Symbol('waiting')
type Served = FastifyReply | typeof WAITING

/**
 * One GET from start to answer. It is also the request's wait for data
 * (`DataWait`): an offset past the head waits for the log to reach it, a
 * long-poll for data after it, each parked on the live waiters with no
 * suspended call, and what comes of the wait is sent from `dataWaitEnded`.
 * While its shape is resolved (perhaps created) and while parked it listens
 * for the client leaving (one listener, removed after each). The admission
 * permit is held until the answer is sent, or until the request fails, is
 * abandoned, or its client leaves.
 */
export class ShapeResponder extends DataWait<ShapeLog> {
  /** What the request waits for, while it waits (the log and offset are `waitedLog`, `waitedAfter`). */
  private waitingFor: 'reach' | 'data' | undefined = undefined
  /** The shape served, once it is ready. */
  private shape: ResolvedShape | undefined = undefined
  /** Set when the client went away while the request waited. */
  private gone = false
  /** Aborted when the client leaves while its shape is resolved (a wait for a creation slot ends with it). */
  private leaving: AbortController | undefined = undefined
  /** The admission this request holds until `finish` (`Admission.enter`), undefined once left. */
  private admitted: RequestKind | undefined
  /** The 'close' listener while the shape is resolved and while parked: `wentAway` bound (no closure). */
  private onClose: (() => void) | undefined = undefined

  constructor(
    private readonly context: ShapeReadContext,
    private readonly request: FastifyRequest,
    private readonly reply: FastifyReply,
    private readonly req: ShapeRequest,
    admitted: RequestKind,
  ) {
    super()
    this.admitted = admitted
  }

  /** The request's offset as the client wrote it (§3.3); made when needed rather than held by a parked request. */
  private get requestOffset(): string {
    return formatRequestOffset(this.req.offset)
  }

  private get shapes(): ShapeService {
    return this.context.shapes
  }

  private get http(): HttpOptions {
    return this.context.http
  }

  start(): void {
    this.serve().then(
      (served) => {
        if (served !== WAITING) this.finish()
      },
      (error: unknown) => this.fail(error),
    )
  }

  /** The request's work is over: its admission goes back. */
  private finish(): void {
    const admitted = this.admitted
    this.admitted = undefined
    if (admitted !== undefined) this.context.admission.leave(admitted)
  }

  /** What fastify does with an async handler's rejection: the error handler answers (`sendError`), unless a reply went out. */
  private fail(error: unknown): void {
    const shape = this.shape
    if (shape !== undefined && !this.reply.sent && error instanceof StorageError && error.code === 'shape_deleted') {
      // The log was deleted under the read (expired or evicted between the lookup and the read, or, on a
      // replica, deleted by the writer): the shape is gone, which a 409 says, not a server failure.
      this.shape = undefined
      this.rotated(shape).then(
        () => this.finish(),
        (next: unknown) => this.fail(next),
      )
      return
    }
    this.finish()
    if (this.reply.sent) {
      this.request.log.error({ err: error }, 'request failed after its reply was sent')
      return
    }
    this.reply.send(error instanceof Error ? error : new Error(String(error)))
  }

  private async serve(): Promise<Served> {
    const params = this.req.shape
    if (params === undefined) throw invalidRequest({ table: ["can't be blank"] })
    const client = clientKey(this.request, this.http.clientIdHeader)
    // Resolving may wait long (the creation queue, a snapshot): a client that leaves meanwhile gives its admission
    // back at once, and its place in the creation queue too.
    this.leaving = new AbortController()
    const creationGate = this.context.admission.creationGateFor(this.leaving.signal)
    this.listenForLeaving()
    let resolved: ResolvedShape | 'refetch'
    let ready: ReadyShape | undefined
    try {
      resolved = await resolveShape(this.shapes, params, this.req, creationGate, client)
      if (resolved !== 'refetch' && (this.req.handle === undefined || this.req.handle === resolved.handle)) {
        ready = await awaitReady(this.shapes, resolved, params, this.req.handle !== undefined, creationGate, client)
      }
    } catch (error) {
      if (this.cancelled()) return this.abandon()
      throw error
    } finally {
      this.reply.raw.off('close', this.onClose!)
      this.leaving = undefined
    }
    if (this.cancelled()) return this.abandon()
    if (resolved === 'refetch') return this.mustRefetch(undefined)
    if (this.req.handle !== undefined && this.req.handle !== resolved.handle) return this.mustRefetch(resolved.handle)
    if (ready === undefined) return this.rotated(resolved)
    const { shape, log } = ready
    this.shape = shape

    if (this.req.offset === 'now') return this.sendNoChanges(shape, headOffset(log))
    const after = this.req.offset
    if (!isBeforeAll(after) && compareOffsets(after, headOffset(log)) > 0) {
      // An offset past the head: wait (half the long-poll timeout) for the log to get there.
      return this.wait('reach', shape, log, after, this.http.longPollTimeoutMs / 2, this.context.untilReached)
    }
    return this.serveAt(shape, log, after)
  }

  /** The offset is at or before the head. */
  private serveAt(shape: ResolvedShape, log: ShapeLog, after: LogOffset): Promise<Served> | Served {
    if (!this.req.live) return this.sendRead(shape, this.readLog(log, after), log.id)
    if (this.req.liveSse) return this.streamSse(shape, after)
    return this.wait('data', shape, log, after, this.http.longPollTimeoutMs, this.context.untilData)
  }

  private wait(what: 'reach' | 'data', shape: ResolvedShape, log: ShapeLog, after: LogOffset, timeoutMs: number, options: WaitForDataOptions): Served {
    const parking = this.context.parking
    if (what === 'data' && parking !== undefined && wouldWait(log, after) && parking.accepts(this.request) && this.park(parking, shape, log, after)) {
      return WAITING
    }
    this.waitingFor = what
    this.shape = shape
    this.listenForLeaving()
    this.waitForData(log, after, this.context.waiters, timeoutMs, options, shape.handle)
    return WAITING
  }

  /**
   * Hands the request's connection and its wait to a `ParkedLongPoll`, which
   * answers it: nothing of this object, fastify's or node:http's stays. False
   * when the connection could not be taken (the request then waits here).
   */
  private park(parking: LongPollParking, shape: ResolvedShape, log: ShapeLog, after: LogOffset): boolean {
    const client = clientKey(this.request, this.http.clientIdHeader)
    const parked = new ParkedLongPoll(this.context, parking, shape, this.req, ParkedLongPoll.hookHeaders(this.reply), client, this.admitted)
    if (!parking.take(this.request, this.reply, parked)) return false
    // The parked wait holds the admission now, and gives it back when it has answered.
    this.admitted = undefined
    parked.start(log, after)
    return true
  }

  private listenForLeaving(): void {
    this.onClose ??= this.wentAway.bind(this)
    this.reply.raw.on('close', this.onClose)
  }

  private wentAway(): void {
    if (this.reply.raw.writableFinished) return
    this.gone = true
    this.leaving?.abort(new DOMException('the client went away', 'AbortError'))
    // Parked: the wait ends ('aborted'), and nothing is answered. Resolving its shape: the admission goes back
    // now, and once the shape is ready nothing is read for it.
    if (this.waitingFor !== undefined) this.cancelDataWait()
    else this.finish()
  }

  /** A client already gone when the request was about to park ends the wait at once (see DataWait). */
  protected override cancelled(): boolean {
    if (this.reply.raw.destroyed && !this.reply.raw.writableFinished) this.gone = true
    return this.gone
  }

  /** The wait is over (perhaps at once): answer, and then the request's work is done. */
  protected dataWaitEnded(result: LongPollResult): void {
    this.reply.raw.off('close', this.onClose!)
    const what = this.waitingFor!
    this.waitingFor = undefined
    const answered = what === 'reach' ? this.reached(result) : this.longPollEnded(result)
    answered.then(
      (served) => {
        if (served !== WAITING) this.finish()
      },
      (error: unknown) => this.fail(error),
    )
  }

  private async reached(result: LongPollResult): Promise<Served> {
    const shape = this.shape!
    if (result === 'data') return this.serveAt(shape, this.waitedLog!, this.waitedAfter!)
    if (result === 'invalidated') return this.rotated(shape)
    if (result === 'timeout') throw this.shapes.offsetNotReached()
    if (this.gone) return this.abandon()
    throw new SluiceError('stack_not_ready', { message: 'Server is shutting down' })
  }

  private async longPollEnded(result: LongPollResult): Promise<Served> {
    const shape = this.shape!
    if (result === 'data') {
      // Checked again in the step that reads: the shape may have gone while the wait's answer was delivered.
      if (this.shapes.status(shape.handle) !== 'active') return this.rotated(shape)
      // A HEAD reads no body (sendHeadersOnly): the store's read alone, not a shared range copied in full.
      if (this.request.method === 'HEAD') return this.sendRead(shape, this.readLog(this.waitedLog!, this.waitedAfter!), this.waitedLog!.id)
      // Every live request of this shape woken by the same write, at the same offset, gets the same read.
      return this.sendRead(shape, this.context.sharedReads.read(this.waitedLog!, this.waitedAfter!), this.waitedLog!.id)
    }
    if (result === 'invalidated') return this.rotated(shape)
    if (result === 'aborted') {
      if (this.gone) return this.abandon()
      // Aborted without the client leaving: the server is closing, so answer as a timeout would, on a connection
      // that then closes (the client's next request goes to a server that is not closing).
      this.reply.header(ResponseHeader.connection, 'close')
    }
    return this.sendNoChanges(shape, this.waitedAfter!)
  }

  /**
   * `live_sse=true` (§5.5): the live module streams; this supplies the headers
   * (CORS and electric-server already set by hooks), the reader and the
   * up-to-date line. Its `global_last_seen_lsn` is the batch's commit LSN, which
   * the official client turns into its next offset (§5.5 quirk); a batch
   * ending in the snapshot region reports the watermark instead.
   */
  private streamSse(shape: ResolvedShape, after: LogOffset): Promise<FastifyReply> | Served {
    const shapes = this.shapes
    if (shapes.status(shape.handle) !== 'active') return this.rotated(shape)
    const headers: Record<string, string | number | string[]> = {}
    for (const [name, value] of Object.entries(this.reply.getHeaders())) {
      if (value !== undefined) headers[name] = value
    }
    headers[ResponseHeader.handle] = shape.handle
    headers[ResponseHeader.offset] = this.requestOffset
    headers[ResponseHeader.cursor] = this.cursor()
    this.reply.hijack()
    // While the stream is held, the request is the stream's own object and this one (see DataWait): no suspended call, no promise.
    startSse(
      {
        raw: this.reply.raw,
        headers,
        handle: shape.handle,
        after,
        read: readFromStore(shapes, shape.handle, this.context.sharedReads),
        upToDate: (next) => upToDateMessage(next.tx > 0n ? next.tx : shapes.lastSeenLsn),
        waiters: this.context.waiters,
        isInvalidated: () => shapes.status(shape.handle) !== 'active',
        // No signal: the stream notices its client leaving itself, and waiters.close() ends it at shutdown.
        timeoutMs: this.http.sseTimeoutMs,
      },
      (outcome, error) => {
        // The stream was already open: it has been cut, and the client reconnects.
        if (outcome === undefined) this.request.log.error({ err: error }, 'SSE stream failed')
        this.finish()
      },
    )
    return WAITING
  }

  private readLog(log: ShapeLog, after: LogOffset): LogRead {
    const read = log.read(after)
    this.context.countRead()
    return read
  }

  /** A range of log `logId`: 304 if the client holds it, else its stored bytes. */
  private async sendRead(shape: ResolvedShape, read: LogRead | SharedRange, logId: string): Promise<FastifyReply> {
    const end = read.nextOffset
    const responseOffset = formatOffset(end)
    // Up-to-date iff the range ends at the head, never for offset=-1 (§4.3).
    const upToDate = read.reachedHead && !(this.req.offset !== 'now' && isBeforeAll(this.req.offset))
    const requestOffset = this.requestOffset
    const etag = etagValue({ handle: shape.handle, requestOffset, responseOffset })
    this.commonHeaders(shape, responseOffset, etag, true)
    if (ifNoneMatchIncludes(this.request.headers[RequestHeader.ifNoneMatch], etag)) {
      if (!(read instanceof SharedRange)) read.release()
      this.reply.removeHeader(ResponseHeader.schema)
      return this.reply.code(304).send()
    }
    if (upToDate) this.reply.header(ResponseHeader.upToDate, UP_TO_DATE_VALUE)
    const durable = this.shapes.lastSeenLsn
    // global_last_seen_lsn (§3.4): live with data → the range's commit LSN; otherwise the larger of that and the watermark.
    const lsn = this.req.live && end.tx > 0n ? end.tx : end.tx > durable ? end.tx : durable
    const tail = upToDate ? upToDateMessage(lsn) : undefined
    if (this.request.method === 'HEAD') return this.sendHeadersOnly(read, tail)
    if (read instanceof SharedRange) return this.sendShared(read, tail)
    // The log's id and the two offsets name the stored bytes exactly (a log's range never changes; a compaction
    // makes a new log, with a new id); the tail the rest.
    const range = RangeCache.key(logId, requestOffset, responseOffset)
    return this.sendOwn(read, tail, logId, range)
  }

  /** A range shared with the other live requests of this burst: one buffer for all, or one file range all sendfile from. */
  private async sendShared(range: SharedRange, tail: string | undefined): Promise<FastifyReply> {
    const { bodyPath, metrics } = this.context
    if (range.isFile && bodyPath.name === 'sendfile' && canSendfile(bodyPath.sendfile, this.request.raw.socket)) {
      const hold = range.holdFile()
      if (hold !== undefined) return this.sendfile(hold, tail, bodyPath.sendfile)
    }
    const body = await range.body(tail)
    metrics?.addBytesServed(body.length, 'pread')
    if (body.length <= BUFFERED_BODY_MAX_BYTES) return this.sent(this.reply.code(200).send(body))
    // In pieces, as a streamed body goes: each one written is progress a stalled client shows none of.
    return this.sent(this.reply.code(200).header('content-length', body.length).send(Readable.from(pieces(body))))
  }

  /**
   * HEAD: a GET's headers, its content-length included, and no body, so none
   * is read (a chunk is up to 10 MiB). An empty stream as the payload: fastify's
   * HEAD handling then keeps the content-length set here.
   */
  private sendHeadersOnly(read: LogRead | SharedRange, tail: string | undefined): FastifyReply {
    if (!(read instanceof SharedRange)) read.release()
    return this.reply.code(200).header('content-length', bodyLength(read.byteLength, tail)).send(Readable.from([]))
  }

  /** A body handed to fastify: watched until it is all sent (`StalledSends`). */
  private sent(reply: FastifyReply): FastifyReply {
    this.context.stalled.watch(reply.raw)
    return reply
  }

  /**
   * A range read for this request alone, named by `range` (`RangeCache.key`):
   * by sendfile or streamed when large, else from the range cache, else read
   * (once for the requests in flight with the same bytes) and offered to it.
   */
  private async sendOwn(read: LogRead, tail: string | undefined, logId: string, range: string): Promise<FastifyReply> {
    const { bodyPath, metrics, ranges } = this.context
    if (
      bodyPath.name === 'sendfile' &&
      fileBytes(read) >= this.http.sendfileMinBytes &&
      canSendfile(bodyPath.sendfile, this.request.raw.socket)
    ) {
      return this.sendfile(read, tail, bodyPath.sendfile)
    }
    if (read.byteLength > BUFFERED_BODY_MAX_BYTES) {
      // Bigger than the largest pooled buffer: streamed in pieces, not read into one buffer the size of the range.
      const body = streamedLogBody(read, tail)
      this.reply.raw.once('close', () => body.stream.destroy())
      metrics?.addBytesServed(body.length, 'pread')
      return this.sent(this.reply.code(200).header('content-length', body.length).send(body.stream))
    }
    // Only bodies without an up-to-date line are cached: that line carries the watermark, which moves with every flush.
    const cacheable = tail === undefined && ranges.enabled
    if (cacheable) {
      const cached = ranges.get(range)
      if (cached !== undefined) {
        read.release()
        metrics?.addBytesServed(cached.length, 'pread')
        return this.sent(this.reply.code(200).send(cached))
      }
    }
    const body = await this.context.bodies.body(tail === undefined ? range : `${range} ${tail}`, read, tail)
    if (cacheable) ranges.offer(logId, range, body.bytes)
    // A client gone while the body was read has had its 'close' already: its share is given back now.
    if (this.reply.raw.destroyed) body.done()
    else this.reply.raw.once('close', body.done)
    metrics?.addBytesServed(body.bytes.length, 'pread')
    return this.sent(this.reply.code(200).send(body.bytes))
  }

  private sendfile(read: LogRead, tail: string | undefined, sendfile: Sendfile): FastifyReply {
    // Not awaited: as with the pread path, whose body Node writes after the handler returns, the admission
    // permit covers the request's work, not the client's download. The reply is hijacked before this returns.
    sendfileBody(this.reply, read, tail, sendfile, this.context.stalled).then(
      ({ sent }) => this.context.metrics?.addBytesServed(sent, 'sendfile'),
      (error: unknown) => this.request.log.error({ err: error }, 'sendfile body failed'),
    )
    return this.reply
  }

  /** `[up-to-date]` with nothing new: a long-poll timeout or `offset=now`. */
  private sendNoChanges(shape: ResolvedShape, offset: LogOffset): FastifyReply {
    const responseOffset = formatOffset(offset)
    const etag = etagValue({
      handle: shape.handle,
      requestOffset: this.requestOffset,
      responseOffset,
      noChangesToken: process.hrtime.bigint(),
    })
    this.commonHeaders(shape, responseOffset, etag, false)
    this.reply.header(ResponseHeader.upToDate, UP_TO_DATE_VALUE)
    return this.reply.code(200).send(`[${upToDateMessage(this.shapes.lastSeenLsn)}]`)
  }

  private commonHeaders(shape: ResolvedShape, responseOffset: string, etag: string, hasData: boolean): void {
    const reply = this.reply
    rangeHeaders(reply, shape.handle, responseOffset, etag, hasData)
    if (this.req.live) {
      liveHeaders(reply, this.cursor())
    } else {
      reply.header(ResponseHeader.schema, schemaHeader(shape.table, shape.definition.columns))
      reply.header(
        ResponseHeader.cacheControl,
        this.req.offset !== 'now' && isBeforeAll(this.req.offset) ? CacheControl.initial : nonLiveCacheControl(this.http.maxAge, this.http.staleAge),
      )
    }
  }

  private cursor(): string {
    return liveCursor(this.http.longPollTimeoutMs, this.req.cursor)
  }

  /** 409 for a shape that was invalidated under this request, naming its replacement (`replacementHandle`). */
  private async rotated(shape: ResolvedShape): Promise<FastifyReply> {
    const { shapes, admission, http } = this.context
    return this.mustRefetch(await replacementHandle(shapes, admission.replacementGate, shape, this.req.shape, () => clientKey(this.request, http.clientIdHeader)))
  }

  /** 409 must-refetch (§5.4), with the definition's current handle when there is one. */
  private mustRefetch(handle: string | undefined): FastifyReply {
    mustRefetchHeaders(this.reply, handle, this.req.live ? this.cursor() : undefined)
    return this.reply.code(409).send(MUST_REFETCH_BODY)
  }

  /** The client went away while waiting: nothing to answer. */
  private abandon(): FastifyReply {
    this.reply.hijack()
    if (!this.reply.raw.destroyed) this.reply.raw.destroy()
    return this.reply
  }
}

/** Views of `body` of at most STREAM_PIECE_BYTES each. */
function* pieces(body: Buffer): Generator<Buffer> {
  for (let at = 0; at < body.length; at += STREAM_PIECE_BYTES) yield body.subarray(at, at + STREAM_PIECE_BYTES)
}

/** The length of the body of `byteLength` stored bytes with `tail`, as `logBody` lays it out: `[`, the bytes (the last `,` dropped without a tail), the tail, `]`. */
function bodyLength(byteLength: number, tail: string | undefined): number {
  if (tail !== undefined) return byteLength + Buffer.byteLength(tail) + 2
  return byteLength > 0 ? byteLength + 1 : 2
}
