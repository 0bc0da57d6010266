import type { IncomingMessage } from 'node:http'

/**
 * Cuts a request whose body has not all arrived within `ms` of its headers: a
 * 408 on the socket, which then closes. A POST subset or a DELETE trickled a
 * byte at a time would otherwise hold its socket for ever (Node's own
 * `requestTimeout` is checked only every 30 s, and fastify turns it off).
 * Requests without a body are not timed, so a long-poll's wait for its
 * answer never is.
 */
export function guardArrival(raw: IncomingMessage, ms: number): void {
  // A request without a body (every GET, a long-poll's among them) has nothing more to arrive.
  const headers = raw.headers
  if (raw.complete || ms <= 0 || (headers['content-length'] === undefined && headers['transfer-encoding'] === undefined)) return
  const timer = setTimeout(() => {
    if (raw.complete) return
    const socket = raw.socket
    if (socket.destroyed) return
    // Whatever fastify was about to answer never comes: the body it waits for is not coming either.
    socket.end('HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n')
    socket.destroySoon()
  }, ms)
  timer.unref()
  const clear = (): void => clearTimeout(timer)
  raw.once('end', clear)
  raw.once('close', clear)
}
