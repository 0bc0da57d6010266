import type { ReplicationStream } from './replication-stream.js'
import { ReplicationError } from './replication-errors.js'

/**
 * Status updates (with a reply request) are sent this often. Well under
 * Postgres's default wal_sender_timeout (60 s) so the walsender never
 * considers us gone, and often enough that the slot follows the durable
 * watermark closely.
 */
export const DEFAULT_STATUS_INTERVAL_MS = 10_000

/**
 * Silence from the server for this long (while we are not busy or paused)
 * means the connection is dead even if TCP has not noticed: every status
 * update asks for a reply, so a live server always says something. Noticed
 * at the status tick after the one it is reached by, so up to one interval later.
 */
export const DEFAULT_LIVENESS_TIMEOUT_MS = 45_000

/**
 * Replies to reply requests that carry no news are spaced at least this far
 * apart. A walsender shutting down asks again as soon as we answer, until we
 * confirm its last position; without a floor that is a tight ping-pong for as
 * long as the durable watermark lags.
 */
const MIN_IDLE_REPLY_INTERVAL_MS = 50

export interface StandbyStatusOptions {
  /** See ReplicationClientOptions.durableLsn. */
  readonly durableLsn: () => bigint
  /** See ReplicationClientOptions.promiseIdle. */
  readonly promiseIdle: ((lsn: bigint) => void) | undefined
  readonly advanceWhenIdle: boolean
  readonly statusIntervalMs: number
  /** 0 disables the check. */
  readonly livenessTimeoutMs: number
  readonly now: () => number
  /** Whether the assembler has a transaction in flight, and the highest commit LSN it has seen. */
  readonly assembler: { readonly busy: boolean; readonly lastCommitLsn: bigint }
  /** Whether the client holds the stream (paused): it is not reading the socket then. */
  readonly paused: () => boolean
}

/**
 * What we tell the walsender, and when: standby status updates (the position
 * Postgres may release WAL up to), answers to its keepalives, the periodic
 * status that doubles as a liveness check, and the last status before closing.
 *
 * We confirm `durableLsn()` on keepalives, every status interval and on
 * `acknowledge`, never more, never less than already confirmed; the only
 * exception is the idle case (`ackPosition`). Never what was merely received:
 * that loses data on a crash.
 */
export class StandbyStatus {
  private confirmed = 0n

  constructor(private readonly options: StandbyStatusOptions) {}

  /** The highest LSN confirmed to Postgres. */
  get lastConfirmed(): bigint {
    return this.confirmed
  }

  /** The stream started at the slot's position: never confirm below it (on some Postgres versions that moves it backwards). */
  startAt(stream: ReplicationStream, slotPosition: bigint | undefined): void {
    if (slotPosition !== undefined && slotPosition > this.confirmed) this.confirmed = slotPosition
    stream.lastTickAt = this.options.now()
    stream.statusTimer = setInterval(() => this.onStatusTimer(stream), this.options.statusIntervalMs)
    stream.statusTimer.unref()
    const ack = this.ackPosition(stream)
    if (ack > this.confirmed) this.send(stream, ack, false)
  }

  /** Confirms `lsn` now (capped at `durableLsn()`); whether a status update was sent. */
  acknowledge(stream: ReplicationStream, lsn: bigint): boolean {
    const durable = this.options.durableLsn()
    const target = this.ackPosition(stream, lsn < durable ? lsn : durable)
    if (target <= this.confirmed) return false
    this.send(stream, target, false)
    return true
  }

  /** The status sent before closing (see ReplicationClient's finalStatus). */
  sendFinal(stream: ReplicationStream): void {
    this.send(stream, this.ackPosition(stream), false)
  }

  onKeepalive(stream: ReplicationStream, end: bigint, shouldRespond: boolean): void {
    if (stream.failure !== undefined || !stream.started || stream.closing) return
    const { now, promiseIdle, durableLsn } = this.options
    stream.lastHeardAt = now()
    if (end > stream.walEnd) stream.walEnd = end
    if (promiseIdle !== undefined && this.isIdle(stream) && stream.walEnd - 1n > durableLsn()) promiseIdle(stream.walEnd - 1n)
    const ack = this.ackPosition(stream)
    if (ack > this.confirmed) {
      this.send(stream, ack, false)
      return
    }
    // Nothing new to confirm: answer only when asked (the walsender also pings
    // unasked whenever our position trails its own), and not in a tight loop.
    if (!shouldRespond || stream.replyTimer !== undefined) return
    const wait = stream.lastStatusAt + MIN_IDLE_REPLY_INTERVAL_MS - now()
    if (wait <= 0) {
      this.send(stream, ack, false)
      return
    }
    stream.replyTimer = setTimeout(() => {
      stream.replyTimer = undefined
      if (stream.failure === undefined) this.send(stream, this.ackPosition(stream), false)
    }, wait)
  }

  private onStatusTimer(stream: ReplicationStream): void {
    if (stream.failure !== undefined) return
    const { livenessTimeoutMs, now, paused } = this.options
    // Silence counts up to the previous tick, not to now: the socket has been read since that tick, but
    // not necessarily since it ended. A loop blocked for a long stretch runs this timer before it reads
    // the socket, where Postgres's answers may be waiting; the next tick judges them.
    const quiet = stream.lastTickAt - stream.lastHeardAt
    stream.lastTickAt = now()
    // Busy or paused, we are not reading the socket, so silence proves nothing.
    if (livenessTimeoutMs > 0 && !paused() && stream.drained && quiet > livenessTimeoutMs) {
      stream.fail(new ReplicationError('connection_lost', `No message from Postgres for ${quiet} ms`))
      return
    }
    this.send(stream, this.ackPosition(stream), true)
  }

  /**
   * The position to confirm: the durable watermark (or `cap`, lower), or, when
   * idle, the server's WAL end from its latest keepalive. Idle means every
   * received message is handled, no transaction is open or partially
   * streamed, and every commit seen is durable; then every transaction
   * committed below that WAL end reached us before the keepalive did and is
   * durable, and any later one commits above it. Postgres's own apply worker
   * uses the same rule (with no pending transactions it reports the last
   * received position as flushed). With `promiseIdle`, only once the durable
   * watermark covers every commit below that WAL end. Never below what was
   * confirmed already.
   */
  private ackPosition(stream: ReplicationStream, cap?: bigint): bigint {
    const durable = this.options.durableLsn()
    let target = cap ?? durable
    if (
      stream.walEnd > target &&
      this.isIdle(stream) &&
      (this.options.promiseIdle === undefined || durable >= stream.walEnd - 1n)
    ) {
      target = stream.walEnd
    }
    return target > this.confirmed ? target : this.confirmed
  }

  /** Everything received is handled and durable, and no transaction is open (see ackPosition). */
  private isIdle(stream: ReplicationStream): boolean {
    const { advanceWhenIdle, paused, assembler, durableLsn } = this.options
    return advanceWhenIdle && stream.drained && !paused() && !assembler.busy && durableLsn() >= assembler.lastCommitLsn
  }

  private send(stream: ReplicationStream, lsn: bigint, requestReply: boolean): void {
    if (lsn <= 0n) return
    try {
      if (!stream.connection.sendStatus(lsn, requestReply)) return
    } catch (error) {
      stream.fail(error)
      return
    }
    stream.lastStatusAt = this.options.now()
    if (lsn > this.confirmed) this.confirmed = lsn
  }
}
