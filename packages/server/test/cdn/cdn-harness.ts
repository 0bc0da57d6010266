import { readFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance } from 'fastify'
import type { NginxConfigContext } from '@sluice/test-utils'
import { type BuildAppOptions, buildApp } from '../../src/http/index.js'
import type { Pipeline } from '../../src/pipeline.js'

/** The documented configuration (README "A CDN in front"), byte for byte what a deployment would use. */
export const DEPLOY_CONFIG_PATH = fileURLToPath(new URL('../../deploy/nginx.conf', import.meta.url))

/**
 * The machine-specific values of deploy/nginx.conf and what the test puts in
 * their place. Each must occur exactly once, so an edit of the file that moves
 * or duplicates one fails here instead of testing something else.
 */
const SUBSTITUTIONS: ReadonlyArray<readonly [string, (context: NginxConfigContext) => string]> = [
  ['listen 80;', ({ port }) => `listen 127.0.0.1:${port};`],
  ['server 127.0.0.1:3000;', ({ upstreamPort }) => `server 127.0.0.1:${upstreamPort};`],
  ['proxy_cache_path /var/cache/nginx/sluice ', ({ cacheDir }) => `proxy_cache_path ${cacheDir} `],
]

export function deployConfig(context: NginxConfigContext): string {
  let text = readFileSync(DEPLOY_CONFIG_PATH, 'utf8')
  for (const [from, to] of SUBSTITUTIONS) {
    const count = text.split(from).length - 1
    if (count !== 1) throw new Error(`deploy/nginx.conf: expected "${from}" exactly once, found it ${count} times`)
    text = text.replace(from, to(context))
  }
  return text
}

/** A request as the origin saw it: method and URL exactly as nginx forwarded them. */
export interface OriginRequest {
  readonly method: string
  readonly url: string
}

/** The Sluice app on a real port, counting every request that reaches it (onRequest, before any route). */
export interface CountingOrigin {
  readonly app: FastifyInstance
  readonly port: number
  readonly requests: OriginRequest[]
  /** Requests per `METHOD url`. */
  counts(filter?: (request: OriginRequest) => boolean): Map<string, number>
  /** Raw responses still open, by URL (SSE streams, held long-polls). */
  readonly open: Map<string, number>
  /** For SSE requests (`live_sse` in the URL): each body write the origin made, in order. */
  readonly sseWrites: Map<string, string[]>
  close(): Promise<void>
}

export async function startCountingOrigin(pipeline: Pipeline, http: BuildAppOptions['http']): Promise<CountingOrigin> {
  const app = buildApp({ shapes: pipeline.shapeService, http: http ?? {} })
  const requests: OriginRequest[] = []
  const open = new Map<string, number>()
  const sseWrites = new Map<string, string[]>()
  app.addHook('onRequest', async (request, reply) => {
    // request.raw.url: before the app's own URL normalisation, i.e. what nginx sent.
    const url = request.raw.url ?? ''
    requests.push({ method: request.method, url })
    open.set(url, (open.get(url) ?? 0) + 1)
    const done = (): void => {
      const left = (open.get(url) ?? 1) - 1
      if (left === 0) open.delete(url)
      else open.set(url, left)
    }
    let counted = false
    const once = (): void => {
      if (counted) return
      counted = true
      done()
    }
    // finish: the whole response was handed to the socket; close: cut before that.
    reply.raw.once('finish', once)
    reply.raw.once('close', once)
    if (url.includes('live_sse')) {
      const writes: string[] = []
      sseWrites.set(url, writes)
      const raw = reply.raw
      const write = raw.write.bind(raw) as (...args: unknown[]) => boolean
      raw.write = ((chunk: unknown, ...rest: unknown[]) => {
        writes.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk as Uint8Array).toString('utf8'))
        return write(chunk, ...rest)
      }) as typeof raw.write
    }
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as AddressInfo).port
  return {
    app,
    port,
    requests,
    open,
    sseWrites,
    counts(filter = () => true) {
      const out = new Map<string, number>()
      for (const request of requests) {
        if (!filter(request)) continue
        const key = `${request.method} ${request.url}`
        out.set(key, (out.get(key) ?? 0) + 1)
      }
      return out
    },
    close: () => app.close(),
  }
}
