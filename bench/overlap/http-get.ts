/**
 * One GET over a keep-alive agent, read whole, with the CLOCK_MONOTONIC time of
 * its last byte (the writer stamps its updates with the same clock). Shared by
 * the overlap benchmark's load generators; plain `node:http`, no client library.
 */
import http from 'node:http'

export interface Reply {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly body: Buffer
  /** CLOCK_MONOTONIC (ns) when the last byte of the body arrived. */
  readonly at: bigint
}

export function getWhole(base: URL, path: string, agent: http.Agent): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: base.hostname, port: base.port, path, agent }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), at: process.hrtime.bigint() }))
      res.on('error', reject)
    })
    req.on('error', reject)
  })
}

export function header(r: Reply, name: string): string | undefined {
  const v = r.headers[name]
  return Array.isArray(v) ? v[0] : v
}

/** A 503's `retry-after` in ms (the protocol sends whole seconds); `fallbackMs` when absent or unreadable. */
export function retryAfterMs(r: Reply, fallbackMs: number): number {
  const s = Number(header(r, 'retry-after'))
  return Number.isFinite(s) && s >= 0 ? s * 1000 : fallbackMs
}
