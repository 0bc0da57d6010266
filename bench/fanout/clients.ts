/**
 * The fan-out benchmark's load generator, in a process of its own: `count`
 * clients of one shape on raw TCP sockets (no HTTP library: at 10k clients
 * one would cost more than the server under test), one socket each.
 *
 * Long-poll clients send `live=true` requests carrying `handle`, `offset` (from
 * `electric-offset`) and `cursor` (from `electric-cursor`), reading each
 * response by its content-length and sending the next request at once. SSE
 * clients open one `live_sse=true` stream and read it to the end of the run.
 * Each client records CLOCK_MONOTONIC when a body (or stream bytes) holding a
 * write's end marker (`end:<write>`, the transaction's last row) has arrived.
 *
 * Commands: `start {host, port, query, handle, offset, cursor, count, sse}` ->
 * when every request is sent; `pending {}` -> how many long-polls are waiting
 * for an answer; `stats {write}` -> how many clients have that write and when
 * each got it; `sample {write}` -> client 0's body and headers for it (the
 * ceiling's template); `stop {}`.
 */
import net from 'node:net'
import { serveCommands } from '../http/json-lines.js'
import { END_MARK, WRITE_DIGITS } from './schema.js'

/** Connections opened at once while starting. */
const CONNECT_CONCURRENCY = 256
/** Pause before a client whose request failed tries again. */
const RETRY_MS = 200

const MARK = Buffer.from(END_MARK)
const HEADER_END = Buffer.from('\r\n\r\n')

/** Arrival times (ns, CLOCK_MONOTONIC) by write. */
const arrivals = new Map<number, number[]>()
const samples = new Map<number, { body: string; headers: Record<string, string> }>()
const counts = { responses: 0, errors: 0, conflicts: 0, otherStatus: 0 }
const clients: Client[] = []
let stopping = false

function recordMarks(bytes: Buffer, at: number, seen: Set<number> | undefined): number[] {
  const found: number[] = []
  for (let i = bytes.indexOf(MARK); i >= 0; i = bytes.indexOf(MARK, i + MARK.length)) {
    const digits = bytes.toString('latin1', i + MARK.length, i + MARK.length + WRITE_DIGITS)
    if (digits.length < WRITE_DIGITS) break
    const write = Number(digits)
    if (seen?.has(write)) continue
    seen?.add(write)
    found.push(write)
    let list = arrivals.get(write)
    if (list === undefined) arrivals.set(write, (list = []))
    list.push(at)
  }
  return found
}

interface Target {
  readonly host: string
  readonly port: number
  readonly query: string
  readonly sse: boolean
}

class Client {
  private socket: net.Socket | undefined
  private chunks: Buffer[] = []
  private length = 0
  private head: { status: number; bodyStart: number; contentLength: number; headers: Record<string, string> } | undefined
  /** SSE: the last bytes of the previous read, for a marker split across reads; and writes seen on this stream. */
  private carry: Buffer = Buffer.alloc(0)
  private readonly seen = new Set<number>()
  waiting = false

  constructor(
    private readonly target: Target,
    private readonly index: number,
    private handle: string,
    private offset: string,
    private cursor: string,
  ) {}

  open(): Promise<void> {
    return new Promise((resolve) => {
      const socket = net.connect({ host: this.target.host, port: this.target.port })
      this.socket = socket
      socket.setNoDelay(true)
      socket.on('connect', () => {
        this.send()
        resolve()
      })
      socket.on('data', (chunk: Buffer) => this.onData(chunk))
      socket.on('error', () => {})
      socket.on('close', () => {
        if (stopping) return
        counts.errors++
        this.waiting = false
        setTimeout(() => void this.open(), RETRY_MS)
        resolve()
      })
    })
  }

  close(): void {
    this.socket?.destroy()
  }

  private send(): void {
    const t = this.target
    const path = `/v1/shape?${t.query}&handle=${encodeURIComponent(this.handle)}&offset=${this.offset}&cursor=${this.cursor}&live=true${t.sse ? '&live_sse=true' : ''}`
    this.waiting = true
    this.socket!.write(`GET ${path} HTTP/1.1\r\nhost: ${t.host}\r\n${t.sse ? 'accept: text/event-stream\r\n' : ''}\r\n`)
  }

  private onData(chunk: Buffer): void {
    const at = Number(process.hrtime.bigint())
    if (this.target.sse) {
      const bytes = this.carry.length === 0 ? chunk : Buffer.concat([this.carry, chunk])
      recordMarks(bytes, at, this.seen)
      this.carry = Buffer.from(bytes.subarray(Math.max(0, bytes.length - (MARK.length + WRITE_DIGITS))))
      return
    }
    this.chunks.push(chunk)
    this.length += chunk.length
    if (this.head === undefined) {
      const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks)
      this.chunks = [all]
      const end = all.indexOf(HEADER_END)
      if (end < 0) return
      const lines = all.toString('latin1', 0, end).split('\r\n')
      const headers: Record<string, string> = {}
      for (const line of lines.slice(1)) {
        const colon = line.indexOf(':')
        headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim()
      }
      this.head = { status: Number(lines[0]!.split(' ')[1]), bodyStart: end + 4, contentLength: Number(headers['content-length'] ?? 0), headers }
    }
    const head = this.head
    if (this.length < head.bodyStart + head.contentLength) return
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks)
    const body = all.subarray(head.bodyStart, head.bodyStart + head.contentLength)
    this.chunks = []
    this.length = 0
    this.head = undefined
    this.waiting = false
    counts.responses++
    if (head.status === 200) {
      const writes = recordMarks(body, at, undefined)
      if (this.index === 0) for (const w of writes) samples.set(w, { body: body.toString('utf8'), headers: head.headers })
      this.offset = head.headers['electric-offset'] ?? this.offset
      this.cursor = head.headers['electric-cursor'] ?? this.cursor
      this.send()
      return
    }
    if (head.status === 409) counts.conflicts++
    else counts.otherStatus++
    setTimeout(() => this.send(), RETRY_MS)
  }
}

async function start(args: Record<string, unknown>): Promise<Record<string, number>> {
  const target: Target = { host: String(args.host), port: Number(args.port), query: String(args.query), sse: args.sse === true }
  const count = Number(args.count)
  const t0 = performance.now()
  let next = 0
  const opener = async (): Promise<void> => {
    while (next < count) {
      const client = new Client(target, next++, String(args.handle), String(args.offset), String(args.cursor))
      clients.push(client)
      await client.open()
    }
  }
  await Promise.all(Array.from({ length: Math.min(CONNECT_CONCURRENCY, count) }, opener))
  return { clients: clients.length, startMs: performance.now() - t0 }
}

function stats(args: Record<string, unknown>): Record<string, unknown> {
  const list = arrivals.get(Number(args.write)) ?? []
  return { got: list.length, arrivals: list, ...counts }
}

function pending(): Record<string, number> {
  let waiting = 0
  for (const c of clients) if (c.waiting) waiting++
  return { waiting, clients: clients.length, ...counts }
}

function sample(args: Record<string, unknown>): unknown {
  return samples.get(Number(args.write)) ?? null
}

function stop(): Record<string, number> {
  stopping = true
  for (const c of clients) c.close()
  return { ...counts }
}

serveCommands({ start, stats, pending, sample, stop })
