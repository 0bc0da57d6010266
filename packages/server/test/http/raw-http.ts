import { connect } from 'node:net'

/**
 * HTTP/1.1 over a bare TCP socket, for requests no HTTP client would send:
 * bytes that are not UTF-8 in the request line, header values with any byte,
 * a content-length that lies, no Host header, pipelined leftovers. The reply
 * side is parsed just enough to check every response the server wrote on the
 * connection (content-length, chunked, or read-to-close bodies).
 */

export interface RawRequest {
  readonly method: string
  /** The request-target, byte for byte. */
  readonly target: Buffer
  readonly headers: ReadonlyArray<readonly [name: string, value: Buffer]>
  readonly body?: Buffer
}

export interface RawResponse {
  readonly status: number
  readonly reason: string
  /** Lower-cased names; repeated headers joined with ", ". */
  readonly headers: Readonly<Record<string, string>>
  readonly body: Buffer
  /** Whether the body was framed (content-length or chunked) and arrived whole. */
  readonly complete: boolean
}

export interface RawExchange {
  readonly responses: RawResponse[]
  /** Bytes after the last complete response that do not form one. */
  readonly trailing: Buffer
  /** The server closed (or reset) the connection before our deadline. */
  readonly closed: boolean
  readonly reset: boolean
  readonly timedOut: boolean
}

const CRLF = Buffer.from('\r\n')

export function encodeRequest(request: RawRequest): Buffer {
  const parts: Buffer[] = [Buffer.from(`${request.method} `, 'latin1'), request.target, Buffer.from(' HTTP/1.1\r\n', 'latin1')]
  for (const [name, value] of request.headers) parts.push(Buffer.from(`${name}: `, 'latin1'), value, CRLF)
  parts.push(CRLF)
  if (request.body !== undefined) parts.push(request.body)
  return Buffer.concat(parts)
}

/**
 * Writes the bytes and collects what comes back until the server closes the
 * connection or `timeoutMs` passes (a request whose declared body never comes
 * may legitimately wait for it). `headMethods` says which responses, in order,
 * answer HEAD (they carry no body whatever their content-length says).
 */
export function exchange(port: number, bytes: Buffer, options: { timeoutMs: number; headMethods?: readonly boolean[] }): Promise<RawExchange> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port })
    const chunks: Buffer[] = []
    let reset = false
    let timedOut = false
    let settled = false
    const finish = (closed: boolean): void => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      socket.destroy()
      const parsed = parseResponses(Buffer.concat(chunks), options.headMethods ?? [], closed)
      resolve({ ...parsed, closed, reset, timedOut })
    }
    const timer = setTimeout(() => {
      timedOut = true
      finish(false)
    }, options.timeoutMs)
    socket.on('connect', () => socket.write(bytes))
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk)
      // A complete response that keeps the connection alive: the server will not close it, so stop here.
      const { responses } = parseResponses(Buffer.concat(chunks), options.headMethods ?? [], false)
      if (responses.some((r) => r.status >= 200 && r.complete && !/\bclose\b/i.test(r.headers['connection'] ?? ''))) finish(false)
    })
    socket.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'ECONNRESET' || error.code === 'EPIPE') reset = true
      finish(true)
    })
    socket.on('close', () => finish(true))
  })
}

export function parseResponses(data: Buffer, headMethods: readonly boolean[], closed: boolean): { responses: RawResponse[]; trailing: Buffer } {
  const responses: RawResponse[] = []
  let at = 0
  while (at < data.length) {
    const headEnd = data.indexOf('\r\n\r\n', at)
    if (headEnd < 0) break
    const head = data.subarray(at, headEnd).toString('latin1').split('\r\n')
    const statusLine = /^HTTP\/1\.[01] (\d{3}) ?(.*)$/.exec(head[0] ?? '')
    if (statusLine === null) break
    const status = Number(statusLine[1])
    const headers: Record<string, string> = {}
    for (const line of head.slice(1)) {
      const colon = line.indexOf(':')
      if (colon <= 0) continue
      const name = line.slice(0, colon).trim().toLowerCase()
      const value = line.slice(colon + 1).trim()
      headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`
    }
    let cursor = headEnd + 4
    // Interim 1xx responses precede the final one of the same request.
    const isHead = headMethods[responses.filter((r) => r.status >= 200).length] === true
    let body: Buffer = Buffer.alloc(0)
    let complete = true
    if (isHead || status === 204 || status === 304 || (status >= 100 && status < 200)) {
      // No body by definition.
    } else if ((headers['transfer-encoding'] ?? '').toLowerCase().includes('chunked')) {
      const decoded = decodeChunked(data, cursor)
      body = decoded.body
      complete = decoded.complete
      cursor = decoded.end
    } else if (headers['content-length'] !== undefined) {
      const length = Number(headers['content-length'])
      body = data.subarray(cursor, cursor + length)
      complete = body.length === length
      cursor += body.length
    } else {
      body = data.subarray(cursor)
      complete = closed
      cursor = data.length
    }
    responses.push({ status, reason: statusLine[2] ?? '', headers, body, complete })
    at = cursor
    if (!complete) break
  }
  return { responses, trailing: data.subarray(at) }
}

function decodeChunked(data: Buffer, start: number): { body: Buffer; complete: boolean; end: number } {
  const parts: Buffer[] = []
  let at = start
  for (;;) {
    const lineEnd = data.indexOf('\r\n', at)
    if (lineEnd < 0) return { body: Buffer.concat(parts), complete: false, end: data.length }
    const size = Number.parseInt(data.subarray(at, lineEnd).toString('latin1'), 16)
    if (!Number.isFinite(size)) return { body: Buffer.concat(parts), complete: false, end: data.length }
    at = lineEnd + 2
    if (size === 0) {
      // Trailers (none expected) end with an empty line.
      const trailerEnd = data.indexOf('\r\n', at)
      return { body: Buffer.concat(parts), complete: trailerEnd >= 0, end: trailerEnd < 0 ? data.length : trailerEnd + 2 }
    }
    if (at + size + 2 > data.length) return { body: Buffer.concat(parts), complete: false, end: data.length }
    parts.push(data.subarray(at, at + size))
    at += size + 2
  }
}
