import { createServer, type Server, type ServerResponse } from 'node:http'
import { connect, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { afterEach, describe, expect, it } from 'vitest'
import { StalledSends } from '../../src/http/stalled-sends.js'

/**
 * StalledSends over a real node:http server and a raw client socket on
 * loopback. The body is one write far larger than the kernel's socket
 * buffers, so Node's count of finished writes stays flat until the client
 * has taken nearly all of it: what a client slower than one write per window
 * sees on a real network, where the kernel takes a slow client's bytes in
 * small steps.
 */

const BODY_BYTES = 24 * 1024 * 1024

interface Harness {
  readonly server: Server
  readonly port: number
  readonly sends: StalledSends
  readonly responses: ServerResponse[]
}

let open: Harness | undefined

afterEach(async () => {
  open?.sends.close()
  open?.server.closeAllConnections()
  await new Promise((resolve) => open?.server.close(resolve) ?? resolve(undefined))
  open = undefined
})

async function serve(windowMs: number): Promise<Harness> {
  const sends = new StalledSends(windowMs)
  const responses: ServerResponse[] = []
  const body = Buffer.alloc(BODY_BYTES, 0x61)
  const server = createServer((_req, res) => {
    responses.push(res)
    res.writeHead(200, { 'content-length': String(BODY_BYTES) })
    res.end(body)
    sends.watch(res)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as { port: number }).port
  open = { server, port, sends, responses }
  return open
}

/** Sends a GET and reads the answer, pausing `pauseMs` after every piece the socket gives; resolves with the bytes read when the connection closes. */
function fetchSlowly(port: number, pauseMs: number): { socket: Socket; done: Promise<number> } {
  const socket = connect({ host: '127.0.0.1', port })
  let got = 0
  const done = new Promise<number>((resolve) => {
    socket.on('data', (chunk: Buffer) => {
      got += chunk.length
      if (pauseMs <= 0) return
      socket.pause()
      setTimeout(() => socket.resume(), pauseMs)
    })
    socket.on('error', () => {})
    socket.on('close', () => resolve(got))
  })
  socket.write('GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n')
  return { socket, done }
}

describe('StalledSends', () => {
  it('cuts a response whose client reads nothing for a window, and forgets it', async () => {
    const { port, sends, responses } = await serve(200)
    const { socket, done } = fetchSlowly(port, 0)
    await new Promise((resolve) => socket.once('data', resolve))
    socket.pause()
    for (const until = Date.now() + 5000; responses[0]?.destroyed !== true && Date.now() < until; ) await sleep(20)
    expect(responses[0]?.destroyed).toBe(true)
    expect(sends.size).toBe(0)
    socket.resume()
    expect(await done).toBeLessThan(BODY_BYTES)
  })

  it('never cuts a client that reads slowly but steadily through one write larger than the socket buffers', async () => {
    const { port, sends, responses } = await serve(500)
    // About 64 KiB every 10 ms: several seconds for the body, one write that finishes only at its end.
    const { done } = fetchSlowly(port, 10)
    const got = await done
    expect(responses[0]?.destroyed === true && !responses[0].writableFinished).toBe(false)
    // The status line and headers, then every byte of the body.
    expect(got).toBeGreaterThan(BODY_BYTES)
    expect(sends.size).toBe(0)
  })
})
