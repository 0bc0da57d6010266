import { Socket } from 'node:net'
import { getSystemErrorName } from 'node:util'
import type { NativeParking } from './native.js'

/** How an answer ended: 0 when every byte was written, else the errno's name (`EPIPE`, `ECONNRESET`...). */
export type AnswerOutcome = { readonly ok: true; readonly socket: Socket | undefined } | { readonly ok: false; readonly code: string }

/**
 * Connections parked outside Node's HTTP objects while their request waits
 * (native/parked-sockets.cc). `park` takes the connection from its socket and
 * destroys the socket: what is left is a descriptor and a poll registration,
 * a few hundred bytes, where a Node socket with node:http's request, response
 * and parser is several KiB. `answer` writes the response's bytes and hands
 * the connection back as a new Node socket, for the caller to give to its
 * HTTP server (`server.emit('connection', socket)`) so the client's next
 * request is read as on any connection.
 *
 * Only a socket whose bytes go straight to the kernel can be parked: not TLS,
 * not one with unwritten bytes, not one Node has read past its request on (a
 * pipelined request would be lost): the caller checks the last.
 */
export class SocketParking {
  private readonly native: NativeParking

  /** `onGone(id)`: a parked connection's client left; it is closed already, and its id means nothing any more. */
  constructor(Parking: new (onGone: (id: number) => void) => NativeParking, onGone: (id: number) => void) {
    this.native = new Parking((id) => reportThrows(() => onGone(id)))
  }

  /** Connections parked or being answered now. */
  get size(): number {
    return this.native.size
  }

  /**
   * Takes the connection from `socket`, which is destroyed (its 'close' is
   * emitted): the id to answer it by, or undefined when it cannot be parked
   * (the socket is then left as it was).
   */
  park(socket: Socket): number | undefined {
    if ((socket as Socket & { encrypted?: boolean }).encrypted === true) return undefined
    if (socket.destroyed || socket.writableLength > 0 || socket.readableLength > 0) return undefined
    // Node keeps the descriptor on its internal handle; there is no public accessor.
    const fd = (socket as Socket & { _handle?: { fd?: unknown } | null })._handle?.fd
    if (typeof fd !== 'number' || fd < 0) return undefined
    let id: number
    try {
      id = this.native.park(fd)
    } catch {
      return undefined
    }
    // Node's descriptor closes; the parked duplicate keeps the connection open.
    socket.destroy()
    return id
  }

  /**
   * Writes `head` then `body` to the parked connection `id`, then hands it
   * back as a socket (`keepOpen`) or closes it. False when `id` is not parked
   * (its client left: `onGone` said so), and `done` is not called.
   */
  answer(id: number, head: Buffer, body: Buffer | undefined, keepOpen: boolean, done: (outcome: AnswerOutcome) => void): boolean {
    return this.native.answer(id, head, body ?? null, keepOpen, (errno, fd) =>
      reportThrows(() => done(errno !== 0 ? { ok: false, code: errnoName(errno) } : { ok: true, socket: fd >= 0 ? adopt(fd) : undefined })),
    )
  }

  /** Bytes of the answer to `id` already in the socket (what its client has taken, and the kernel holds); -1 when `id` is not parked. */
  written(id: number): number {
    return this.native.written?.(id) ?? -1
  }

  /** Closes the parked connection `id` unanswered, an answer under way too (its `done` is not called). */
  drop(id: number): void {
    this.native.drop(id)
  }
}

/**
 * Runs a callback the addon calls: what it throws becomes an uncaught
 * exception, as a throw from any event callback does, instead of an exception
 * left pending in the addon (built without C++ exceptions), which the next
 * call into it would meet instead.
 */
function reportThrows(run: () => void): void {
  try {
    run()
  } catch (error) {
    process.nextTick(() => {
      throw error
    })
  }
}

function adopt(fd: number): Socket {
  return new Socket({ fd, readable: true, writable: true })
}

function errnoName(errno: number): string {
  try {
    return getSystemErrorName(-Math.abs(errno))
  } catch {
    return `errno ${errno}`
  }
}
