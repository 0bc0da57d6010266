import { createServer } from 'node:net'

/**
 * A TCP port that was free a moment ago: the kernel picks it for a listener on
 * port 0, which we then close. Another process can take it before we use it, so
 * callers retry on "address in use".
 */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.once('error', reject)
    server.listen({ host, port: 0, exclusive: true }, () => {
      const address = server.address()
      const port = typeof address === 'object' && address !== null ? address.port : undefined
      server.close((error) => {
        if (error) reject(error)
        else if (port === undefined) reject(new Error('freePort: the listener reported no port'))
        else resolve(port)
      })
    })
  })
}
