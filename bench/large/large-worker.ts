/**
 * One download of a large shape, in a fresh Node process of its own (run with
 * --expose-gc), so the memory it reports is that client's alone.
 *
 * Commands (JSON lines, `http/json-lines.ts`):
 * - `load {client}`: `ours` and `official` import their client's Shape
 *   (`client/shape-opener.ts`); `raw` and `parse` need nothing beyond node:http.
 * - `sync {base, table, where?, rows}`: the timed download, from the first
 *   request (`offset=-1`) to the response that says up-to-date. For a Shape,
 *   until `ready()` with `rows` rows in its Map (checked); for `raw`, each
 *   response's body is read and counted and the next offset is taken from
 *   its headers, nothing parsed; for `parse`, the same download with each
 *   body decoded as UTF-8, given to one `JSON.parse`, and every message with
 *   a key put in a Map (key to the value object JSON.parse made, values left
 *   as text): what any JavaScript client that keeps the rows must at least
 *   do, the floor for `ours` and `official`. Peak RSS is the kernel's high-water mark over
 *   the window (reset at its start), peak heapUsed sampled every 20 ms,
 *   retained memory measured after a forced GC with the rows still held.
 * - `digest`: sha256 of the Shape's rows sorted by key (equal digests, equal rows).
 */
import { createHash } from 'node:crypto'
import { Agent, get } from 'node:http'
import { MemorySampler, cpuMs, gc, memory, peakRss, resetPeakRss } from '../client/process-memory.js'
import { type Opener, type OpenShape, loadOpener, rowsDigest } from '../client/shape-opener.js'
import { serveCommands } from '../http/json-lines.js'
import type { LargeClient } from './report.js'

let client: LargeClient | undefined
let open: Opener | undefined
let current: OpenShape | undefined
/** The `parse` client's rows, held until `stop` like a Shape's. */
let parsedRows: Map<string, unknown> | undefined

async function load(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  client = args.client as LargeClient
  if (client === 'ours' || client === 'official') open = await loadOpener(client)
  gc()
  return { memory: memory() }
}

interface Download {
  readonly bodyBytes: number
  readonly requests: number
}

/**
 * Follows the shape's log with plain HTTP/1.1 keep-alive requests: each body
 * is read to its end (its bytes counted, then dropped, or with `rows` kept
 * there: the `parse` floor) and the next request is made from the response's
 * electric-handle and electric-offset headers.
 */
async function rawDownload(base: string, table: string, where: string | undefined, rows?: Map<string, unknown>): Promise<Download> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  const shape = `${base}/v1/shape?table=${encodeURIComponent(table)}${where === undefined ? '' : `&where=${encodeURIComponent(where)}`}`
  let url = `${shape}&offset=-1`
  let bodyBytes = 0
  let requests = 0
  try {
    for (;;) {
      const r = await new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; bytes: number }>((resolve, reject) => {
        get(url, { agent }, (res) => {
          let bytes = 0
          const chunks: Buffer[] = []
          res.on('data', (chunk: Buffer) => {
            bytes += chunk.length
            if (rows !== undefined) chunks.push(chunk)
          })
          res.on('end', () => {
            if (rows !== undefined && res.statusCode === 200) keep(Buffer.concat(chunks).toString('utf8'), rows)
            resolve({ status: res.statusCode ?? 0, headers: res.headers, bytes })
          })
          res.on('error', reject)
        }).on('error', reject)
      })
      requests++
      bodyBytes += r.bytes
      if (r.status !== 200) throw new Error(`raw download of ${table}: status ${r.status}`)
      if (r.headers['electric-up-to-date'] !== undefined) break
      const handle = r.headers['electric-handle']
      const offset = r.headers['electric-offset']
      if (typeof handle !== 'string' || typeof offset !== 'string') throw new Error(`raw download of ${table}: a response without handle or offset`)
      url = `${shape}&handle=${encodeURIComponent(handle)}&offset=${encodeURIComponent(offset)}`
    }
  } finally {
    agent.destroy()
  }
  return { bodyBytes, requests }
}

/** One body into the Map: each message with a key, its value as JSON.parse made it (a delete removes it). */
function keep(text: string, rows: Map<string, unknown>): void {
  const messages = JSON.parse(text) as Array<{ key?: string; value?: unknown; headers: { operation?: string } }>
  for (const m of messages) {
    if (m.key === undefined) continue
    if (m.headers.operation === 'delete') rows.delete(m.key)
    else rows.set(m.key, m.value)
  }
}

async function sync(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  if (client === undefined) throw new Error('load a client first')
  const rows = Number(args.rows)
  const base = String(args.base)
  const table = String(args.table)
  const where = args.where === undefined ? undefined : String(args.where)
  gc()
  const before = memory()
  const hwmReset = resetPeakRss()
  const sampler = new MemorySampler().start()
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  let download: Download | undefined
  let size: number | undefined
  if (client === 'raw') {
    download = await rawDownload(base, table, where)
  } else if (client === 'parse') {
    parsedRows = new Map()
    download = await rawDownload(base, table, where, parsedRows)
    size = parsedRows.size
  } else {
    const shape = open!(`${base}/v1/shape`, table, where)
    await shape.ready()
    size = shape.value().size
    current = shape
  }
  const ms = performance.now() - t0
  const cpu = cpuMs(cpu0)
  sampler.stop()
  const peak = peakRss()
  gc()
  const retained = memory()
  if (size !== undefined && size !== rows) throw new Error(`${client}: ${size} rows at the first up-to-date, expected ${rows}`)
  return {
    ms,
    rows: size ?? null,
    bodyBytes: download?.bodyBytes ?? null,
    requests: download?.requests ?? null,
    ...cpu,
    before,
    peakRss: hwmReset ? peak : null,
    peakRssSampled: sampler.peakRssSampled,
    peakHeapUsed: sampler.peakHeapUsed,
    retained,
  }
}

function digest(): Record<string, unknown> {
  if (current === undefined) return { rowsSha256: null }
  return { rowsSha256: rowsDigest(current.value(), createHash('sha256')) }
}

async function stop(): Promise<null> {
  parsedRows = undefined
  await current?.stop()
  return null
}

serveCommands({ load, sync, digest, stop })
