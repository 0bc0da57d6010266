import { createServer } from 'node:net'
import { describe, expect, it } from 'vitest'
import { ephemeralPortRange, freePort, stablePort } from '../src/index.js'

function listen(port: number): Promise<ReturnType<typeof createServer>> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen({ host: '127.0.0.1', port, exclusive: true }, () => resolve(server))
  })
}

describe('ports', () => {
  it('freePort hands out a port the kernel picked, in its ephemeral range, that can be listened on', async () => {
    const { low, high } = ephemeralPortRange()
    const port = await freePort()
    expect(port).toBeGreaterThanOrEqual(low)
    expect(port).toBeLessThanOrEqual(high)
    const server = await listen(port)
    server.close()
  })

  it('stablePort hands out a free port below the ephemeral range, which a listener on port 0 is never given', async () => {
    const { low } = ephemeralPortRange()
    const port = await stablePort()
    expect(port).toBeGreaterThanOrEqual(10_000)
    expect(port).toBeLessThan(low)
    const server = await listen(port)
    const others = await Promise.all(Array.from({ length: 200 }, () => freePort()))
    expect(others).not.toContain(port)
    server.close()
  })

  it('stablePort passes over a port in use and tries another', async () => {
    const taken = await stablePort()
    const server = await listen(taken)
    try {
      // The first draw lands on the taken port, the next one elsewhere.
      const span = ephemeralPortRange().low - 10_000
      const other = taken - 10_000 < span / 2 ? 0.75 : 0.25
      const draws = [(taken - 10_000 + 0.5) / span, other]
      let i = 0
      const port = await stablePort('127.0.0.1', () => draws[Math.min(i++, 1)]!)
      expect(port).toBe(10_000 + Math.floor(other * span))
      expect(i).toBe(2)
    } finally {
      server.close()
    }
  })
})
