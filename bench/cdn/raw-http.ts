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
  /** Lower-cased names; only the last value of a repeated header. */
  readonly headers: ReadonlyMap<string, string>
  readonly body: Buffer
  /** CLOCK_MONOTONIC when the last byte of the body arrived. */
  readonly at: bigint
}

const CRLFCRLF = Buffer.from('\r\n\r\n')
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
  private head: { status: number; headers: Map<string, string>; length: number | undefined; chunked: boolean } | undefined

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
      const lines = this.buffer.toString('latin1', 0, end).split('\r\n')
      const status = Number(lines[0]!.split(' ', 3)[1])
      const headers = new Map<string, string>()
      for (let i = 1; i < lines.length; i++) {
        const line = lines[i]!
        const colon = line.indexOf(':')
        if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim())
      }
      const length = headers.get('content-length')
      this.head = {
        status,
        headers,
        length: length === undefined ? undefined : Number(length),
        chunked: /chunked/i.test(headers.get('transfer-encoding') ?? ''),
      }
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
    if (head.headers.get('connection')?.toLowerCase() === 'close') this.close()
    p?.resolve({ status: head.status, headers: head.headers, body, at })
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
