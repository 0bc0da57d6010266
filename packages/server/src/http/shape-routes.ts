import { timingSafeEqual } from 'node:crypto'
import {
  CacheControl,
  ResponseHeader,
  SluiceError,
  invalidRequest,
  isBeforeAll,
  parseDeleteRequest,
  readSecret,
} from '@sluice/protocol'
import type { FastifyInstance } from 'fastify'
import type { ShapeService } from '../shape-service.js'
import type { Admission } from './admission.js'
import { sendPreflight, setCors } from './cors.js'
import type { HttpMetrics } from './http-metrics.js'
import { SharedReads } from './live/index.js'
import { type BodyPath, PREAD_PATH } from './body-path.js'
import type { LongPollParking } from './parked-long-polls.js'
import { ParsedRequests } from './parsed-requests.js'
import { RangeCache } from './range-cache.js'
import type { RequestCaches } from './request-caches.js'
import { rawQuery } from './raw-query.js'
import type { HttpOptions } from './options.js'
import { SharedBodies } from './shared-bodies.js'
import { StalledSends } from './stalled-sends.js'
import { type SubsetRouteOptions, serveSubset, subsetRoutes } from './subset-route.js'
import { QueuedRequest, type ShapeReadContext, type ShapeWaiters, ShapeResponder } from './shape-responder.js'

/**
 * `/v1/shape` (docs/protocol.md §2-§5, §8): GET/HEAD reads, DELETE, OPTIONS, and
 * subset snapshots (§6, GET `subset__*` or POST; `subset-route.ts`). One
 * encapsulated plugin; the secret check and CORS headers are its hooks.
 *
 * A GET, in order:
 *   1. validation (`parseShapeRequest`, Electric's stages and texts), then
 *      admission control by kind (`offset=-1` is initial);
 *   2. the definition resolved to its current handle (created if new; a
 *      request naming another handle gets 409 with the current one);
 *   3. the snapshot awaited (`ready`);
 *   4. `offset=now` answers the head at once; an offset past the head waits up
 *      to half the long-poll timeout for the log to reach it, then is a 400
 *      (a 503 to retry on a replica, which may just be behind the writer);
 *   5. `log.read(after)` gives the chunk-aligned range; the etag is known
 *      before any byte is read, so a matching `If-None-Match` costs no I/O;
 *   6. `live=true` with nothing past the offset parks on the shape's waiter
 *      until a flush publishes more, the timeout, or an invalidation (409).
 *
 * The handler is not an async function: it hands the request to a
 * `ShapeResponder`, which sends the reply (fastify waits for it) and, for a
 * long-poll with nothing to send yet, parks itself on the live waiters and
 * ends its async part. A parked long-poll is then that one object (next to
 * fastify's request and reply and Node's own), not a chain of suspended calls.
 */

export type { ShapeWaiters }

export interface ShapeRoutesOptions {
  readonly shapes: ShapeService
  readonly http: HttpOptions
  readonly waiters: ShapeWaiters
  readonly admission: Admission
  readonly metrics: HttpMetrics | undefined
  /** How large bodies are sent; default pread. */
  readonly bodyPath?: BodyPath
  /** Where the request caches are registered, for the server to empty after a sweep. */
  readonly caches?: RequestCaches
  /** Where waiting long-polls are parked (`parked-long-polls.ts`); none: they wait in node:http. */
  readonly parking?: LongPollParking | undefined
}

export const SHAPE_PATH = '/v1/shape'

export async function shapeRoutes(app: FastifyInstance, options: ShapeRoutesOptions): Promise<void> {
  const { shapes, http, waiters, admission, metrics, bodyPath = PREAD_PATH } = options
  const secret = http.secret === undefined ? undefined : Buffer.from(http.secret)
  const stalled = new StalledSends(http.sendTimeoutMs)
  const subset: SubsetRouteOptions = { shapes, http, admission, path: SHAPE_PATH, stalled }
  const countRead = metrics === undefined ? () => {} : () => metrics.addLogRead()
  const requests = new ParsedRequests()
  const ranges = new RangeCache(http.rangeCacheBytes)
  if (ranges.enabled) {
    const stopDropping = shapes.onInvalidated((handle) => ranges.dropShape(handle))
    app.addHook('onClose', (_instance, done) => {
      stopDropping()
      done()
    })
    metrics?.watchRangeCache?.(() => ranges.stats())
  }
  if (options.caches !== undefined) {
    const unregister = options.caches.add(() => {
      requests.forget()
      ranges.forgetOffered()
    })
    app.addHook('onClose', (_instance, done) => {
      unregister()
      done()
    })
  }
  const context: ShapeReadContext = {
    shapes,
    http,
    waiters,
    metrics,
    bodyPath,
    bodies: new SharedBodies(),
    ranges,
    untilData: Object.freeze({ until: 'past', shapes }),
    untilReached: Object.freeze({ until: 'reach', shapes }),
    countRead,
    admission,
    stalled,
    parking: options.parking,
    sharedReads: new SharedReads({
      onRead: countRead,
      ...(bodyPath.name === 'sendfile' ? { fileRangeMinBytes: http.sendfileMinBytes } : {}),
    }),
  }
  app.addHook('onClose', (_instance, done) => {
    stalled.close()
    done()
  })

  // Callback style, as every hook on the read path: an async hook costs each request a promise and a microtask.
  app.addHook('onRequest', (request, reply, done) => {
    setCors(request, reply, true)
    if (secret === undefined || request.method === 'OPTIONS') return done()
    const given = readSecret(rawQuery(request.url))
    if (given === undefined || !sameSecret(Buffer.from(given), secret)) return done(new SluiceError('unauthorized'))
    done()
  })

  app.options(SHAPE_PATH, async (request, reply) => sendPreflight(request, reply))

  // Not async (see above): a throw here is sent as the error, as an async handler's rejection would be.
  app.get(SHAPE_PATH, (request, reply) => {
    const parsed = requests.parse(rawQuery(request.url))
    if (!parsed.ok) throw invalidRequest(parsed.errors)
    const req = parsed.value
    if (req.subset !== undefined) return serveSubset(subset, request, reply, req)
    const kind = req.offset !== 'now' && isBeforeAll(req.offset) ? 'initial' : 'existing'
    if (kind === 'existing') {
      // Not queued: a long-poll holds its slot while parked, doing no work, and the limit is high.
      const refused = admission.enter(kind)
      if (refused !== undefined) throw refused
      new ShapeResponder(context, request, reply, req, kind).start()
      return undefined
    }
    const waiter = new QueuedRequest(context, request, reply, req, kind)
    const admitted = admission.enterOrWait(kind, waiter)
    if (admitted === true) waiter.admitted()
    else if (admitted === false) waiter.queued()
    else throw admitted
    return undefined
  })

  // POST: subset snapshots with the subset in a JSON body (§6).
  subsetRoutes(app, subset)

  app.delete(SHAPE_PATH, async (request, reply) => {
    reply.header(ResponseHeader.cacheControl, CacheControl.noCache)
    if (!http.allowDelete) throw new SluiceError('delete_not_allowed')
    const parsed = parseDeleteRequest(rawQuery(request.url))
    if (!parsed.ok) throw invalidRequest(parsed.errors)
    const { handle, shape } = parsed.value
    let target = handle
    if (shape !== undefined) {
      const found = await shapes.find(shape)
      if (handle !== undefined && found !== undefined && found !== handle) throw new SluiceError('shape_definition_mismatch')
      target = found
    }
    if (target === undefined || !(await shapes.delete(target))) throw new SluiceError('not_found')
    return reply.code(202).send()
  })
}

function sameSecret(given: Buffer, expected: Buffer): boolean {
  return given.length === expected.length && timingSafeEqual(given, expected)
}
