/**
 * The fan-out benchmark's ceiling, in a process of its own: a bare `node:http`
 * server that parks every live request and, on `publish`, writes one response
 * (Sluice's own headers and body for a transaction of that size, captured
 * earlier in the run, with the write's marker swapped in) to every parked
 * long-poll and the same entries as SSE events to every open stream, from one
 * buffer in memory. No Postgres, no decoding, no storage, no per-request work
 * beyond the write: what the fan-out costs Node and the kernel.
 *
 * Commands: `listen {}` -> `{port}`; `parked {}` -> how many long-polls wait
 * and streams are open; `publish {write, body, headers, events}` -> the
 * CLOCK_MONOTONIC time the first byte was handed over; `close {}`.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { serveCommands } from '../http/json-lines.js'
import { END_MARK, writeMark } from './schema.js'

let parked = new Set<http.ServerResponse>()
const streams = new Set<http.ServerResponse>()
let server: http.Server | undefined

function onRequest(req: http.IncomingMessage, res: http.ServerResponse): void {
  const url = req.url ?? ''
  if (url.includes('live_sse=true')) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' })
    res.flushHeaders()
    streams.add(res)
    res.on('close', () => streams.delete(res))
    return
  }
  parked.add(res)
  res.on('close', () => parked.delete(res))
}

/** `template` with the write's marker in place of the one it was captured with (same length). */
function withMark(template: Buffer, write: number): Buffer {
  const out = Buffer.from(template)
  const mark = Buffer.from(END_MARK + writeMark(write))
  for (let i = out.indexOf(END_MARK); i >= 0; i = out.indexOf(END_MARK, i + 1)) mark.copy(out, i)
  return out
}

async function listen(): Promise<{ port: number }> {
  server = http.createServer({ keepAliveTimeout: 600_000, requestTimeout: 0, headersTimeout: 60_000 }, onRequest)
  server.maxHeadersCount = 100
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve))
  return { port: (server.address() as AddressInfo).port }
}

function publish(args: Record<string, unknown>): { startNs: string; longPolls: number; streams: number } {
  const write = Number(args.write)
  const body = withMark(Buffer.from(String(args.body), 'utf8'), write)
  const events = withMark(Buffer.from(String(args.events), 'utf8'), write)
  const headers = { ...(args.headers as Record<string, string>), 'content-length': String(body.length) }
  const startNs = process.hrtime.bigint()
  const list = parked
  parked = new Set()
  for (const res of list) {
    res.writeHead(200, headers)
    res.end(body)
  }
  for (const res of streams) res.write(events)
  return { startNs: startNs.toString(), longPolls: list.size, streams: streams.size }
}

function count(): Record<string, number> {
  return { parked: parked.size, streams: streams.size }
}

async function close(): Promise<void> {
  for (const res of parked) res.destroy()
  for (const res of streams) res.destroy()
  server?.closeAllConnections()
  await new Promise<void>((resolve) => (server === undefined ? resolve() : server.close(() => resolve())))
}

serveCommands({ listen, parked: count, publish, close })
