import { readFileSync } from 'node:fs'
import { createServer } from 'node:net'

/**
 * A TCP port that was free a moment ago: the kernel picks it for a listener on
 * port 0, which we then close. Another process can take it before we use it, so
 * callers retry on "address in use".
 */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return listenAndClose(host, 0)
}

/** Listens on `port` (0: one the kernel picks) and closes again; resolves with the port, rejects as `listen` fails. */
function listenAndClose(host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.once('error', reject)
    server.listen({ host, port, exclusive: true }, () => {
      const address = server.address()
      const bound = typeof address === 'object' && address !== null ? address.port : undefined
      server.close((error) => {
        if (error) reject(error)
        else if (bound === undefined) reject(new Error('freePort: the listener reported no port'))
        else resolve(bound)
      })
    })
  })
}

/** The lowest port this helper hands out: above the well-known and most registered services' ports. */
const LOWEST_STABLE_PORT = 10_000

/** Linux's `ip_local_port_range` (the ports the kernel picks for port 0 and outgoing connections); its default when unreadable. */
export function ephemeralPortRange(): { low: number; high: number } {
  try {
    const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number)
    if (Number.isInteger(low) && Number.isInteger(high)) return { low: low!, high: high! }
  } catch {
    // Not Linux: the range Linux ships with.
  }
  return { low: 32_768, high: 60_999 }
}

/**
 * A free TCP port outside the kernel's ephemeral range, for a server that a
 * test leaves unbound for a while and starts again on the same port (a
 * standby that has not taken over yet, a process killed and restarted). A
 * port from {@link freePort} is in that range, so in the meantime any
 * listener on port 0 in a test running alongside (or an outgoing
 * connection) can be given it, and requests meant for the stopped server
 * reach a stranger. The kernel never hands out a port outside the range, so
 * only a caller that picks ports by number could take this one.
 */
export async function stablePort(host = '127.0.0.1', random: () => number = Math.random): Promise<number> {
  const { low } = ephemeralPortRange()
  const span = low - LOWEST_STABLE_PORT
  if (span <= 0) throw new Error(`stablePort: the ephemeral range starts at ${low}, leaving no ports above ${LOWEST_STABLE_PORT} outside it`)
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = LOWEST_STABLE_PORT + Math.floor(random() * span)
    const free = await listenAndClose(host, port).then(
      () => true,
      (error: NodeJS.ErrnoException) => {
        if (error.code === 'EADDRINUSE') return false
        throw error
      },
    )
    if (free) return port
  }
  throw new Error(`stablePort: 100 ports in ${LOWEST_STABLE_PORT}-${low - 1} were all in use`)
}
