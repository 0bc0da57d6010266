import { randomBytes } from 'node:crypto'
import { readdirSync } from 'node:fs'
import type { Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { loopbackPair } from './loopback.js'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { type AnswerOutcome, type Sendfile, type SocketParking, loadSendfile } from '../src/index.js'

// Real TCP connections on loopback and the real addon (these fail if it was not built).

let sendfile: Sendfile
const sockets: Socket[] = []
const gone: number[] = []
let parking: SocketParking

beforeAll(() => {
  const load = loadSendfile()
  if (!load.available) throw new Error(`the sendfile addon is not available: ${load.reason}`)
  sendfile = load.sendfile
  parking = sendfile.parking((id) => gone.push(id))!
})

afterEach(() => {
  for (const s of sockets.splice(0)) s.destroy()
  gone.length = 0
})

function pair(): ReturnType<typeof loopbackPair> {
  return loopbackPair(sockets)
}

function openFds(): number {
  return readdirSync('/proc/self/fd').length
}

/** Everything `client` receives until it ends (or `n` bytes, when given). */
function receive(client: Socket, n = Number.POSITIVE_INFINITY): Promise<Buffer> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    let got = 0
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk)
      got += chunk.length
      if (got >= n) {
        client.off('data', onData)
        resolve(Buffer.concat(chunks))
      }
    }
    client.on('data', onData)
    client.once('end', () => resolve(Buffer.concat(chunks)))
    client.once('close', () => resolve(Buffer.concat(chunks)))
  })
}

function answer(id: number, head: Buffer, body: Buffer | undefined, keepOpen: boolean): Promise<AnswerOutcome> {
  return new Promise((resolve, reject) => {
    if (!parking.answer(id, head, body, keepOpen, resolve)) reject(new Error(`${id} is not parked`))
  })
}

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(5)
  }
}

describe('SocketParking', () => {
  it('holds a connection without its Node socket, answers it, and hands it back as a socket that reads what the client sent meanwhile', async () => {
    const fdsBefore = openFds()
    const { server, client } = await pair()
    const id = parking.park(server)
    expect(id).toBeTypeOf('number')
    expect(server.destroyed).toBe(true)
    expect(parking.size).toBe(1)
    // The client's next request, sent while parked, waits in the kernel for whoever reads next.
    client.write('next request')
    await sleep(20)
    const got = receive(client, 9)
    const outcome = await answer(id!, Buffer.from('head|'), Buffer.from('body'), true)
    expect(await got).toEqual(Buffer.from('head|body'))
    expect(outcome.ok).toBe(true)
    const adopted = (outcome as { socket: Socket }).socket
    sockets.push(adopted)
    expect(parking.size).toBe(0)
    const read = await new Promise<Buffer>((resolve) => adopted.once('data', resolve))
    expect(read.toString()).toBe('next request')
    const reply = receive(client, 5)
    adopted.write('again')
    expect((await reply).toString()).toBe('again')
    adopted.destroy()
    client.destroy()
    await until(() => openFds() === fdsBefore, 'the descriptors to close')
    expect(gone).toEqual([])
  })

  it('closes a parked connection whose client leaves, and says so; answering it then is refused', async () => {
    const fdsBefore = openFds()
    const { server, client } = await pair()
    const id = parking.park(server)!
    client.destroy()
    await until(() => gone.includes(id), 'onGone')
    expect(parking.size).toBe(0)
    expect(parking.answer(id, Buffer.from('x'), undefined, true, () => expect.unreachable())).toBe(false)
    await until(() => openFds() === fdsBefore, 'the descriptors to close')
  })

  it('writes a body larger than the socket buffer to a client that reads slowly, byte for byte, without blocking the loop', async () => {
    const { server, client } = await pair()
    const body = randomBytes(24 * 1024 * 1024)
    const head = Buffer.from('HTTP/1.1 200 OK\r\n\r\n')
    const id = parking.park(server)!
    client.pause()
    let settled: AnswerOutcome | undefined
    expect(parking.answer(id, head, body, false, (o) => (settled = o))).toBe(true)
    // The loop runs while the client takes nothing: timers fire.
    const ticks = await new Promise<number>((resolve) => {
      let n = 0
      const timer = setInterval(() => {
        if (++n === 5) {
          clearInterval(timer)
          resolve(n)
        }
      }, 10)
    })
    expect(ticks).toBe(5)
    expect(settled).toBeUndefined()
    const got = receive(client)
    client.resume()
    const all = await got
    expect(all.length).toBe(head.length + body.length)
    expect(all.subarray(0, head.length).equals(head)).toBe(true)
    expect(all.subarray(head.length).equals(body)).toBe(true)
    await until(() => settled !== undefined, 'the answer to finish')
    expect(settled).toEqual({ ok: true, socket: undefined })
  })

  it('reports a client that leaves in the middle of an answer, and closes the connection', async () => {
    const fdsBefore = openFds()
    const { server, client } = await pair()
    const id = parking.park(server)!
    client.pause()
    let settled: AnswerOutcome | undefined
    parking.answer(id, Buffer.from('head'), randomBytes(16 * 1024 * 1024), true, (o) => (settled = o))
    await sleep(20)
    client.destroy()
    await until(() => settled !== undefined, 'the answer to fail')
    expect(settled!.ok).toBe(false)
    expect(['EPIPE', 'ECONNRESET']).toContain((settled as { code: string }).code)
    expect(parking.size).toBe(0)
    // Never also reported as gone: the answer's outcome says it.
    expect(gone).toEqual([])
    await until(() => openFds() === fdsBefore, 'the descriptors to close')
  })

  it('drop closes a parked connection unanswered', async () => {
    const fdsBefore = openFds()
    const { server, client } = await pair()
    const id = parking.park(server)!
    const got = receive(client)
    parking.drop(id)
    expect((await got).length).toBe(0)
    expect(parking.size).toBe(0)
    parking.drop(id)
    await until(() => openFds() === fdsBefore, 'the descriptors to close')
  })

  it('refuses sockets it cannot hold: destroyed, or with bytes Node has not written yet', async () => {
    const { server, client } = await pair()
    client.pause()
    server.write(randomBytes(32 * 1024 * 1024))
    expect(server.writableLength).toBeGreaterThan(0)
    expect(parking.park(server)).toBeUndefined()
    expect(server.destroyed).toBe(false)
    server.destroy()
    expect(parking.park(server)).toBeUndefined()
    expect(parking.size).toBe(0)
  })

  it('parks and answers many connections at once, each its own bytes', async () => {
    const fdsBefore = openFds()
    const pairs = await Promise.all(Array.from({ length: 200 }, () => pair()))
    const ids = pairs.map(({ server }) => parking.park(server)!)
    expect(new Set(ids).size).toBe(200)
    const received = pairs.map(({ client }) => receive(client))
    const outcomes = await Promise.all(ids.map((id, i) => answer(id, Buffer.from(`answer ${i}`), undefined, false)))
    expect(outcomes.every((o) => o.ok)).toBe(true)
    expect((await Promise.all(received)).map((b) => b.toString())).toEqual(ids.map((_, i) => `answer ${i}`))
    for (const { client } of pairs) client.destroy()
    await until(() => openFds() === fdsBefore, 'the descriptors to close')
  })
})
