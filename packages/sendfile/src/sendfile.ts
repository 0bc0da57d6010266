import type { Socket } from 'node:net'
import { getSystemErrorName } from 'node:util'
import type { NativeAddon, NativeSender, SendfileStats } from './native.js'
import { SocketParking } from './parking.js'

/** An error of a send: `code` is the errno name (`EPIPE`, `ECONNRESET`...), or `ECANCELED` after `close()`. */
export class SendfileError extends Error {
  override readonly name = 'SendfileError'
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message)
  }
}

/** The loaded addon (see `loadSendfile`). */
export class Sendfile {
  constructor(private readonly native: NativeAddon) {}

  /**
   * The descriptor sendfile(2) can write to, or undefined when the socket's
   * bytes do not go straight to the kernel: TLS (encryption happens in
   * user space), a socket with no handle yet or already closed, a pipe.
   */
  descriptorOf(socket: Socket): number | undefined {
    if ((socket as Socket & { encrypted?: boolean }).encrypted === true) return undefined
    if (socket.destroyed) return undefined
    // Node keeps the descriptor on its internal handle; there is no public accessor.
    const fd = (socket as Socket & { _handle?: { fd?: unknown } | null })._handle?.fd
    return typeof fd === 'number' && fd >= 0 ? fd : undefined
  }

  /**
   * A sender for one response on `socket`. The caller must have flushed all of
   * Node's pending writes on it (`socket.writableLength === 0`) and must let
   * nothing else write to it until each `send` has settled; then `close()` it.
   */
  open(socket: Socket): FileSender {
    const fd = this.descriptorOf(socket)
    if (fd === undefined) throw new SendfileError('EBADF', 'the socket has no descriptor sendfile can write to')
    return new FileSender(new this.native.Sender(fd))
  }

  /**
   * Parked connections (`SocketParking`), or undefined with an addon built
   * before they existed. `onGone(id)`: a parked client left.
   */
  parking(onGone: (id: number) => void): SocketParking | undefined {
    const Parking = this.native.Parking
    return typeof Parking === 'function' ? new SocketParking(Parking, onGone) : undefined
  }

  /** Process-wide counters: calls, bytes, and descriptors open (for leak checks). */
  stats(): SendfileStats {
    return this.native.stats()
  }

  /**
   * Gives the C heap's free pages back to the kernel (glibc's malloc_trim):
   * true when any were. Not sendfile, but the same addon is the one native
   * module the server loads.
   */
  trimHeap(): boolean {
    // An addon built before trimHeap existed (a checkout whose install did not rebuild it) has none.
    return typeof this.native.trimHeap === 'function' ? this.native.trimHeap() : false
  }

  /**
   * Caps glibc's malloc arenas at `n` (mallopt M_ARENA_MAX): threads past it
   * share the existing ones, so fewer heaps each keep pages resident. Threads
   * that already have an arena keep it: call it at start-up. False on other C
   * libraries or with an addon built before it existed.
   */
  limitArenas(n: number): boolean {
    return typeof this.native.limitArenas === 'function' ? this.native.limitArenas(n) : false
  }

  /**
   * Tells V8 the process should give memory back (its memory pressure
   * notification): moderate starts an incremental collection that shrinks the
   * heap, critical collects at once (a pause). For a heap that turned to
   * garbage while the process went idle, which V8 would otherwise keep. False
   * with an addon built before it existed.
   */
  memoryPressure(critical = false): boolean {
    return typeof this.native.memoryPressure === 'function' ? this.native.memoryPressure(critical) : false
  }

  /**
   * V8's low memory notification: full, compacting collections until one
   * frees nothing more (two to seven), after its compilation cache is cleared.
   * For a heap known to be mostly garbage; the pause is a few times that of
   * marking what is live. False with an addon built before it existed.
   */
  lowMemory(): boolean {
    return typeof this.native.lowMemory === 'function' ? this.native.lowMemory() : false
  }

  /**
   * Takes an exclusive flock(2) on an open file without waiting: true if
   * taken, false if another open file holds it; throws on any other failure.
   * The kernel releases it when the descriptor closes (its holder's exit
   * included). Undefined with an addon built before it existed.
   */
  get lockFile(): ((fd: number) => boolean) | undefined {
    const native = this.native
    return typeof native.lockFile === 'function' ? (fd) => native.lockFile!(fd, true) : undefined
  }

  /**
   * Stats `names` in each of `dirs` (relative to `base`) in one call, on the
   * libuv thread pool: each file's size at `out[2 * (d * names.length + n)]`
   * and its inode just after; size -1 (and the errno in the inode's slot) for
   * a file that cannot be stat'ed. Rejects when `base` cannot be opened.
   * Lookups are relative to one open descriptor of `base`, and no JS object
   * is made per file; `out` must not be touched until it resolves. Undefined
   * with an addon built before it existed.
   */
  get statFiles(): ((base: string, dirs: readonly string[], names: readonly string[], out: Float64Array) => Promise<void>) | undefined {
    const native = this.native
    if (typeof native.statFiles !== 'function') return undefined
    // Joined, the directories cross into the addon as one string, not one conversion each on the event loop.
    const joined = native.statFilesJoined === true
    return (base, dirs, names, out) =>
      new Promise<void>((resolve, reject) =>
        native.statFiles!(base, joined && dirs.length > 0 ? `${dirs.join('\0')}\0` : dirs, names, out, (error) => (error === null ? resolve() : reject(error))),
      )
  }
}

/**
 * Sends file ranges to one socket, one at a time. Holds a duplicate of the
 * socket's descriptor from `open` to `close`, which keeps the connection open
 * even after Node closes its own: always close it (`finally`).
 */
export class FileSender {
  private pending: ((error: SendfileError | undefined) => void) | undefined
  private closed = false

  constructor(private readonly native: NativeSender) {}

  /** Resolves once `length` bytes of `fd` from `position` are in the socket's kernel buffer. */
  send(fd: number, position: number, length: number): Promise<void> {
    if (this.closed) return Promise.reject(new SendfileError('ECANCELED', 'the sender is closed'))
    if (this.pending !== undefined) return Promise.reject(new Error('a send is already in progress'))
    if (length === 0) return Promise.resolve()
    return new Promise((resolve, reject) => {
      this.pending = (error) => (error === undefined ? resolve() : reject(error))
      this.native.send(fd, position, length, (errno) => {
        const settle = this.pending
        this.pending = undefined
        settle?.(errno === 0 ? undefined : systemError(errno))
      })
    })
  }

  /** Whether `remaining` follows a send as it goes (an addon built before it did not). */
  get reportsProgress(): boolean {
    return typeof this.native.remaining === 'function'
  }

  /** Bytes of the send in progress not yet in the socket's kernel buffer (0 when none is, or without `reportsProgress`). */
  remaining(): number {
    return this.closed || this.native.remaining === undefined ? 0 : this.native.remaining()
  }

  /** Closes the duplicate descriptor; a send in progress rejects with `ECANCELED`. Idempotent. */
  close(): void {
    if (this.closed) return
    this.closed = true
    this.native.close()
    const settle = this.pending
    this.pending = undefined
    settle?.(new SendfileError('ECANCELED', 'the sender was closed during a send'))
  }
}

function systemError(errno: number): SendfileError {
  if (errno === ENODATA) return new SendfileError('ENODATA', 'sendfile: the file ended before the range did')
  let name: string
  try {
    name = getSystemErrorName(-errno)
  } catch {
    name = `E${errno}`
  }
  return new SendfileError(name, `sendfile: ${name}`)
}

/** Linux's ENODATA: the addon's answer when the file is shorter than the range. */
const ENODATA = 61
