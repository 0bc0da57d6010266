// Kept in one file past 500 lines: the connect / stream / reconnect loop and its
// flow control are one state machine; acknowledgement lives in standby-status.ts,
// one connection's state in replication-stream.ts, configuration in client-config.ts.
import { EventEmitter } from 'node:events'
import type pg from 'pg'
import { type BackoffPolicy, DEFAULT_BACKOFF, backoffDelay } from './backoff.js'
import type { ChangeSink } from './change-sink.js'
import { buildClientConfig, translateStreamError } from './client-config.js'
import { DEFAULT_PUBLICATION_NAME, DEFAULT_SLOT_NAME, validatePublicationName, validateSlotName } from './pg-names.js'
import type { PgoutputMessage } from './pgoutput-messages.js'
import type { DecodeFailure, ProtoVersion } from './pgoutput-plugin.js'
import type { RelationCache } from './relation-cache.js'
import { ReplicationError } from './replication-errors.js'
import { ReplicationStream as Stream, toError } from './replication-stream.js'
import { DEFAULT_LIVENESS_TIMEOUT_MS, DEFAULT_STATUS_INTERVAL_MS, StandbyStatus } from './standby-status.js'
import { TransactionAssembler } from './transaction-assembler.js'

export { DEFAULT_LIVENESS_TIMEOUT_MS, DEFAULT_STATUS_INTERVAL_MS } from './standby-status.js'

/** How long a stop waits for the sink's last call to finish before it goes on without it. */
const STOP_IDLE_WAIT_MS = 10_000

/** Waits for `promise`, or `ms` at most. */
async function settledWithin(promise: Promise<void>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined
  try {
    await Promise.race([promise, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))])
  } finally {
    clearTimeout(timer)
  }
}

/** A connection up this long resets the reconnect backoff even if no transaction came (an idle database). */
const STABLE_CONNECTION_MS = 30_000

export interface ReplicationClientOptions {
  /** Connection string or pg config; the role needs the REPLICATION attribute. */
  readonly connection: string | pg.ClientConfig
  readonly sink: ChangeSink
  /**
   * The storage engine's durable watermark: every transaction with commit LSN
   * at or below it is durable. It must eventually reach the commit LSN of every
   * delivered transaction, including those no shape kept (the router advances
   * the store for them), or an idle database cannot release WAL.
   */
  readonly durableLsn: () => bigint
  readonly slotName?: string
  readonly publicationNames?: readonly string[]
  readonly protoVersion?: ProtoVersion
  /** Deliver logical decoding messages to `sink.onLogicalMessage`. */
  readonly messages?: boolean
  /**
   * When nothing is in flight and everything received is durable, confirm the
   * server's WAL position from its keepalives (as Postgres's own subscriber
   * does), so an idle database does not accumulate WAL. Default true.
   */
  readonly advanceWhenIdle?: boolean
  /**
   * With `advanceWhenIdle`, where the idle position goes before it is
   * confirmed (a pipeline passes its store's `advance`). The client promises
   * `walEnd - 1` here (a commit may start exactly at the keepalive's WAL end)
   * and confirms `walEnd` only once `durableLsn()` has reached that: the slot
   * then never skips a commit the store's watermark does not cover, so a slot
   * ahead of the store at start means changes were really missed (see
   * Pipeline.start). Without it the idle position is confirmed at once.
   */
  readonly promiseIdle?: (lsn: bigint) => void
  /**
   * Called before a replay that `replayFromDurable` asked for, once the
   * previous connection's last delivery has settled: the sink drops whatever
   * it accepted above its durable watermark, which the replay delivers again.
   */
  readonly beforeReplay?: () => Promise<void>
  readonly statusIntervalMs?: number
  /** 0 disables the check. */
  readonly livenessTimeoutMs?: number
  readonly backoff?: BackoffPolicy
  /** Extra session settings for the walsender (e.g. logical_decoding_work_mem); display settings are always set. */
  readonly settings?: Readonly<Record<string, string>>
  readonly applicationName?: string
  readonly relations?: RelationCache
  readonly maxTransactionBytes?: number
  readonly streamBatchSize?: number
  /** Ports for tests. */
  readonly random?: () => number
  readonly now?: () => number
}

export interface ConnectedInfo {
  readonly serverVersionNum: number
  readonly protoVersion: ProtoVersion
  /** The slot's position when streaming started: Postgres resends everything committed after it. */
  readonly confirmedFlushLsn: bigint
}

export interface DisconnectedInfo {
  readonly reason: Error
  /** Delay before the next attempt; undefined when the client stops (stop() or a fatal error). */
  readonly retryInMs: number | undefined
}

export interface ReplicationClientEvents {
  connected: [ConnectedInfo]
  disconnected: [DisconnectedInfo]
  /** A fatal error: the client has stopped. Emitted only if someone listens; `stopped` carries it too. */
  error: [Error]
}

interface Gate {
  readonly promise: Promise<void>
  readonly open: () => void
}

/**
 * Streams a logical replication slot into a `ChangeSink`, on our
 * `WalConnection` (pg) with our pgoutput plugin.
 *
 * Acknowledgement, keepalives and liveness: `StandbyStatus` (we confirm the
 * durable watermark, never what was merely received).
 *
 * Flow: messages are handled as they arrive; while the handling of one is
 * pending (the sink awaits, or `pause()`) the socket is paused and later
 * messages wait in order (see `receive`), so a slow sink holds Postgres back
 * through TCP instead of filling memory.
 *
 * Reconnects: any error that a retry can fix (connection lost, Postgres
 * restarting, the slot busy, the sink failing) ends the connection, voids the
 * sink's partial streamed transactions, waits (capped exponential backoff with
 * jitter) and reconnects; streaming resumes from the slot's confirmed position
 * and transactions already delivered or durable are dropped, so the sink sees
 * each committed transaction once. Fatal errors (privileges, a missing slot or
 * publication, undecodable data) stop the client.
 */
/** Longest wait for Postgres to answer the CopyDone sent on stop (a busy machine can take seconds). */
const FINAL_STATUS_WAIT_MS = 10_000

export class ReplicationClient extends EventEmitter<ReplicationClientEvents> {
  readonly slotName: string
  readonly publicationNames: readonly string[]
  private readonly assembler: TransactionAssembler
  private readonly clientConfig: pg.ClientConfig
  private readonly status: StandbyStatus
  private readonly random: () => number
  private readonly now: () => number

  private stream: Stream | undefined
  private loop: Promise<void> | undefined
  private stopping = false
  private replayRequested = false
  private gate: Gate | undefined
  /** Each reason the stream is paused for, with when it paused for it. */
  private readonly pausedFor = new Map<string, number>()
  /** When the connection was last lost (or, before the first, when the client started); undefined while streaming. */
  private downSince: number | undefined
  private fatal: Error | undefined
  private wake: (() => void) | undefined
  private info: ConnectedInfo | undefined
  private firstConnect: { resolve: () => void; reject: (error: Error) => void } | undefined
  private readonly stoppedPromise: Promise<Error | undefined>
  private resolveStopped!: (reason: Error | undefined) => void

  constructor(private readonly options: ReplicationClientOptions) {
    super()
    this.slotName = validateSlotName(options.slotName ?? DEFAULT_SLOT_NAME)
    this.publicationNames = (options.publicationNames ?? [DEFAULT_PUBLICATION_NAME]).map(validatePublicationName)
    this.random = options.random ?? Math.random
    this.now = options.now ?? Date.now
    this.assembler = new TransactionAssembler(options.sink, {
      durableLsn: options.durableLsn,
      ...(options.relations === undefined ? {} : { relations: options.relations }),
      ...(options.maxTransactionBytes === undefined ? {} : { maxTransactionBytes: options.maxTransactionBytes }),
      ...(options.streamBatchSize === undefined ? {} : { streamBatchSize: options.streamBatchSize }),
    })
    this.status = new StandbyStatus({
      durableLsn: options.durableLsn,
      promiseIdle: options.promiseIdle,
      advanceWhenIdle: options.advanceWhenIdle ?? true,
      statusIntervalMs: options.statusIntervalMs ?? DEFAULT_STATUS_INTERVAL_MS,
      livenessTimeoutMs: options.livenessTimeoutMs ?? DEFAULT_LIVENESS_TIMEOUT_MS,
      now: this.now,
      assembler: this.assembler,
      paused: () => this.gate !== undefined,
    })
    this.clientConfig = buildClientConfig(options)
    this.stoppedPromise = new Promise((resolve) => {
      this.resolveStopped = resolve
    })
  }

  /** The relation cache of this stream. */
  get relations(): RelationCache {
    return this.assembler.relations
  }

  get connected(): boolean {
    return this.stream?.started === true && this.stream.failure === undefined
  }

  /** What the current (or last) connection reported when it started streaming. */
  get connection(): ConnectedInfo | undefined {
    return this.info
  }

  /** The highest LSN confirmed to Postgres. */
  get confirmedLsn(): bigint {
    return this.status.lastConfirmed
  }

  get paused(): boolean {
    return this.gate !== undefined
  }

  /**
   * Since when the client has had no streaming connection: set when one ends
   * (and at start, before the first), cleared when the next starts streaming.
   * A connection that ends having got nowhere (no transaction taken, up less
   * than 30 s) does not end the outage: the time runs from before it.
   */
  get disconnectedSince(): number | undefined {
    return this.downSince
  }

  /** The error that stopped the client for good; undefined while it runs or retries, and after `stop()`. */
  get fatalError(): Error | undefined {
    return this.fatal
  }

  /** Resolves when the client has stopped: with the fatal error, or undefined after `stop()`. */
  get stopped(): Promise<Error | undefined> {
    return this.stoppedPromise
  }

  /**
   * Starts streaming in the background. Resolves once the first connection
   * streams (transient failures before that are retried and reported as
   * 'disconnected'); rejects on a fatal error or `stop()` before that.
   */
  start(): Promise<void> {
    if (this.loop !== undefined) return Promise.reject(new ReplicationError('already_started'))
    const connected = new Promise<void>((resolve, reject) => {
      this.firstConnect = { resolve, reject }
    })
    this.loop = this.run()
    return connected
  }

  /**
   * Confirms `lsn` to Postgres now (capped at `durableLsn()`): typically called
   * from the store's onFlush. Returns whether a status update was sent.
   */
  acknowledge(lsn: bigint): boolean {
    const stream = this.stream
    if (stream === undefined || !stream.started || stream.failure !== undefined) return false
    return this.status.acknowledge(stream, lsn)
  }

  /**
   * Ends the current connection and, on the next one, delivers again every
   * transaction above the durable watermark, including those the sink already
   * accepted: for a sink whose storage rolled back accepted but unsynced data
   * (a failed flush). Idempotent until the reconnect.
   */
  replayFromDurable(reason: Error): void {
    // Forgotten only once this connection has ended: a transaction still in the sink could otherwise be marked delivered again.
    this.replayRequested = true
    const stream = this.stream
    if (stream !== undefined && stream.failure === undefined) stream.fail(reason)
  }

  /**
   * Stops taking messages (backpressure); Postgres is held back through TCP.
   * Each reason (the shapes' memory budget, the store's tail budget, an
   * operator) pauses on its own: the stream resumes once every reason that
   * paused it has resumed.
   */
  pause(reason = 'manual'): void {
    if (!this.pausedFor.has(reason)) this.pausedFor.set(reason, this.now())
    if (this.gate !== undefined) return
    let open!: () => void
    const promise = new Promise<void>((resolve) => {
      open = resolve
    })
    this.gate = { promise, open }
  }

  resume(reason = 'manual'): void {
    this.pausedFor.delete(reason)
    if (this.pausedFor.size === 0) this.openGate()
  }

  /** Why the stream is paused now (empty when it streams). */
  get pauseReasons(): readonly string[] {
    return [...this.pausedFor.keys()]
  }

  /** Each reason the stream is paused for now, with when it paused for it (ms since the epoch). */
  get pausedSince(): ReadonlyMap<string, number> {
    return this.pausedFor
  }

  private openGate(): void {
    const gate = this.gate
    this.gate = undefined
    gate?.open()
  }

  /**
   * Confirms the durable position, closes the connection and waits for the
   * background loop to end. Partially streamed transactions are aborted in the
   * sink with reason 'disconnected'.
   */
  async stop(): Promise<void> {
    if (this.loop === undefined) {
      this.stopping = true
      this.resolveStopped(undefined)
      return
    }
    if (!this.stopping) {
      this.stopping = true
      const stream = this.stream
      if (stream !== undefined && stream.started && stream.failure === undefined) await this.finalStatus(stream)
      stream?.fail(new ReplicationError('client_stopped'))
      // Whoever paused it, nothing is taken any more: let the loop see the end.
      this.pausedFor.clear()
      this.openGate()
      this.wake?.()
    }
    await this.loop
  }

  private async run(): Promise<void> {
    let attempt = 0
    let fatal: Error | undefined
    this.downSince = this.now()
    while (!this.stopping) {
      // A replay asked for (a failed flush), whether during the last connection or while waiting to reconnect:
      // the last connection's deliveries have settled and it is reset, so nothing delivered is still in the sink.
      if (this.replayRequested) {
        try {
          this.replayRequested = false
          // The sink goes back to its durable state first: what it accepted past it after the failure goes too.
          await this.options.beforeReplay?.()
          this.assembler.forgetDelivered()
        } catch (error) {
          fatal = toError(error)
          break
        }
        // stop() during the rollback found no connection to end and no sleep to wake: it is seen here.
        if (this.stopping) break
      }
      const reached = this.reachedLsn()
      const connectedAt = this.now()
      const downBefore: number | undefined = this.downSince
      const stream = new Stream(
        this.clientConfig,
        {
          publicationNames: this.publicationNames,
          ...(this.options.protoVersion === undefined ? {} : { protoVersion: this.options.protoVersion }),
          ...(this.options.messages === undefined ? {} : { messages: this.options.messages }),
        },
        this.now(),
      )
      this.stream = stream
      const reason = await this.runStream(stream)
      // Only a connection that got somewhere, or held for a while, ends the outage: one that fails at the
      // same transaction each time (a sink that throws on it) would otherwise have Postgres decode it again
      // every 250 ms, for ever, and health would see a connection up every few seconds and report none down.
      const progressed = stream.started && (this.reachedLsn() > reached || this.now() - connectedAt >= STABLE_CONNECTION_MS)
      this.downSince = progressed ? this.now() : (downBefore ?? this.now())
      this.stream = undefined
      stream.stopTimers()
      await stream.connection.close().catch(() => {})
      // What the sink was handed last (a large transaction read back from its buffer, say) finishes before
      // anything is delivered again: the next connection must not route beside it. On a stop too, for a
      // while: whoever stops us closes what the sink writes to next, which must not happen under a call.
      if (!this.stopping) await stream.whenIdle()
      else await settledWithin(stream.whenIdle(), STOP_IDLE_WAIT_MS)
      let resetFailure: Error | undefined
      try {
        await this.assembler.reset()
      } catch (error) {
        // A sink that cannot drop a partial transaction would see it twice after reconnecting: stop instead.
        resetFailure = toError(error)
      }
      if (progressed) attempt = 0
      if (this.stopping) {
        this.emitDisconnected(reason, undefined)
        break
      }
      if (resetFailure !== undefined || isFatal(reason)) {
        fatal = resetFailure ?? reason
        this.emitDisconnected(reason, undefined)
        break
      }
      const delay = backoffDelay(attempt++, this.options.backoff ?? DEFAULT_BACKOFF, this.random)
      this.emitDisconnected(reason, delay)
      await this.sleep(delay)
    }
    this.stopping = true
    this.fatal = fatal
    if (fatal !== undefined && this.listenerCount('error') > 0) this.emit('error', fatal)
    this.firstConnect?.reject(fatal ?? new ReplicationError('client_stopped'))
    this.firstConnect = undefined
    this.resolveStopped(fatal)
  }

  /** How far the sink got: the last transaction handed to it, or the durable position if later. */
  private reachedLsn(): bigint {
    const durable = this.options.durableLsn()
    const delivered = this.assembler.lastDeliveredLsn
    return delivered > durable ? delivered : durable
  }

  /** Streams until the connection ends; returns why it ended. */
  private async runStream(stream: Stream): Promise<Error> {
    const { connection, plugin } = stream
    try {
      await connection.connect({
        started: () => this.onStart(stream),
        data: (chunk, start, end) => this.receive(stream, plugin.parse(chunk, start, end)),
        keepalive: (walEnd, replyRequested) => this.status.onKeepalive(stream, walEnd, replyRequested),
      })
      // Resolves when the stream ends.
      await plugin.start(connection, this.slotName)
    } catch (error) {
      stream.fail(error)
    }
    return translateStreamError(stream.failure ?? new ReplicationError('connection_lost', 'Postgres ended the replication stream'), this.clientConfig, this.publicationNames, this.slotName)
  }

  private onStart(stream: Stream): void {
    const setup = stream.plugin.setup
    stream.started = true
    stream.lastHeardAt = this.now()
    this.downSince = undefined
    if (setup !== undefined) {
      this.info = { serverVersionNum: setup.serverVersionNum, protoVersion: setup.protoVersion, confirmedFlushLsn: setup.confirmedFlushLsn }
    }
    this.status.startAt(stream, setup?.confirmedFlushLsn)
    if (this.info !== undefined) this.emit('connected', this.info)
    this.firstConnect?.resolve()
    this.firstConnect = undefined
  }

  /**
   * Our own flow control. Most messages are handled synchronously; when one is
   * not (the sink awaits storage or memory, or `pause()` holds the gate), the
   * socket is paused and the messages its last chunk still yields wait in the
   * backlog, handled in order once the pending one settles: no promise per
   * message on the synchronous path.
   */
  private receive(stream: Stream, message: PgoutputMessage | DecodeFailure): void {
    // Stopping: what still arrives is read (see finalStatus) and dropped; replay after a restart delivers it.
    if (stream.closing) return
    if (stream.busy) {
      stream.backlog.push(message)
      return
    }
    const pending = this.onData(stream, message)
    if (pending === undefined) return
    stream.busy = true
    stream.connection.pause()
    this.drainAfter(stream, pending)
  }

  private drainAfter(stream: Stream, pending: Promise<void>): void {
    pending.then(
      () => this.drainBacklog(stream),
      (error: unknown) => {
        stream.fail(error)
        this.drainBacklog(stream)
      },
    )
  }

  private drainBacklog(stream: Stream): void {
    const { backlog } = stream
    while (stream.backlogAt < backlog.length && !stream.closing) {
      const message = backlog[stream.backlogAt]!
      stream.backlogAt++
      const pending = this.onData(stream, message)
      if (pending !== undefined) {
        this.drainAfter(stream, pending)
        return
      }
    }
    backlog.length = 0
    stream.backlogAt = 0
    stream.markIdle()
    if (stream.failure === undefined && !stream.closing) stream.connection.resume()
  }

  private onData(stream: Stream, message: PgoutputMessage | DecodeFailure): void | Promise<void> {
    if (stream.failure !== undefined) return undefined
    stream.lastHeardAt = this.now()
    if (message.tag === 'decode-failure') {
      stream.fail(message.error)
      return undefined
    }
    const gate = this.gate
    if (gate !== undefined) return this.handleAfter(gate.promise, stream, message)
    return this.handle(stream, message)
  }

  /*
   * The closures of the asynchronous paths live in functions of their own:
   * a closure anywhere in `onData` or `handle` would make every message
   * allocate a context for the variables it captures, taken or not.
   */

  private handleAfter(gate: Promise<void>, stream: Stream, message: PgoutputMessage): Promise<void> {
    return gate.then(() => this.handle(stream, message))
  }

  private handle(stream: Stream, message: PgoutputMessage): void | Promise<void> {
    if (stream.failure !== undefined) return undefined
    try {
      const result = this.assembler.push(message)
      if (result === undefined) {
        stream.processed++
        return undefined
      }
      return settled(result, stream)
    } catch (error) {
      stream.fail(error)
      return undefined
    }
  }

  /**
   * The last status before closing, and Postgres's word that it read it. The
   * status is followed by CopyDone; the walsender reads its socket in order, so
   * by the time it answers with its own CopyDone it has applied our status.
   * (Waiting for a keepalive instead was racy: one already in flight could
   * arrive first.) What still arrives is read and dropped (`closing`; see
   * `WalConnection.endStream` for why it must be read). A Postgres that never
   * answers is given up on after FINAL_STATUS_WAIT_MS.
   */
  private async finalStatus(stream: Stream): Promise<void> {
    stream.closing = true
    this.status.sendFinal(stream)
    await stream.connection.endStream(FINAL_STATUS_WAIT_MS)
  }

  private emitDisconnected(reason: Error, retryInMs: number | undefined): void {
    this.emit('disconnected', { reason, retryInMs })
  }

  /** Waits `ms`, or less if `stop()` wakes us. */
  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer)
        this.wake = undefined
        resolve()
      }
      const timer = setTimeout(done, ms)
      this.wake = done
    })
  }
}

function isFatal(error: Error): boolean {
  return error instanceof ReplicationError && error.fatal
}

/** Counts the message once the sink's promise for it settles, or fails the stream. */
function settled(result: Promise<void>, stream: Stream): Promise<void> {
  return result.then(
    () => {
      stream.processed++
    },
    (error: unknown) => stream.fail(error),
  )
}
