import {
  CacheControl,
  JSON_CONTENT_TYPE,
  ROUTE_NOT_FOUND_TEXT,
  ResponseHeader,
  SluiceError,
} from '@sluice/protocol'
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, LogController } from 'fastify'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import type { Sendfile } from '@sluice/sendfile'
import { DEFAULT_DEDUPE_WINDOW_MS, LogDedupe } from '../log-dedupe.js'
import { type ShapeService, healthBody } from '../shape-service.js'
import { Admission } from './admission.js'
import type { BodyPath } from './body-path.js'
import { setCors } from './cors.js'
import { toSluiceError } from './http-errors.js'
import type { HttpMetrics } from './http-metrics.js'
import { LiveWaiters } from './live/index.js'
import { DEFAULT_HTTP_OPTIONS, ELECTRIC_SERVER_VALUE, type HttpOptions } from './options.js'
import { urlForLog } from './raw-query.js'
import { guardArrival } from './request-arrival.js'
import { requestLogger } from './request-logger.js'
import type { RequestCaches } from './request-caches.js'
import { LongPollParking } from './parked-long-polls.js'
import { errorHeaders } from './shape-headers.js'
import { SHAPE_PATH, type ShapeWaiters, shapeRoutes } from './shape-routes.js'

/**
 * The HTTP app (docs/architecture.md §5), built apart from `listen()`: the caller (or a
 * test) decides where it listens. Route groups are encapsulated plugins; the
 * error handler, the 404 handler and `electric-server` are app-wide.
 */

export interface BuildAppOptions {
  /** Everything the routes need of the rest of the server (a running pipeline's `shapeService`). */
  readonly shapes: ShapeService
  readonly http?: Partial<HttpOptions>
  /** A pino-compatible logger (fastify's `loggerInstance`); none by default. */
  readonly logger?: FastifyBaseLogger
  /** Shape waiters to use instead of a `LiveWaiters` on the service's flushes (the app then does not close them). */
  readonly waiters?: ShapeWaiters
  /** Where bytes served and waiting requests are counted (the server's `ServerMetrics`); none by default. */
  readonly metrics?: HttpMetrics
  /** How large bodies are sent (`resolveBodyPath`); default pread. */
  readonly bodyPath?: BodyPath
  /** Where the shape routes register their request caches, for the server to empty after a sweep (heap-trim.ts). */
  readonly caches?: RequestCaches
  /** The native addon, which parks waiting long-polls outside node:http (`parked-long-polls.ts`, `HttpOptions.parkLongPolls`); none: they wait in it. */
  readonly addon?: Sendfile | undefined
}

const NO_QUERY: Record<string, never> = Object.freeze({})

/** How often a closing server looks for connections that have sent nothing. */
const CLOSE_SILENT_SWEEP_MS = 100

/** Paths the server answers; anything else is a plain 404. */
const ROUTES = new Set(['/', '/v1/shape', '/v1/health'])

function noSchemaCompilers(): () => never {
  return () => {
    throw new Error('route schemas are not supported: the app is built without validator and serializer compilers')
  }
}

export function buildApp(options: BuildAppOptions): FastifyInstance {
  const http: HttpOptions = { ...DEFAULT_HTTP_OPTIONS, ...options.http }
  const app = Fastify({
    ...(options.logger === undefined ? { logger: false } : { loggerInstance: options.logger, childLoggerFactory: requestLogger }),
    // One debug line per request is logged below instead of fastify's two at info.
    logController: new LogController({ disableRequestLogging: true }),
    rewriteUrl: (req) => normalizeUrl(req.url ?? '/'),
    // Routes read the raw query themselves (`rawQuery`: Electric's parameter rules); fastify's parsed copy would
    // only cost time and, for every parked long-poll, memory.
    routerOptions: { querystringParser: () => NO_QUERY },
    // Our own 503 while closing (below): fastify's has no retry-after and no CORS headers.
    return503OnClosing: false,
    clientErrorHandler: refuseMalformed,
    // No route declares a schema, so fastify's default compilers are never used; building them loads ajv and
    // fast-json-stringify at every start (tens of milliseconds of CPU). These refuse, should a route ever declare one.
    schemaController: { compilersFactory: { buildValidator: noSchemaCompilers, buildSerializer: noSchemaCompilers } },
  })

  // Node answers these two before any route runs, one by destroying the socket, the other with an empty 417.
  app.server.on('connect', refuseConnect)
  app.server.on('checkExpectation', refuseExpectation)

  const { shapes, metrics } = options
  const ownWaiters = options.waiters === undefined
  const waiters = options.waiters ?? new LiveWaiters({ store: shapes })
  const admission = new Admission(
    { initial: http.maxConcurrentInitial, existing: http.maxConcurrentExisting },
    Math.random,
    { maxCreating: http.maxCreatingShapes, clientPerMinute: http.clientShapesPerMinute },
    undefined,
    { initial: { length: http.initialQueueLength, waitMs: http.initialQueueWaitMs } },
  )
  metrics?.watchAdmission?.(() => admission.stats())
  const stopInvalidating = shapes.onInvalidated((handle) => waiters.invalidate(handle))
  // A shape a live request waits on is in use: it does not expire, and is evicted last.
  shapes.setInUse((handle) => waiters.has(handle))
  const connections = openConnections(app.server)
  const parking = http.parkLongPolls && options.addon !== undefined ? LongPollParking.create(app.server, options.addon, http.sendTimeoutMs) : undefined
  // Node's close() destroys the connections it finds idle, and it counts as idle one whose response has ended
  // but is still in Node's buffers (a large body going to a slow client), which cuts that body short. This
  // server closes idle connections through their keep-alive timeout instead (preClose, below).
  app.server.closeIdleConnections = () => {}
  let closing = false
  let silentSweep: NodeJS.Timeout | undefined
  // Before connections drain: held long-polls answer up-to-date and SSE streams end, so close() is not held up by them.
  app.addHook('preClose', async () => {
    closing = true
    // Node's close() ends only the connections idle when it is called: one whose response ends later (an SSE
    // stream, a body still being sent) would stay open for its keep-alive time (72 s), and close() wait for it.
    // Node reads this as each response is sent: from now on a connection closes once idle. Those idle now have
    // their keep-alive timer (the only socket timeout this server sets) cut short, and Node closes them.
    app.server.keepAliveTimeout = 1
    for (const socket of connections) if ((socket.timeout ?? 0) > 0) socket.setTimeout(1)
    // Queued requests are answered as those that arrive now are: they never started, so the client may retry elsewhere.
    admission.close(() => new SluiceError('stack_not_ready', { message: 'Server is shutting down' }))
    // Parked long-polls answered from now on close their connections, as those answered by node:http do.
    parking?.beginClose()
    if (ownWaiters) waiters.close()
    // A connection that has sent nothing (a browser's preconnect) is busy to Node's close() until it sends or
    // leaves. One still silent a sweep after it was first seen silent is closed (the grace lets a request on
    // its way arrive, to be answered 503).
    let silent = new Set<Socket>()
    silentSweep = setInterval(() => {
      const still = new Set<Socket>()
      for (const socket of connections) {
        if (socket.bytesRead !== 0) continue
        if (silent.has(socket)) socket.destroy()
        else still.add(socket)
      }
      silent = still
    }, CLOSE_SILENT_SWEEP_MS)
    silentSweep.unref()
  })
  // A burst past the admission limits is refused by design, one 503 per request (thousands a second when
  // many clients start at once): one warning and one counted line per window, not an error with a stack each.
  const refusals = new LogDedupe({ windowMs: DEFAULT_DEDUPE_WINDOW_MS })
  // Runs once the server has closed: fastify closes it in the first onClose hook.
  app.addHook('onClose', async () => {
    clearInterval(silentSweep)
    parking?.close()
    stopInvalidating()
    refusals.flush()
  })

  // Hooks that every request runs take a callback: an async hook costs each request a promise and a microtask.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header(ResponseHeader.server, ELECTRIC_SERVER_VALUE)
    LongPollParking.requestArrived(request, reply)
    guardArrival(request.raw, http.requestTimeoutMs)
    if (metrics !== undefined) metrics.setLiveWaiters(waiters.size)
    if (!closing) return done()
    // A request that reaches a closing server (on a connection that was busy when close began): a 503 the
    // client retries elsewhere, readable by a browser, on a connection that then closes.
    setCors(request, reply, request.routeOptions.url === SHAPE_PATH)
    reply.header(ResponseHeader.connection, 'close')
    done(new SluiceError('stack_not_ready', { message: 'Server is shutting down' }))
  })
  app.addHook('onResponse', (request, reply, done) => {
    // The gauge follows the waiter count at each request's start and end: no timer of its own.
    if (metrics !== undefined) metrics.setLiveWaiters(waiters.size)
    // Checked first: redacting the URL costs more than the rest of the hook.
    if (logsDebug(request.log)) {
      request.log.debug({ method: request.method, url: urlForLog(request.url), status: reply.statusCode, ms: Math.round(reply.elapsedTime) }, 'request')
    }
    done()
  })

  app.setErrorHandler(async (error, request, reply) => {
    const mapped = toSluiceError(error)
    if (mapped.code === 'concurrent_request_limit_exceeded' || mapped.code === 'creation_limit_exceeded' || mapped.code === 'shape_rate_limited') {
      refusals.log(mapped.message, (data, message) => app.log.warn(data, message), { code: mapped.code }, `request refused: ${mapped.message}`)
    } else if (mapped.status >= 500) request.log.error({ err: error }, 'request failed')
    return sendError(reply, mapped)
  })
  app.setNotFoundHandler(async (_request, reply) =>
    reply.code(404).header(ResponseHeader.contentType, 'text/plain; charset=utf-8').send(ROUTE_NOT_FOUND_TEXT),
  )

  app.register(rootRoutes, { shapes })
  app.register(shapeRoutes, { shapes, http, waiters, admission, metrics, parking, ...(options.bodyPath === undefined ? {} : { bodyPath: options.bodyPath }), ...(options.caches === undefined ? {} : { caches: options.caches }) })
  return app
}

/** Whether `log` writes debug lines; fastify's no-op logger (no logger given) has no levels and never does. */
function logsDebug(log: FastifyBaseLogger): boolean {
  const isLevelEnabled = (log as { isLevelEnabled?: (level: string) => boolean }).isLevelEnabled
  return isLevelEnabled !== undefined && isLevelEnabled.call(log, 'debug')
}

async function rootRoutes(app: FastifyInstance, { shapes }: { shapes: ShapeService }): Promise<void> {
  app.addHook('onRequest', (request, reply, done) => {
    setCors(request, reply, false)
    done()
  })
  app.get('/', async (_request, reply) => reply.code(200).send(''))
  // 503 while clients cannot be kept up to date (docs/protocol.md §1): a load balancer then sends them elsewhere.
  app.get('/v1/health', async (_request, reply) => {
    const report = shapes.health()
    return reply
      .code(report.reasons.length === 0 ? 200 : 503)
      .header(ResponseHeader.cacheControl, CacheControl.health)
      .header(ResponseHeader.contentType, JSON_CONTENT_TYPE)
      .send(healthBody(report))
  })
}

/** Every error body is JSON (§5.4); the cache-control of errors follows §5.2. */
export function sendError(reply: FastifyReply, error: SluiceError): FastifyReply {
  // Headers of a response that was being built (offset, etag, schema...) do not belong on an error.
  for (const name of [ResponseHeader.offset, ResponseHeader.etag, ResponseHeader.schema, ResponseHeader.cursor, ResponseHeader.upToDate, ResponseHeader.hasData]) {
    reply.removeHeader(name)
  }
  errorHeaders(reply, error, reply.request.method)
  return reply.code(error.status).send(JSON.stringify(error.toBody()))
}

/** How long a client whose request was refused at the socket may take to close its side before it is cut. */
const RAW_LINGER_MS = 5_000

/**
 * Answers on a socket Node has given up on (CONNECT, a request its parser
 * refused) and closes our side. Nothing else reads such a socket: unread, a
 * client that keeps sending never has its close noticed and the socket outlives
 * server.close(). So it is drained, and cut if the client lingers.
 */
function answerRaw(socket: Duplex, status: number, reason: string, message: string, extraHeaders = ''): void {
  socket.on('error', () => {})
  socket.resume()
  const linger = setTimeout(() => socket.destroy(), RAW_LINGER_MS)
  linger.unref()
  socket.once('close', () => clearTimeout(linger))
  if (!socket.writable) return void socket.destroy()
  const body = JSON.stringify({ message })
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\n` +
      `${ResponseHeader.server}: ${ELECTRIC_SERVER_VALUE}\r\n` +
      extraHeaders +
      `content-type: ${JSON_CONTENT_TYPE}\r\n` +
      `${ResponseHeader.cacheControl}: ${CacheControl.noStore}\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\n` +
      'connection: close\r\n\r\n' +
      body,
  )
}

/** The server's open connections, each forgotten when it closes (one listener shared by all of them). */
function openConnections(server: Server): ReadonlySet<Socket> {
  const open = new Set<Socket>()
  function forget(this: Socket): void {
    open.delete(this)
  }
  server.on('connection', (socket: Socket) => {
    open.add(socket)
    socket.on('close', forget)
  })
  return open
}

/** CONNECT reaches only a 'connect' listener, as a raw socket: without one Node drops the connection unanswered. */
function refuseConnect(_request: IncomingMessage, socket: Duplex): void {
  answerRaw(socket, 405, 'Method Not Allowed', 'CONNECT is not supported', 'allow: GET, HEAD, POST, DELETE, OPTIONS\r\n')
}

/**
 * Bytes Node's HTTP parser refuses (fastify's `clientErrorHandler`): a JSON body
 * naming what the parser found, where fastify's own says only "Client Error".
 */
function refuseMalformed(error: Error & { code?: string; reason?: string }, socket: Duplex): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return
  // A connection that has sent nothing since it was accepted or handed back by a parked long-poll (idle, as after a
  // response): node:http's headers timeout closes it as a keep-alive timeout would, with nothing to answer.
  if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT' && (socket as Duplex & { bytesRead?: number }).bytesRead === 0) return void socket.destroy()
  // Garbage pipelined behind a valid request: that request's answer may be on the wire already (Node keeps it
  // as the socket's `_httpMessage`), and nothing may be written into it. It finishes, then the socket closes.
  const inFlight = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage
  // The request being read is itself the malformed one (a broken chunked body): answer it now, before its route,
  // which is waiting for that body, could hold the socket until it times out. The route then sees the body cut.
  if (inFlight != null && !inFlight.headersSent && !inFlight.req.complete) {
    answerRaw(socket, 400, 'Bad Request', malformedMessage(error))
    return
  }
  if (inFlight != null && !inFlight.writableFinished) {
    socket.on('error', () => {})
    const linger = setTimeout(() => socket.destroy(), RAW_LINGER_MS)
    linger.unref()
    socket.once('close', () => clearTimeout(linger))
    inFlight.once('finish', () => socket.end())
    return
  }
  if (error.code === 'HPE_HEADER_OVERFLOW') {
    answerRaw(socket, 431, 'Request Header Fields Too Large', 'The request line and headers are too large (the limit is 16 KiB)')
  } else if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    answerRaw(socket, 408, 'Request Timeout', 'The request did not arrive in time')
  } else {
    answerRaw(socket, 400, 'Bad Request', malformedMessage(error))
  }
}

function malformedMessage(error: Error & { code?: string; reason?: string }): string {
  const reason = typeof error.reason === 'string' && error.reason !== '' ? error.reason : error.message
  return `Malformed HTTP request: ${reason}${error.code === undefined ? '' : ` (${error.code})`}`
}

/** An `Expect` other than 100-continue: Node's own answer would be a 417 with no body. */
function refuseExpectation(request: IncomingMessage, response: ServerResponse): void {
  const body = JSON.stringify({ message: `Unsupported expectation: ${String(request.headers.expect).slice(0, 100)}` })
  response.writeHead(417, {
    [ResponseHeader.server]: ELECTRIC_SERVER_VALUE,
    [ResponseHeader.contentType]: JSON_CONTENT_TYPE,
    [ResponseHeader.cacheControl]: CacheControl.noStore,
    'content-length': Buffer.byteLength(body),
  })
  response.end(body)
}

/**
 * Electric matches routes after normalising the path: `/v1/shape/`, `/v1//shape`
 * and `/v1/%73hape` are all `/v1/shape` (docs/protocol.md §1). The query is kept
 * byte for byte; unknown paths are left alone for the 404 handler.
 */
export function normalizeUrl(url: string): string {
  const at = url.indexOf('?')
  const path = at < 0 ? url : url.slice(0, at)
  // Nearly every request: a route's own path is already normal.
  if (ROUTES.has(path)) return url
  let decoded: string
  try {
    decoded = decodeURIComponent(path)
  } catch {
    return url
  }
  let normal = decoded.replace(/\/{2,}/g, '/')
  if (normal.length > 1 && normal.endsWith('/')) normal = normal.slice(0, -1)
  if (normal === path || !ROUTES.has(normal)) return url
  return at < 0 ? normal : normal + url.slice(at)
}
