import { type AddressInfo, type Socket, connect, createServer } from 'node:net'

/**
 * A loopback TCP connection: `server` is the accepted side (the one a test
 * sends on or parks), `client` the peer. Both are pushed to `opened`, for the
 * test to destroy; errors on either are the test's to observe, not thrown.
 */
export async function loopbackPair(opened: Socket[]): Promise<{ server: Socket; client: Socket }> {
  const listener = createServer()
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve))
  const accepted = new Promise<Socket>((resolve) => listener.once('connection', resolve))
  const client = connect((listener.address() as AddressInfo).port, '127.0.0.1')
  const server = await accepted
  await new Promise((resolve) => (client.connecting ? client.once('connect', resolve) : resolve(undefined)))
  // Closed now, so descriptor counts taken around a test see only its sockets (the listening descriptor closes at
  // once; the callback would wait for the accepted connection to end as well).
  listener.close()
  opened.push(server, client)
  server.on('error', () => {})
  client.on('error', () => {})
  return { server, client }
}
