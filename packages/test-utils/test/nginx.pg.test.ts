import { existsSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { findNginx, startNginx, useTempDir } from '../src/index.js'

/**
 * nginx found or provisioned from Debian's packages, started privately against
 * a real node:http origin. The origin counts what reaches it, so "cached" is
 * checked from both sides: nginx's log and the origin's own count.
 */

let origin: Server
let originPort: number
const hits = new Map<string, number>()

beforeAll(async () => {
  origin = createServer((req, res) => {
    const url = req.url ?? ''
    hits.set(url, (hits.get(url) ?? 0) + 1)
    const cacheControl = url.startsWith('/cached') ? 'public, max-age=60' : 'no-store'
    res.writeHead(url.startsWith('/missing') ? 404 : 200, { 'cache-control': cacheControl, 'content-type': 'text/plain', 'x-origin': 'yes' })
    res.end(`body of ${url}`)
  })
  await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve))
  originPort = (origin.address() as AddressInfo).port
})

afterAll(async () => {
  await new Promise((resolve) => origin.close(resolve))
})

const dirs = useTempDir('nginx-test')

describe('findNginx', () => {
  it('finds or provisions a working nginx, the same one on every call', async () => {
    const first = await findNginx()
    expect(first.version).toMatch(/^\d+\.\d+\.\d+/)
    expect(existsSync(first.path)).toBe(true)
    expect(await findNginx()).toBe(first)
  })

  it("provisions Debian's nginx into an empty cache once, with racing callers sharing it", async () => {
    const cacheDir = await dirs.make('cache')
    const [a, b] = await Promise.all([
      findNginx({ cacheDir, ignoreInstalled: true }),
      // A different options key, so this is a second provisioner racing for the same dir and lock.
      findNginx({ cacheDir: `${cacheDir}/`, ignoreInstalled: true }),
    ])
    expect(a.source).toBe('extracted')
    expect(b.source).toBe('extracted')
    expect(a.path).toBe(join(cacheDir, 'root', 'usr', 'sbin', 'nginx'))
    expect(b.version).toBe(a.version)
    expect(existsSync(join(cacheDir, '.provision.lock'))).toBe(false)
  })

  it('rejects a binary option that is not nginx, naming it', async () => {
    await expect(findNginx({ binary: '/bin/false' })).rejects.toThrow('binary option /bin/false is not a working nginx')
  })
})

describe('startNginx', () => {
  it('proxies to the upstream, logs each request as JSON and stops cleanly', async () => {
    const nginx = await startNginx({ upstreamPort: originPort })
    const res = await fetch(`${nginx.url}/plain?a=1&b=%20`)
    expect(res.status).toBe(200)
    expect(res.headers.get('x-origin')).toBe('yes')
    expect(await res.text()).toBe('body of /plain?a=1&b=%20')
    const log = await nginx.accessLog()
    expect(log).toEqual([expect.objectContaining({ method: 'GET', uri: '/plain?a=1&b=%20', status: 200, cacheStatus: '', upstreamStatus: '200' })])
    const dir = nginx.dir
    await nginx.stop()
    expect(nginx.stopped).toBe(true)
    expect(existsSync(dir)).toBe(false)
    await expect(fetch(`${nginx.url}/plain`)).rejects.toThrow()
    await nginx.stop()
  })

  it('runs a caching configuration: cacheable answers are served from the cache, no-store ones never', async () => {
    const nginx = await startNginx({
      upstreamPort: originPort,
      config: ({ port, upstreamPort, cacheDir }) => `
        proxy_cache_path ${cacheDir} keys_zone=test:1m;
        server {
          listen 127.0.0.1:${port};
          location / {
            proxy_pass http://127.0.0.1:${upstreamPort};
            proxy_cache test;
            add_header x-cache $upstream_cache_status always;
          }
        }`,
    })
    try {
      const statuses: Array<string | null> = []
      for (let i = 0; i < 3; i++) statuses.push((await fetch(`${nginx.url}/cached-1`)).headers.get('x-cache'))
      for (let i = 0; i < 2; i++) statuses.push((await fetch(`${nginx.url}/fresh-1`)).headers.get('x-cache'))
      expect(statuses).toEqual(['MISS', 'HIT', 'HIT', 'MISS', 'MISS'])
      expect(hits.get('/cached-1')).toBe(1)
      expect(hits.get('/fresh-1')).toBe(2)
      expect((await nginx.accessLog()).map((e) => [e.uri, e.cacheStatus])).toEqual([
        ['/cached-1', 'MISS'],
        ['/cached-1', 'HIT'],
        ['/cached-1', 'HIT'],
        ['/fresh-1', 'MISS'],
        ['/fresh-1', 'MISS'],
      ])
    } finally {
      await nginx.stop()
    }
  })

  it('runs instances side by side, each in its own directory', async () => {
    const [a, b] = await Promise.all([startNginx({ upstreamPort: originPort }), startNginx({ upstreamPort: originPort })])
    try {
      expect(a.port).not.toBe(b.port)
      expect(a.dir).not.toBe(b.dir)
      expect((await fetch(`${a.url}/side-a`)).status).toBe(200)
      expect((await fetch(`${b.url}/side-b`)).status).toBe(200)
      expect((await a.accessLog()).map((e) => e.uri)).toEqual(['/side-a'])
      expect((await b.accessLog()).map((e) => e.uri)).toEqual(['/side-b'])
    } finally {
      await Promise.all([a.stop(), b.stop()])
    }
  })

  it("reports nginx's own complaint about a broken configuration", async () => {
    await expect(startNginx({ config: 'server { listen 127.0.0.1:1; no_such_directive on; }' })).rejects.toThrow(
      /unknown directive "no_such_directive"/,
    )
  })
})

