import { randomInt } from 'node:crypto'
import { PassThrough } from 'node:stream'
import {
  CacheControl,
  JSON_CONTENT_TYPE,
  type LogOffset,
  MUST_REFETCH_BODY,
  ResponseHeader,
  type ShapeDefinitionParams,
  type ShapeRequest,
  SluiceError,
  conflictCacheControl,
  formatOffset,
  invalidRequest,
  parseShapeRequest,
} from '@sluice/protocol'
import type { ShapeLog } from '@sluice/storage'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { CompiledSubset, ResolvedShape, ShapeService } from '../shape-service.js'
import { type Admission, clientKey } from './admission.js'
import { toSluiceError } from './http-errors.js'
import { awaitReady, resolveShape } from './open-shape.js'
import type { HttpOptions } from './options.js'
import { rawQuery } from './raw-query.js'
import { schemaHeader } from './schema-header.js'
import type { StalledSends } from './stalled-sends.js'

/**
 * Subset snapshots (docs/protocol.md §6): `GET /v1/shape?…&subset__where=…` and
 * `POST /v1/shape` with the subset in a JSON body. One query in its own
 * REPEATABLE READ READ ONLY transaction (`ShapeService.runSubset`), answered
 * as `{"metadata":{…},"data":[…]}` with `electric-snapshot: true` and
 * `cache-control: no-cache`, never cached, never 304.
 *
 * `electric-offset` is the shape log's head when the snapshot was taken (it
 * sees everything up to there): the official client moves
 * its stream there and filters later changes to the snapshot's keys by the
 * snapshot's visibility (`txids` against xmin/xmax/xip, until a change or
 * up-to-date reaches `database_lsn`).
 *
 * The body is built in memory up to {@link BUFFER_BYTES}, so small subsets get a
 * content-length and any failure a proper JSON error; past that it streams,
 * the client's pace throttling the cursor, and a failure after the first bytes
 * can only cut the connection.
 */

export interface SubsetRouteOptions {
  readonly shapes: ShapeService
  readonly http: HttpOptions
  readonly admission: Admission
  readonly path: string
  /** Where a body being sent is watched, to be cut if its client stops taking it (a streamed subset holds a snapshot connection). */
  readonly stalled?: StalledSends | undefined
}

/** Responses up to this size are sent whole; larger ones stream. */
const BUFFER_BYTES = 1024 * 1024
/** POST bodies above this are refused with 413: a subset is a where clause, a few params and numbers. */
const BODY_LIMIT_BYTES = 1024 * 1024
/** `snapshot_mark` is a random non-negative 31-bit integer, as Electric draws it. */
const MARK_LIMIT = 2 ** 31

/**
 * Registers `POST /v1/shape` inside the shape routes' plugin (so the secret
 * check and CORS hooks apply). Bodies are read as text whatever their content
 * type and parsed here, so a malformed one gets Electric's body, not fastify's.
 */
export function subsetRoutes(app: FastifyInstance, options: SubsetRouteOptions): void {
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', { parseAs: 'string', bodyLimit: BODY_LIMIT_BYTES }, (_request, body, done) => done(null, body))
  app.post(options.path, async (request, reply) => {
    reply.header(ResponseHeader.cacheControl, CacheControl.noCache)
    const body = parseBody(request.body)
    const parsed = parseShapeRequest(rawQuery(request.url), body === undefined ? {} : { body })
    if (!parsed.ok) throw invalidRequest(parsed.errors)
    if (parsed.value.subset === undefined) throw invalidRequest({ subset: ["can't be blank"] })
    return serveSubset(options, request, reply, parsed.value)
  })
}

function parseBody(body: unknown): Readonly<Record<string, unknown>> | undefined {
  if (body === undefined || body === null) return undefined
  const text = typeof body === 'string' ? body : Buffer.isBuffer(body) ? body.toString('utf8') : undefined
  if (text === undefined) throw new SluiceError('body_not_object')
  if (text.trim() === '') return undefined
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (error) {
    throw new SluiceError('invalid_json_body', { details: (error as Error).message })
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new SluiceError('body_not_object')
  return value as Readonly<Record<string, unknown>>
}

/** Answers a validated request that carries a subset (GET or POST). */
export async function serveSubset(options: SubsetRouteOptions, request: FastifyRequest, reply: FastifyReply, req: ShapeRequest): Promise<FastifyReply> {
  const subset = req.subset
  if (subset === undefined) throw new Error('serveSubset: the request has no subset')
  // A subset is one response, not a stream of batches.
  if (req.liveSse) throw invalidRequest({ live_sse: ["can't be true for a subset snapshot"] })
  const params = req.shape
  if (params === undefined) throw invalidRequest({ table: ["can't be blank"] })
  const permit = options.admission.acquire('existing')
  if (permit instanceof SluiceError) throw permit
  try {
    return await new SubsetResponder(options, request, reply, req, params).serve(subset)
  } finally {
    permit()
  }
}

class SubsetResponder {
  private readonly shapes: ShapeService

  constructor(
    private readonly options: SubsetRouteOptions,
    private readonly request: FastifyRequest,
    private readonly reply: FastifyReply,
    private readonly req: ShapeRequest,
    private readonly params: ShapeDefinitionParams,
  ) {
    this.shapes = options.shapes
  }

  async serve(subset: NonNullable<ShapeRequest['subset']>): Promise<FastifyReply> {
    const { creationGate } = this.options.admission
    const client = clientKey(this.request, this.options.http.clientIdHeader)
    const resolved = await resolveShape(this.shapes, this.params, this.req, creationGate, client)
    if (resolved === 'refetch') return this.mustRefetch(undefined)
    if (this.req.handle !== undefined && this.req.handle !== resolved.handle) return this.mustRefetch(resolved.handle)
    const compiled = await this.shapes.compileSubset(subset, resolved.table)
    const ready = await awaitReady(this.shapes, resolved, this.params, this.req.handle !== undefined, creationGate, client)
    if (ready === undefined) return this.mustRefetch(this.shapes.lookup(resolved.definition))
    return this.run(ready.shape, ready.log, compiled, randomInt(0, MARK_LIMIT))
  }

  private async run(shape: ResolvedShape, log: ShapeLog, subset: CompiledSubset, mark: number): Promise<FastifyReply> {
    const gone = new AbortController()
    const onClose = (): void => {
      if (!this.reply.raw.writableFinished) gone.abort(new Error('the client went away'))
    }
    this.reply.raw.once('close', onClose)
    // Gone while the shape was resolved, compiled or made ready: its 'close' came before this listener.
    if (this.reply.raw.destroyed) onClose()
    const body = new BodyWriter(this.reply, gone.signal, this.options.stalled)
    try {
      await this.shapes.runSubset(
        { shape, log, subset, snapshotMark: mark, signal: gone.signal },
        {
          start: ({ snapshot, insertLsn, position }) => {
            this.setHeaders(shape, position)
            // database_lsn: the insert LSN, not pg_current_wal_lsn(), which can lag behind commits the snapshot
            // already sees (synchronous_commit=off); the client stops filtering at the first change at or past it.
            const xip = snapshot.xip.map((xid) => `"${xid}"`).join(',')
            body.begin(`{"metadata":{"xmin":"${snapshot.xmin}","xmax":"${snapshot.xmax}","xip_list":[${xip}],"snapshot_mark":${mark},"database_lsn":"${insertLsn}"},"data":[`)
          },
          rows: (lines) => body.rows(lines),
        },
      )
    } catch (error) {
      if (gone.signal.aborted) return body.abandon()
      const mapped = toSluiceError(error)
      if (!body.streaming) {
        this.reply.removeHeader(ResponseHeader.snapshot)
        throw mapped
      }
      this.request.log.error({ err: error }, 'subset snapshot failed after its response started')
      return body.cut(mapped)
    } finally {
      this.reply.raw.off('close', onClose)
    }
    return body.end(']}')
  }

  private setHeaders(shape: ResolvedShape, position: LogOffset): void {
    const reply = this.reply
    reply.header(ResponseHeader.snapshot, 'true')
    reply.header(ResponseHeader.cacheControl, CacheControl.noCache)
    reply.header(ResponseHeader.handle, shape.handle)
    reply.header(ResponseHeader.offset, formatOffset(position))
    reply.header(ResponseHeader.schema, schemaHeader(shape.table, shape.definition.columns))
    reply.header(ResponseHeader.contentType, JSON_CONTENT_TYPE)
  }

  /** 409 must-refetch (§5.4); a POST keeps `no-cache` (§5.2: the method decides first). */
  private mustRefetch(handle: string | undefined): FastifyReply {
    const reply = this.reply
    if (handle !== undefined) reply.header(ResponseHeader.handle, handle)
    reply.header(ResponseHeader.cacheControl, this.request.method === 'POST' ? CacheControl.noCache : conflictCacheControl(handle !== undefined))
    reply.header(ResponseHeader.contentType, JSON_CONTENT_TYPE)
    return reply.code(409).send(MUST_REFETCH_BODY)
  }
}

/**
 * The response body: buffered up to BUFFER_BYTES, then streamed through a
 * PassThrough handed to fastify (so its hooks and error handling still apply),
 * waiting for the socket to drain before taking more rows.
 */
class BodyWriter {
  private chunks: Buffer[] = []
  private size = 0
  private rowCount = 0
  private stream: PassThrough | undefined

  constructor(
    private readonly reply: FastifyReply,
    private readonly signal: AbortSignal,
    private readonly stalled: StalledSends | undefined,
  ) {}

  get streaming(): boolean {
    return this.stream !== undefined
  }

  begin(prefix: string): void {
    this.push(Buffer.from(prefix))
  }

  async rows(lines: readonly Uint8Array[]): Promise<void> {
    for (const line of lines) {
      if (this.rowCount++ > 0) this.push(COMMA)
      this.push(line)
    }
    if (this.stream === undefined && this.size > BUFFER_BYTES) {
      this.stream = new PassThrough()
      this.reply.code(200).send(this.stream)
      // A client that stops reading would hold the snapshot's connection and transaction, not only memory.
      this.stalled?.watch(this.reply.raw)
    }
    if (this.stream !== undefined) await this.flush()
  }

  end(suffix: string): FastifyReply {
    this.push(Buffer.from(suffix))
    if (this.stream === undefined) {
      this.reply.code(200).send(Buffer.concat(this.chunks, this.size))
      this.stalled?.watch(this.reply.raw)
      return this.reply
    }
    this.stream.end(Buffer.concat(this.chunks, this.size))
    this.chunks = []
    return this.reply
  }

  /** A failure after the headers went out: the client sees a cut response, never a truncated JSON that parses. */
  cut(error: Error): FastifyReply {
    this.stream?.destroy(error)
    return this.reply
  }

  abandon(): FastifyReply {
    if (this.stream !== undefined) this.stream.destroy()
    else {
      this.reply.hijack()
      if (!this.reply.raw.destroyed) this.reply.raw.destroy()
    }
    return this.reply
  }

  private push(bytes: Uint8Array): void {
    const buffer = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    this.chunks.push(buffer)
    this.size += buffer.length
  }

  private async flush(): Promise<void> {
    const stream = this.stream as PassThrough
    const data = Buffer.concat(this.chunks, this.size)
    this.chunks = []
    this.size = 0
    if (stream.write(data)) return
    await drained(stream, this.signal)
    if (stream.destroyed) throw new Error('the response was closed while the subset was written')
  }
}

/**
 * Until `stream` drains, or closes (a destroyed stream emits no 'drain' again),
 * or `signal` aborts (rejected, as `events.once` does). Every listener goes
 * when the wait ends: a large subset waits thousands of times on one stream.
 */
function drained(stream: PassThrough, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const stop = (): void => {
      stream.off('drain', done)
      stream.off('close', done)
      signal.removeEventListener('abort', aborted)
    }
    const done = (): void => {
      stop()
      resolve()
    }
    const aborted = (): void => {
      stop()
      reject(new DOMException('The operation was aborted', 'AbortError'))
    }
    if (signal.aborted) return aborted()
    stream.on('drain', done)
    stream.on('close', done)
    signal.addEventListener('abort', aborted)
  })
}

const COMMA = Buffer.from(',')
