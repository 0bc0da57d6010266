/**
 * One client's HTTP/1.1 connection on a raw socket: GET a path, read the
 * status, the few headers a shape client needs, and the body (content-length
 * or chunked), then the next GET on the same socket. Node's http client spends
 * several times the CPU per response of the caches under test (about 140 µs
 * here), which on a 2-core machine would make the load generator, not the
 * cache, decide when the last of 20,000 clients has a write.
 */
import { type Socket, connect } from 'node:net'

export interface RawReply {
  readonly status: number
  /** The shape headers a client follows (the last value of each), and whether `electric-up-to-date` was there. */
  readonly handle: string | undefined
  readonly offset: string | undefined
  readonly cursor: string | undefined
  readonly upToDate: boolean
  readonly body: Buffer
  /** CLOCK_MONOTONIC when the last byte of the body arrived. */
  readonly at: bigint
}

const CRLFCRLF = Buffer.from('\r\n\r\n')
/**
 * Only the headers a shape client acts on, found by one regex over the head: building a map of all of
 * them (a cache adds its own) cost more than the rest of a client's work per response.
 */
const WANTED = /\r\n(content-length|transfer-encoding|connection|electric-handle|electric-offset|electric-cursor|electric-up-to-date):[ \t]*([^\r]*)/gi

interface Head {
  status: number
  handle: string | undefined
  offset: string | undefined
  cursor: string | undefined
  upToDate: boolean
  close: boolean
  length: number | undefined
  chunked: boolean
}

function parseHead(text: string): Head {
  const head: Head = { status: Number(text.slice(9, 12)), handle: undefined, offset: undefined, cursor: undefined, upToDate: false, close: false, length: undefined, chunked: false }
  WANTED.lastIndex = 0
  for (let m = WANTED.exec(text); m !== null; m = WANTED.exec(text)) {
    const value = m[2]!.trimEnd()
    switch (m[1]!.toLowerCase()) {
      case 'content-length':
        head.length = Number(value)
        break
      case 'transfer-encoding':
        head.chunked = /chunked/i.test(value)
        break
      case 'connection':
        head.close = value.toLowerCase() === 'close'
        break
      case 'electric-handle':
        head.handle = value
        break
      case 'electric-offset':
        head.offset = value
        break
      case 'electric-cursor':
        head.cursor = value
        break
      case 'electric-up-to-date':
        head.upToDate = true
        break
    }
  }
  return head
}
/**
 * Every client names the same site, as browsers of one app do: the caches key on Host as well as the
 * URL, and two edges reached on different ports must pass one key to the shield.
 */
export const HOST = 'sluice.bench'

interface Pending {
  resolve(reply: RawReply): void
  reject(error: Error): void
}

export class RawConnection {
  private socket: Socket | undefined
  private buffer: Buffer = Buffer.alloc(0)
  private pending: Pending | undefined
  /** Parsed head of the response being read, once its headers are complete. */
  private head: Head | undefined

  constructor(
    private readonly host: string,
    private readonly port: number,
    private readonly localAddress: string | undefined,
  ) {}

  get(path: string): Promise<RawReply> {
    if (this.pending !== undefined) throw new Error('one request at a time')
    return new Promise<RawReply>((resolve, reject) => {
      this.pending = { resolve, reject }
      const socket = this.socket ?? this.open()
      socket.write(`GET ${path} HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`)
    })
  }

  close(): void {
    this.socket?.destroy()
    this.socket = undefined
  }

  private open(): Socket {
    const socket = connect({ host: this.host, port: this.port, ...(this.localAddress === undefined ? {} : { localAddress: this.localAddress }) })
    socket.setNoDelay(true)
    this.socket = socket
    this.buffer = Buffer.alloc(0)
    this.head = undefined
    socket.on('data', (chunk: Buffer) => {
      this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk])
      this.parse()
    })
    const gone = (error?: Error): void => {
      if (this.socket === socket) this.socket = undefined
      const p = this.pending
      this.pending = undefined
      p?.reject(error ?? Object.assign(new Error('connection closed'), { code: 'ECONNRESET' }))
    }
    socket.on('error', gone)
    socket.on('close', () => gone())
    return socket
  }

  private parse(): void {
    if (this.head === undefined) {
      const end = this.buffer.indexOf(CRLFCRLF)
      if (end < 0) return
      // Through the CRLF of the last header line, so every header line starts with CRLF.
      this.head = parseHead(this.buffer.toString('latin1', 0, end + 2))
      this.buffer = this.buffer.subarray(end + 4)
    }
    const head = this.head
    let body: Buffer | undefined
    if (head.chunked) {
      body = this.dechunk()
      if (body === undefined) return
    } else {
      const length = head.length ?? 0
      if (this.buffer.length < length) return
      body = this.buffer.subarray(0, length)
      this.buffer = this.buffer.subarray(length)
    }
    const at = process.hrtime.bigint()
    this.head = undefined
    const p = this.pending
    this.pending = undefined
    if (head.close) this.close()
    p?.resolve({
      status: head.status,
      handle: head.handle,
      offset: head.offset,
      cursor: head.cursor,
      upToDate: head.upToDate,
      body,
      at,
    })
  }

  /** The whole chunked body once its last chunk is in the buffer (consumed then), else undefined. */
  private dechunk(): Buffer | undefined {
    const parts: Buffer[] = []
    let at = 0
    for (;;) {
      const lineEnd = this.buffer.indexOf('\r\n', at)
      if (lineEnd < 0) return undefined
      const size = Number.parseInt(this.buffer.toString('latin1', at, lineEnd), 16)
      if (size === 0) {
        // No trailers: the last chunk is followed by an empty line.
        if (this.buffer.length < lineEnd + 4) return undefined
        this.buffer = this.buffer.subarray(lineEnd + 4)
        return parts.length === 1 ? parts[0]! : Buffer.concat(parts)
      }
      const start = lineEnd + 2
      if (this.buffer.length < start + size + 2) return undefined
      parts.push(this.buffer.subarray(start, start + size))
      at = start + size + 2
    }
  }
}
