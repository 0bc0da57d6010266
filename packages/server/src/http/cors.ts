import {
  DEFAULT_ALLOW_METHODS_VALUE,
  EXPOSE_HEADERS_VALUE,
  PREFLIGHT_ALLOWED_REQUEST_HEADERS,
  PREFLIGHT_MAX_AGE_SECONDS,
  RequestHeader,
  ResponseHeader,
  SHAPE_ALLOW_METHODS_VALUE,
} from '@sluice/protocol'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { asksToClose } from './shape-headers.js'

/**
 * CORS (docs/protocol.md §8): the request's Origin echoed (or `*`), the methods of
 * the route, and the electric-* headers exposed so a browser client can read
 * them. Every answer says `vary: origin`, the `*` one too: the header depends on
 * the Origin, and a cached `*` answer without it (to a server-side render, say)
 * would be handed to every browser origin, whose credentialed requests `*` fails.
 */
export function setCors(request: FastifyRequest, reply: FastifyReply, shapeRoute: boolean): void {
  const origin = request.headers[RequestHeader.origin]
  reply.header(ResponseHeader.allowOrigin, typeof origin === 'string' && origin !== '' ? origin : '*')
  reply.header(ResponseHeader.vary, 'origin')
  reply.header(ResponseHeader.allowMethods, shapeRoute ? SHAPE_ALLOW_METHODS_VALUE : DEFAULT_ALLOW_METHODS_VALUE)
  reply.header(ResponseHeader.exposeHeaders, EXPOSE_HEADERS_VALUE)
}

/** The OPTIONS answer: 204, a day of preflight caching, and only the request headers we accept echoed. */
export function sendPreflight(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const asked = request.headers[RequestHeader.accessControlRequestHeaders]
  if (typeof asked === 'string') {
    const allowed = asked
      .split(',')
      .map((h) => h.trim().toLowerCase())
      .filter((h) => PREFLIGHT_ALLOWED_REQUEST_HEADERS.includes(h))
    if (allowed.length > 0) reply.header(ResponseHeader.allowHeaders, allowed.join(', '))
  }
  reply.header(ResponseHeader.maxAge, String(PREFLIGHT_MAX_AGE_SECONDS))
  // Electric's keep-alive, unless the client asked to close: an explicit header would make Node hold the socket open.
  if (!asksToClose(request.headers.connection)) reply.header(ResponseHeader.connection, 'keep-alive')
  return reply.code(204).send()
}
