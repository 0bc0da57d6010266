import { request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import { type BuildAppOptions, buildApp } from '../../src/http/index.js'
import type { Pipeline } from '../../src/pipeline.js'

/** A real server on an ephemeral port around a real pipeline. */
export interface TestServer {
  readonly app: FastifyInstance
  readonly port: number
  close(): Promise<void>
}

export async function startServer(pipeline: Pipeline, http: BuildAppOptions['http'] = {}): Promise<TestServer> {
  const app = buildApp({ shapes: pipeline.shapeService, http })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as AddressInfo).port
  return { app, port, close: () => app.close() }
}

export interface Res {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  readonly body: Buffer
  readonly text: string
  header(name: string): string | undefined
  json(): unknown
}

/** A raw HTTP request (node:http keeps the path byte for byte: `//`, `%73`, no normalisation). */
export function call(
  port: number,
  path: string,
  options: { method?: string; headers?: Record<string, string>; signal?: AbortSignal; body?: string } = {},
): Promise<Res> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: '127.0.0.1', port, path, method: options.method ?? 'GET', headers: options.headers ?? {}, ...(options.signal ? { signal: options.signal } : {}) },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () => {
          const body = Buffer.concat(chunks)
          const headers = res.headers
          resolve({
            status: res.statusCode ?? 0,
            headers,
            body,
            text: body.toString('utf8'),
            header: (name) => {
              const v = headers[name.toLowerCase()]
              return Array.isArray(v) ? v.join(', ') : v
            },
            json: () => JSON.parse(body.toString('utf8')),
          })
        })
        res.on('error', reject)
      },
    )
    req.on('error', reject)
    if (options.body !== undefined) req.write(options.body)
    req.end()
  })
}

export function shapeUrl(params: Record<string, string>): string {
  return `/v1/shape?${new URLSearchParams(params).toString()}`
}

/** Entries of a 200 body. */
export function messages(res: Res): Array<{ key?: string; value?: Record<string, unknown>; headers: Record<string, unknown> }> {
  return res.json() as Array<{ key?: string; value?: Record<string, unknown>; headers: Record<string, unknown> }>
}
