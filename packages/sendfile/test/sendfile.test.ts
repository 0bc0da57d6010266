import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { closeSync, openSync, readdirSync, writeFileSync } from 'node:fs'
import type { Socket } from 'node:net'
import { join } from 'node:path'
import { TLSSocket } from 'node:tls'
import { useTempDir } from '@sluice/test-utils'
import { SeededRandom } from '@sluice/test-utils/seeded-random'
import { loopbackPair } from './loopback.js'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { type Sendfile, SendfileError, loadSendfile } from '../src/index.js'

// Real files, real TCP sockets on loopback, the real addon: these tests fail if it was not built
// (`pnpm --filter @sluice/sendfile run build:addon` says why).

const temp = useTempDir('sendfile')
/** Larger than loopback's socket buffers can hold, so a paused reader forces EAGAIN and polls. */
const BIG = 32 * 1024 * 1024
let sendfile: Sendfile
let dir: string
let bigPath: string
let big: Buffer
let bigFd: number

beforeAll(() => {
  const load = loadSendfile()
  if (!load.available) throw new Error(`the sendfile addon is not available: ${load.reason}`)
  sendfile = load.sendfile
  dir = temp.makeSync()
  big = randomBytes(BIG)
  bigPath = join(dir, 'big')
  writeFileSync(bigPath, big)
  bigFd = openSync(bigPath, 'r')
})
afterAll(() => closeSync(bigFd))

const sockets: Socket[] = []
afterEach(() => {
  for (const s of sockets.splice(0)) s.destroy()
})

/** A loopback connection: `server` is the accepted side (we send on it), `client` the reader. */
function pair(): ReturnType<typeof loopbackPair> {
  return loopbackPair(sockets)
}

/** Reads exactly `n` bytes from `client`. */
function readExactly(client: Socket, n: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let got = 0
    const onData = (chunk: Buffer) => {
      chunks.push(chunk)
      got += chunk.length
      if (got >= n) {
        client.off('data', onData)
        resolve(Buffer.concat(chunks))
      }
    }
    client.on('data', onData)
    client.once('close', () => got < n && reject(new Error(`closed after ${got} of ${n} bytes`)))
  })
}

function openFds(): number {
  return readdirSync('/proc/self/fd').length
}

/** Settles `promise` into a value or the error's code, to assert on either. */
async function outcome(promise: Promise<unknown>): Promise<string> {
  try {
    await promise
    return 'sent'
  } catch (error) {
    return (error as { code?: string }).code ?? String(error)
  }
}

describe('FileSender', () => {
  it('sends random ranges of a file byte for byte, with sendfile(2)', async () => {
    const random = new SeededRandom(Number(process.env['SEED'] ?? 31))
    const rounds = process.env['SOAK'] === '1' ? 200 : 25
    const { server, client } = await pair()
    const sender = sendfile.open(server)
    try {
      for (let i = 0; i < rounds; i++) {
        const length = random.chance(0.2) ? random.int(1, 64) : random.int(1, 4 * 1024 * 1024)
        const position = random.int(0, BIG - length)
        const before = sendfile.stats()
        const received = readExactly(client, length)
        await sender.send(bigFd, position, length)
        expect((await received).equals(big.subarray(position, position + length)), `seed ${random.seed} round ${i}`).toBe(true)
        const after = sendfile.stats()
        expect(after.bytes - before.bytes).toBe(length)
        expect(after.calls).toBeGreaterThan(before.calls)
      }
    } finally {
      sender.close()
    }
    expect(sendfile.stats().openDescriptors).toBe(0)
  })

  it('sends a range held in the page cache from the event loop, and one that must come from the disk on the thread pool', async () => {
    const { server, client } = await pair()
    const sender = sendfile.open(server)
    const length = 3 * 1024 * 1024
    try {
      // Just written: every page of `big` is in the page cache.
      const before = sendfile.stats()
      const warm = readExactly(client, length)
      await sender.send(bigFd, 4096, length)
      expect((await warm).equals(big.subarray(4096, 4096 + length))).toBe(true)
      const afterWarm = sendfile.stats()
      expect(afterWarm.loopBursts).toBeGreaterThan(before.loopBursts)
      expect(afterWarm.poolBursts).toBe(before.poolBursts)

      // Written back to the disk, then dropped from the page cache (dd's nocache flag: posix_fadvise DONTNEED).
      const coldPath = join(dir, 'cold')
      const cold = randomBytes(length)
      writeFileSync(coldPath, cold)
      const evict = spawnSync('sh', ['-c', 'sync "$0" && dd if="$0" iflag=nocache count=0 status=none', coldPath])
      expect(evict.status, evict.stderr.toString()).toBe(0)
      const coldFd = openSync(coldPath, 'r')
      try {
        const received = readExactly(client, length)
        await sender.send(coldFd, 0, length)
        expect((await received).equals(cold)).toBe(true)
      } finally {
        closeSync(coldFd)
      }
      expect(sendfile.stats().poolBursts).toBeGreaterThan(afterWarm.poolBursts)
    } finally {
      sender.close()
    }
    expect(sendfile.stats().openDescriptors).toBe(0)
  })

  it('serves a slow reader through partial sends while another connection is served in full; remaining() follows the send', async () => {
    const fdsBefore = openFds()
    const slow = await pair()
    slow.client.pause()
    const slowSender = sendfile.open(slow.server)
    const callsBefore = sendfile.stats().calls
    let settled = false
    const slowSend = slowSender.send(bigFd, 0, BIG).finally(() => {
      settled = true
    })

    // The slow client reads nothing, so at most its socket buffers' worth has left: the rest waits on a poll,
    // holding no pool thread and not the loop. A second client gets a whole 8 MiB range meanwhile.
    const fast = await pair()
    const fastSender = sendfile.open(fast.server)
    const fastReceived = readExactly(fast.client, 8 * 1024 * 1024)
    await fastSender.send(bigFd, 1234, 8 * 1024 * 1024)
    expect((await fastReceived).equals(big.subarray(1234, 1234 + 8 * 1024 * 1024))).toBe(true)
    fastSender.close()
    expect(settled).toBe(false)
    // What is left of the slow send: all but what the socket buffers took.
    expect(slowSender.reportsProgress).toBe(true)
    const stalledAt = slowSender.remaining()
    expect(stalledAt).toBeGreaterThan(0)
    expect(stalledAt).toBeLessThan(BIG)

    // Now read the slow one in small sips: the body completes through many sendfile calls.
    const chunks: Buffer[] = []
    let got = 0
    slow.client.on('data', (chunk: Buffer) => {
      chunks.push(chunk)
      got += chunk.length
      slow.client.pause()
      setImmediate(() => slow.client.resume())
    })
    slow.client.resume()
    // It moves as the client reads, before the send is done.
    for (let seen = stalledAt; seen === stalledAt && !settled; ) {
      await new Promise((resolve) => setTimeout(resolve, 5))
      seen = slowSender.remaining()
      if (!settled) expect(seen).toBeLessThanOrEqual(stalledAt)
    }
    expect(settled || slowSender.remaining() < stalledAt).toBe(true)
    await slowSend
    expect(slowSender.remaining()).toBe(0)
    slowSender.close()
    while (got < BIG) await new Promise((resolve) => setImmediate(resolve))
    expect(Buffer.concat(chunks).equals(big)).toBe(true)
    expect(sendfile.stats().calls - callsBefore).toBeGreaterThan(2)
    expect(sendfile.stats().openDescriptors).toBe(0)

    for (const s of [slow.server, slow.client, fast.server, fast.client]) s.destroy()
    await Promise.all([slow.server, slow.client, fast.server, fast.client].map((s) => new Promise((resolve) => (s.closed ? resolve(undefined) : s.once('close', resolve)))))
    expect(openFds()).toBe(fdsBefore)
  })

  it('fails the send with EPIPE or ECONNRESET when the reader disconnects mid-body, and leaks no descriptor', async () => {
    const fdsBefore = openFds()
    const { server, client } = await pair()
    const sender = sendfile.open(server)
    // Read a little, then hang up while most of the range is still to go.
    const someRead = readExactly(client, 64 * 1024)
    const send = sender.send(bigFd, 0, BIG)
    await someRead
    client.destroy()
    expect(['EPIPE', 'ECONNRESET']).toContain(await outcome(send))
    sender.close()
    server.destroy()
    await new Promise((resolve) => (server.closed ? resolve(undefined) : server.once('close', resolve)))
    expect(sendfile.stats().openDescriptors).toBe(0)
    expect(openFds()).toBe(fdsBefore)
  })

  it('close() during a send waiting for a reader cancels it, closes the duplicate and lets the connection close', async () => {
    const fdsBefore = openFds()
    const { server, client } = await pair()
    client.pause()
    const sender = sendfile.open(server)
    const send = sender.send(bigFd, 0, BIG)
    expect(sendfile.stats().openDescriptors).toBe(1)
    sender.close()
    expect(await outcome(send)).toBe('ECANCELED')
    // Node's own descriptor closing is then enough for the peer to see the end: the duplicate is gone.
    const clientClosed = new Promise((resolve) => client.once('close', resolve))
    client.resume()
    server.destroy()
    await clientClosed
    await new Promise((resolve) => (server.closed ? resolve(undefined) : server.once('close', resolve)))
    expect(sendfile.stats().openDescriptors).toBe(0)
    expect(openFds()).toBe(fdsBefore)
  })

  it('reports ENODATA for a range past the end of the file', async () => {
    const { server, client } = await pair()
    const path = join(dir, 'short')
    writeFileSync(path, 'abc')
    const fd = openSync(path, 'r')
    const sender = sendfile.open(server)
    try {
      const received = readExactly(client, 2)
      const error = await sender.send(fd, 1, 10).catch((e: unknown) => e)
      expect(error).toBeInstanceOf(SendfileError)
      expect((error as SendfileError).code).toBe('ENODATA')
      expect((await received).toString()).toBe('bc')
    } finally {
      sender.close()
      closeSync(fd)
    }
  })

  it('refuses sockets whose bytes do not go straight to the kernel', async () => {
    const { server } = await pair()
    expect(sendfile.descriptorOf(server)).toBeTypeOf('number')
    const tls = new TLSSocket(server)
    expect(sendfile.descriptorOf(tls)).toBeUndefined()
    tls.destroy()
    await new Promise((resolve) => (server.closed ? resolve(undefined) : server.once('close', resolve)))
    expect(sendfile.descriptorOf(server)).toBeUndefined()
    expect(() => sendfile.open(server)).toThrow(SendfileError)
  })
})

describe('loadSendfile', () => {
  it('reports an addon that does not load instead of throwing', () => {
    const path = join(temp.makeSync(), 'missing.node')
    const load = loadSendfile(path)
    expect(load.available).toBe(false)
    if (!load.available) expect(load.reason).toContain('did not load')
    const garbage = join(temp.makeSync(), 'garbage.node')
    writeFileSync(garbage, 'not an ELF file')
    expect(loadSendfile(garbage).available).toBe(false)
  })
})
