import { STATUS_CODES, type Server } from 'node:http'
import type { Socket } from 'node:net'
import {
  type LogOffset,
  MUST_REFETCH_BODY,
  RequestHeader,
  ResponseHeader,
  type ShapeRequest,
  UP_TO_DATE_VALUE,
  compareOffsets,
  etagValue,
  formatOffset,
  formatRequestOffset,
  isBeforeAll,
  upToDateMessage,
} from '@sluice/protocol'
import type { AnswerOutcome, Sendfile, SocketParking } from '@sluice/sendfile'
import { type ShapeLog, StorageError } from '@sluice/storage'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { ResolvedShape } from '../shape-service.js'
import type { RequestKind } from './admission.js'
import { toSluiceError } from './http-errors.js'
import { DataWait, type LongPollResult, SharedRange } from './live/index.js'
import { replacementHandle } from './open-shape.js'
import { type HeaderTarget, asksToClose, errorHeaders, liveCursor, liveHeaders, mustRefetchHeaders, rangeHeaders } from './shape-headers.js'
import type { ShapeReadContext } from './shape-responder.js'

/** What `LongPollParking` marks on a connection: another request pipelined on it; handed back and idle since. */
type MarkedSocket = Socket & { sluicePipelined?: boolean; sluiceHandedBack?: boolean }

/**
 * One copy of each string handed to `intern`, for strings that many live
 * objects would otherwise each hold a copy of. Bounded: past `limit` distinct
 * strings it starts again, so a client that varies what it sends (an Origin
 * per request) costs a cleared map, not a growing one.
 */
class StringInterner {
  private readonly seen = new Map<string, string>()

  constructor(private readonly limit: number) {}

  intern(text: string): string {
    const known = this.seen.get(text)
    if (known !== undefined) return known
    if (this.seen.size >= this.limit) this.seen.clear()
    this.seen.set(text, text)
    return text
  }
}

const HOOK_HEADERS = new StringInterner(256)

/**
 * Parked long-polls (docs/architecture.md §5, "Parked long-polls"): a live
 * request that has to wait gives its connection to the native addon
 * (`SocketParking`) and keeps only this object. Node's socket, node:http's
 * request, response and parser, and fastify's request and reply go: what a
 * waiting client costs is then a descriptor, a poll registration and a
 * `ParkedLongPoll`, well under a KiB, where a request held in node:http costs
 * several.
 *
 * When the wait ends, the answer is written here, its headers by the same
 * functions (`shape-headers.ts`) a fastify reply of the route gets them from,
 * after the headers the request's hooks had set when it parked; Node's own
 * (date, connection, keep-alive, content-length) as Node writes them. The
 * connection is then handed back to the HTTP server as a new socket
 * (`server.emit('connection')`, which node:http documents for this), where
 * the client's next request is read as on any connection.
 *
 * Only a plain keep-alive HTTP/1.1 GET that waits for data is parked: not a
 * HEAD, not one with If-None-Match (its 304 stays with fastify), not TLS, and
 * not one on a connection where the client sent another request behind it
 * (pipelining: Node has read that one already).
 */
export class LongPollParking {
  private readonly parked = new Map<number, ParkedLongPoll>()
  private toHandBack: Socket[] = []
  private handingBack: NodeJS.Immediate | undefined
  /** Answers still being written (their clients read slowly), with what ends each. */
  private readonly writing = new Map<number, () => void>()
  private closing = false

  private constructor(
    private readonly server: Server,
    private readonly parking: SocketParking,
    private readonly sendTimeoutMs: number,
  ) {}

  /**
   * Undefined with an addon built before it could park connections.
   * `sendTimeoutMs`: an answer its client takes none of for this long is cut,
   * as `StalledSends` cuts a body fastify sends.
   */
  static create(server: Server, addon: Sendfile, sendTimeoutMs: number): LongPollParking | undefined {
    let self: LongPollParking | undefined
    const parking = addon.parking((id) => self?.left(id))
    if (parking === undefined) return undefined
    self = new LongPollParking(server, parking, sendTimeoutMs)
    return self
  }

  /** The client of parked connection `id` left (the connection is closed already). */
  private left(id: number): void {
    const wait = this.parked.get(id)
    this.parked.delete(id)
    wait?.clientLeft()
  }

  /** Long-polls parked or being answered here. */
  get size(): number {
    return this.parked.size
  }

  /** Whether the request may be parked here (see the class comment); the socket is checked again when it is taken. */
  accepts(request: FastifyRequest): boolean {
    if (this.closing || request.method !== 'GET' || request.raw.httpVersion !== '1.1') return false
    const headers = request.headers
    if (headers[RequestHeader.ifNoneMatch] !== undefined) return false
    if (asksToClose(headers.connection)) return false
    // A request with a body (a GET may have one) could have part of it in node:http's parser still: it would be lost.
    if (headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0')) return false
    if (!request.raw.complete) return false
    return (request.raw.socket as MarkedSocket).sluicePipelined !== true
  }

  /**
   * Parks the request's connection for `wait`, which is then what stands for
   * the request; false when the socket could not be taken (nothing changed:
   * the caller waits as usual).
   */
  take(request: FastifyRequest, reply: FastifyReply, wait: ParkedLongPoll): boolean {
    const id = this.parking.park(request.raw.socket)
    if (id === undefined) return false
    // Nothing more goes through fastify for this request: the answer is written by `answer`.
    reply.hijack()
    wait.id = id
    this.parked.set(id, wait)
    return true
  }

  /** Writes the answer of `wait`'s request; `done` once written, or at once when its client has gone. */
  answer(wait: ParkedLongPoll, head: ResponseHead, body: Buffer | undefined, done: () => void): void {
    const keepOpen = !this.closing && this.server.keepAliveTimeout > 1
    const bytes = head.end(body?.length ?? 0, keepOpen, this.server.keepAliveTimeout)
    let timer: NodeJS.Timeout | undefined
    const answered = this.parking.answer(wait.id, bytes, body, keepOpen, (outcome: AnswerOutcome) => {
      clearTimeout(timer)
      this.writing.delete(wait.id)
      this.parked.delete(wait.id)
      if (outcome.ok && outcome.socket !== undefined) this.handBackSoon(outcome.socket)
      done()
    })
    if (!answered) {
      this.parked.delete(wait.id)
      return done()
    }
    // Most answers are in the socket before `answer` returns; one still going has a client that reads slowly. It is cut
    // once its client has taken nothing for the send timeout (as `StalledSends` cuts a body fastify sends), not for
    // being slow: each look that finds progress waits another send timeout.
    if (this.parked.has(wait.id)) {
      this.writing.set(wait.id, done)
      let seen = this.parking.written(wait.id)
      const look = (): void => {
        const written = this.parking.written(wait.id)
        if (written < 0) return
        if (written > seen) {
          seen = written
          timer = setTimeout(look, this.sendTimeoutMs)
          timer.unref()
          return
        }
        this.cutAnswer(wait.id, done)
      }
      timer = setTimeout(look, this.sendTimeoutMs)
      timer.unref()
    }
  }

  /**
   * Connections are handed back in a later turn, together: a write wakes
   * thousands of parked requests, and giving each its Node socket and
   * parser as its answer goes out would hold the answers still to go behind
   * work their clients are not waiting for yet (their next request waits in
   * the kernel meanwhile).
   */
  private handBackSoon(socket: Socket): void {
    this.toHandBack.push(socket)
    this.handingBack ??= setImmediate(() => {
      this.handingBack = undefined
      const sockets = this.toHandBack
      this.toHandBack = []
      for (const one of sockets) this.handBack(one)
    })
  }

  /**
   * Gives an answered connection back to the HTTP server, as its listener
   * gives it one it accepted, idle under the keep-alive timeout the answer
   * announced until its next request begins (`requestArrived`). It is not
   * counted in net.Server's connections, so the server's `close()` does not
   * wait for a request on it.
   */
  private handBack(socket: Socket): void {
    ;(socket as MarkedSocket).sluiceHandedBack = true
    if (this.server.keepAliveTimeout > 0) socket.setTimeout(this.server.keepAliveTimeout)
    this.server.emit('connection', socket)
  }

  /**
   * Every request, as it arrives (the app's onRequest hook): one pipelined
   * behind a request not yet answered (node:http queues its response, so it
   * has no socket yet) marks its connection, whose earlier request must then
   * not be parked; one on a connection handed back ends that connection's
   * idle time (node:http clears its own keep-alive timer so).
   */
  static requestArrived(request: FastifyRequest, reply: FastifyReply): void {
    const socket = request.raw.socket as MarkedSocket
    if (reply.raw.socket === null) {
      socket.sluicePipelined = true
      return
    }
    if (socket.sluiceHandedBack !== true) return
    socket.sluiceHandedBack = false
    socket.setTimeout(0)
  }

  /** Closes the connection of a request that is not to be answered. */
  drop(wait: ParkedLongPoll): void {
    this.parked.delete(wait.id)
    this.parking.drop(wait.id)
  }

  /** Closes the connection of an answer still being written, and ends it (`done`). */
  private cutAnswer(id: number, done: () => void): void {
    this.writing.delete(id)
    this.parked.delete(id)
    this.parking.drop(id)
    done()
  }

  /** Answers from now on close their connections (the server is closing). */
  beginClose(): void {
    this.closing = true
  }

  /** Closes every connection still held (answers a client has not taken are cut). */
  close(): void {
    this.closing = true
    for (const [id, done] of [...this.writing]) this.cutAnswer(id, done)
    for (const id of [...this.parked.keys()]) {
      this.parking.drop(id)
      this.left(id)
    }
  }
}

/** One parked long-poll: its wait for data, and what its answer needs of the request that parked it. */
export class ParkedLongPoll extends DataWait<ShapeLog> {
  id = 0
  private gone = false

  constructor(
    private readonly context: ShapeReadContext,
    private readonly parking: LongPollParking,
    private readonly shape: ResolvedShape,
    private readonly req: ShapeRequest,
    /** The headers the request's hooks set, as `name: value\r\n` lines. */
    private readonly hookHeaders: string,
    /** Who created shapes are counted against (`clientKey`), for a replacement made for a 409. */
    private readonly client: string | undefined,
    private admitted: RequestKind | undefined,
  ) {
    super()
  }

  /**
   * The headers set on `reply` so far, as `ParkedLongPoll` keeps them: one
   * string shared by every request whose hooks set the same ones (the CORS
   * headers of one origin, typically), where each request's own would hold a
   * rope of a dozen concatenations, more than half of what a parked request
   * costs in V8's heap.
   */
  static hookHeaders(reply: FastifyReply): string {
    const lines: string[] = []
    for (const [name, value] of Object.entries(reply.getHeaders())) {
      if (value === undefined) continue
      if (Array.isArray(value)) for (const one of value) lines.push(`${name}: ${one}\r\n`)
      else lines.push(`${name}: ${value}\r\n`)
    }
    return HOOK_HEADERS.intern(lines.join(''))
  }

  /** Starts the wait for data after `after` in `log` (the caller found none there yet). */
  start(log: ShapeLog, after: LogOffset): void {
    this.waitForData(log, after, this.context.waiters, this.context.http.longPollTimeoutMs, this.context.untilData, this.shape.handle)
  }

  /** The client left while parked: its connection is closed already. */
  clientLeft(): void {
    this.gone = true
    this.cancelDataWait()
  }

  protected override cancelled(): boolean {
    return this.gone
  }

  protected dataWaitEnded(result: LongPollResult): void {
    if (this.gone) return this.finish()
    this.answerFor(result).then(
      ([head, body]) => this.parking.answer(this, head, body, () => this.finish()),
      (error: unknown) => this.failed(error),
    )
  }

  private async answerFor(result: LongPollResult): Promise<[ResponseHead, Buffer | undefined]> {
    const { shapes } = this.context
    if (result === 'data' && shapes.status(this.shape.handle) === 'active') return this.range()
    if (result === 'data' || result === 'invalidated') return this.mustRefetch()
    // A timeout, or the server closing ('aborted' with the client still here): up-to-date with nothing new.
    return this.noChanges()
  }

  /** What `ShapeResponder.sendRead` answers for a woken live request: the range after its offset. */
  private async range(): Promise<[ResponseHead, Buffer]> {
    const { shapes, sharedReads, metrics } = this.context
    const read = sharedReads.read(this.waitedLog!, this.waitedAfter!)
    const range = read instanceof SharedRange ? read : new SharedRange(read, false)
    const end = range.nextOffset
    const responseOffset = formatOffset(end)
    const etag = etagValue({ handle: this.shape.handle, requestOffset: formatRequestOffset(this.req.offset), responseOffset })
    const head = this.head(200)
    rangeHeaders(head, this.shape.handle, responseOffset, etag, true)
    liveHeaders(head, this.cursor())
    let tail: string | undefined
    if (range.reachedHead) {
      head.header(ResponseHeader.upToDate, UP_TO_DATE_VALUE)
      // global_last_seen_lsn (§3.4): the range's commit LSN when it has one, else the watermark.
      tail = upToDateMessage(end.tx > 0n ? end.tx : shapes.lastSeenLsn)
    }
    const body = await range.body(tail)
    metrics?.addBytesServed(body.length, 'pread')
    return [head, body]
  }

  /** What `ShapeResponder.sendNoChanges` answers: up-to-date at the request's own offset. */
  private noChanges(): [ResponseHead, Buffer] {
    const responseOffset = formatOffset(this.waitedAfter!)
    const etag = etagValue({
      handle: this.shape.handle,
      requestOffset: formatRequestOffset(this.req.offset),
      responseOffset,
      noChangesToken: process.hrtime.bigint(),
    })
    const head = this.head(200)
    rangeHeaders(head, this.shape.handle, responseOffset, etag, false)
    liveHeaders(head, this.cursor())
    head.header(ResponseHeader.upToDate, UP_TO_DATE_VALUE)
    return [head, Buffer.from(`[${upToDateMessage(this.context.shapes.lastSeenLsn)}]`)]
  }

  /** What `ShapeResponder.rotated` answers: 409 naming the definition's shape now, made if need be. */
  private async mustRefetch(): Promise<[ResponseHead, Buffer]> {
    const { shapes, admission } = this.context
    const handle = await replacementHandle(shapes, admission.replacementGate, this.shape, this.req.shape, () => this.client)
    const head = this.head(409)
    mustRefetchHeaders(head, handle, this.cursor())
    return [head, Buffer.from(MUST_REFETCH_BODY)]
  }

  private head(status: 200 | 409 | number): ResponseHead {
    return new ResponseHead(status, this.hookHeaders)
  }

  private cursor(): string {
    return liveCursor(this.context.http.longPollTimeoutMs, this.req.cursor)
  }

  /** What fastify's error handler answers (`sendError`); a log deleted under the read is the shape gone (409). */
  private failed(error: unknown): void {
    if (this.gone) return this.finish()
    const answer =
      error instanceof StorageError && error.code === 'shape_deleted'
        ? this.mustRefetch()
        : Promise.resolve().then((): [ResponseHead, Buffer] => {
            const mapped = toSluiceError(error)
            const head = this.head(mapped.status)
            errorHeaders(head, mapped, 'GET')
            return [head, Buffer.from(JSON.stringify(mapped.toBody()))]
          })
    answer.then(
      ([head, body]) => this.parking.answer(this, head, body, () => this.finish()),
      () => {
        this.parking.drop(this)
        this.finish()
      },
    )
  }

  /** The request's work is over: its admission goes back. */
  private finish(): void {
    const admitted = this.admitted
    this.admitted = undefined
    if (admitted !== undefined) this.context.admission.leave(admitted)
    this.context.metrics?.setLiveWaiters(this.context.waiters.size)
  }
}

/** Whether a live request's wait may be parked: it would wait (no data after its offset yet). */
export function wouldWait(log: ShapeLog, after: LogOffset): boolean {
  return !isBeforeAll(after) && compareOffsets(log.head().lastOffset, after) <= 0
}

/** A response's status line and headers, built up as node:http would write them for a fastify reply. */
export class ResponseHead implements HeaderTarget {
  private text: string

  constructor(status: number, hookHeaders: string) {
    this.text = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Unknown'}\r\n${hookHeaders}`
  }

  header(name: string, value: string): this {
    this.text += `${name}: ${value}\r\n`
    return this
  }

  /** The head's bytes: fastify's content-length, then what node:http adds (date, connection, keep-alive). */
  end(contentLength: number, keepAlive: boolean, keepAliveTimeoutMs: number): Buffer {
    let text = `${this.text}content-length: ${contentLength}\r\nDate: ${httpDate()}\r\n`
    if (!keepAlive) text += 'Connection: close\r\n'
    else {
      text += 'Connection: keep-alive\r\n'
      if (keepAliveTimeoutMs > 0) text += `Keep-Alive: timeout=${Math.floor(keepAliveTimeoutMs / 1000)}\r\n`
    }
    // Header bytes go out as latin1, as node:http writes them.
    return Buffer.from(`${text}\r\n`, 'latin1')
  }
}

let dateSecond = -1
let dateText = ''

/** The Date header's value, made once a second (as node:http does). */
function httpDate(): string {
  const now = Date.now()
  const second = Math.floor(now / 1000)
  if (second !== dateSecond) {
    dateSecond = second
    dateText = new Date(now).toUTCString()
  }
  return dateText
}
