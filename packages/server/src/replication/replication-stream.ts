import type pg from 'pg'
import type { PgoutputMessage } from './pgoutput-messages.js'
import { type DecodeFailure, SluicePgoutputPlugin } from './pgoutput-plugin.js'
import { WalConnection } from './wal-connection.js'

/**
 * One replication connection of a `ReplicationClient`: the connection, its
 * plugin and what the client tracks about it. A reconnect makes a new one.
 */
export class ReplicationStream {
  readonly connection: WalConnection
  readonly plugin: SluicePgoutputPlugin
  processed = 0
  started = false
  failure: Error | undefined
  lastHeardAt: number
  /** When the status timer last ran: silence is judged up to there (see StandbyStatus.onStatusTimer). */
  lastTickAt: number
  /** The server's WAL position from its latest keepalive. */
  walEnd = 0n
  lastStatusAt = 0
  statusTimer: NodeJS.Timeout | undefined
  replyTimer: NodeJS.Timeout | undefined
  /** Stopping: the final status is sent; incoming messages are dropped. */
  closing = false
  /** A message's handling is pending; later messages wait in `backlog`, in order. */
  busy = false
  private idleWaiters: Array<() => void> = []
  readonly backlog: Array<PgoutputMessage | DecodeFailure> = []
  backlogAt = 0

  constructor(config: pg.ClientConfig, options: ConstructorParameters<typeof SluicePgoutputPlugin>[0], now: number) {
    this.connection = new WalConnection(config, (error) => this.fail(error))
    this.plugin = new SluicePgoutputPlugin(options)
    this.lastHeardAt = now
    this.lastTickAt = now
  }

  /** Resolves once no message's handling is pending (at once if none is): what the sink was given has settled. */
  whenIdle(): Promise<void> {
    if (!this.busy) return Promise.resolve()
    return new Promise((resolve) => this.idleWaiters.push(resolve))
  }

  /** The pending handling settled and the backlog is worked through. */
  markIdle(): void {
    this.busy = false
    const waiters = this.idleWaiters
    this.idleWaiters = []
    for (const resolve of waiters) resolve()
  }

  /** Every received message has been handled (nothing queued in our backlog or in the sink). */
  get drained(): boolean {
    return this.plugin.received === this.processed
  }

  fail(error: unknown): void {
    this.failure ??= toError(error)
    this.stopTimers()
    void this.connection.close().catch(() => {})
  }

  stopTimers(): void {
    clearInterval(this.statusTimer)
    clearTimeout(this.replyTimer)
  }
}

export function toError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error))
}
