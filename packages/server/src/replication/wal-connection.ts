import pg from 'pg'
import { CopyDataFramer } from './copy-data-framer.js'
import { ReplicationError } from './replication-errors.js'

/** Called synchronously from the socket's data handler, in stream order. */
export interface WalHandlers {
  /** CopyBoth started: the server streams from here on. */
  started(): void
  /**
   * An XLogData message: its payload (a pgoutput message) is `chunk` from
   * `start` to `end`, valid only during the call. Not a view of its own: that
   * was an object per message.
   */
  data(chunk: Buffer, start: number, end: number): void
  /** A primary keepalive: the server's WAL end, and whether it asks for a status now. */
  keepalive(walEnd: bigint, replyRequested: boolean): void
}

/** The parts of pg's Connection (its protocol layer, under `Client`) that streaming uses. */
interface PgConnection {
  readonly stream: {
    pause(): void
    resume(): void
    listeners(event: 'data'): Array<(chunk: Buffer) => void>
    removeListener(event: 'data', listener: (chunk: Buffer) => void): void
    on(event: 'data', listener: (chunk: Buffer) => void): void
  }
  removeAllListeners(event: 'copyData'): void
  on(event: 'replicationStart' | 'copyDone' | 'end', listener: () => void): void
  once(event: 'copyDone' | 'end', listener: () => void): void
  removeListener(event: string, listener: (...args: never[]) => void): void
  sendCopyFromChunk(chunk: Buffer): void
  endCopyFrom(): void
}

const XLOG_DATA = 0x77 // 'w'
const KEEPALIVE = 0x6b // 'k'
const STATUS = 0x72 // 'r'
/** 'w', WAL start, WAL end, send time: the payload follows. */
const XLOG_HEADER_BYTES = 25
/** 'k', WAL end, send time, reply flag. */
const KEEPALIVE_BYTES = 18
/** Postgres timestamps count microseconds from 2000-01-01. */
const PG_EPOCH_MS = Date.UTC(2000, 0, 1)
/** How long a close waits for the server to end the connection before it drops the socket. */
const CLOSE_WAIT_MS = 5_000

/**
 * One replication connection (`replication=database`) on `pg`: the walsender
 * runs the caller's SQL (slot checks, `START_REPLICATION`) through `query`,
 * and once it switches to CopyBoth each copy message is decoded here and
 * handed to `WalHandlers` as it arrives.
 *
 * Why not pg-logical-replication's `LogicalReplicationService` (which we used
 * before): it keeps the connection private, so pausing the socket
 * (backpressure) and ending the COPY cleanly (the last status) reached into its
 * private fields, where a renamed field would silently disable backpressure;
 * it only warns about a copy message it does not know; and per message it made
 * an LSN string, an emit through its own emitter and a promise, none of which
 * the pipeline used (a few percent of the pipeline's CPU at 100k shapes).
 * What this uses of pg beyond its public API: its Connection's events and
 * copy writes, as that package did, and its socket, where a CopyDataFramer
 * takes the place of pg's parser and passes on what is not CopyData (pinned
 * versions, see package.json).
 */
export class WalConnection {
  private readonly client: pg.Client
  private connection: PgConnection | undefined
  private handlers: WalHandlers | undefined
  private streaming = false
  private ended = false
  private closing: Promise<void> | undefined
  /** Rejects a `connect()` under way: pg's own never settles when the client is ended while it connects. */
  private abandonConnect: ((error: Error) => void) | undefined

  /** `onError`: the connection failed (pg's 'error' event, or a copy message this does not know). */
  constructor(
    config: pg.ClientConfig,
    private readonly onError: (error: Error) => void,
  ) {
    this.client = new pg.Client({ ...config, replication: 'database' } as pg.ClientConfig)
    this.client.on('error', (error: Error) => this.onError(error))
  }

  /** Connects; copy messages go to `handlers` once a `START_REPLICATION` query switches to CopyBoth. */
  async connect(handlers: WalHandlers): Promise<void> {
    this.handlers = handlers
    if (this.closing !== undefined) throw new ReplicationError('client_stopped', 'the connection was closed before it was opened')
    await new Promise<void>((resolve, reject) => {
      this.abandonConnect = reject
      this.client.connect().then(() => resolve(), reject)
    }).finally(() => {
      this.abandonConnect = undefined
    })
    const connection = (this.client as unknown as { connection: PgConnection }).connection
    this.connection = connection
    connection.on('replicationStart', () => {
      this.streaming = true
      handlers.started()
    })
    // Copy messages never reach pg: the framer below takes them off the
    // socket (each one there was a message object, a Buffer view and an
    // event). pg's Client would hand them to the active query, which
    // START_REPLICATION's ignores; its listener goes too, so a stray one
    // could not reach it.
    connection.removeAllListeners('copyData')
    connection.on('end', () => {
      this.ended = true
    })
    this.frameCopyData(connection)
  }

  /**
   * Puts a CopyDataFramer between the socket and pg's parser. Done once
   * connected: startup is over (an SSL reply is a single unframed byte), and
   * after ReadyForQuery the server sends nothing until asked, so pg's parser
   * holds no partial message to lose.
   */
  private frameCopyData(connection: PgConnection): void {
    const socket = connection.stream
    const readers = socket.listeners('data')
    if (readers.length !== 1) {
      throw new ReplicationError('protocol_violation', `pg's connection has ${readers.length} socket readers, expected its parser alone (an unsupported pg version?)`)
    }
    const parser = readers[0]!
    socket.removeListener('data', parser)
    const framer = new CopyDataFramer({
      copyData: (buf, start, end) => this.receive(buf, start, end),
      other: (bytes) => parser(bytes),
    })
    socket.on('data', (chunk) => framer.push(chunk))
  }

  /**
   * A query on the walsender. `START_REPLICATION` resolves only when the
   * stream ends (the server or `endStream` ended the COPY) and rejects when it
   * fails.
   */
  query(text: string): Promise<pg.QueryResult<Record<string, unknown>>> {
    return this.client.query(text)
  }

  private receive(buf: Buffer, start: number, end: number): void {
    const length = end - start
    const kind = length > 0 ? buf[start] : undefined
    if (kind === XLOG_DATA && length >= XLOG_HEADER_BYTES) {
      this.handlers!.data(buf, start + XLOG_HEADER_BYTES, end)
      return
    }
    if (kind === KEEPALIVE && length >= KEEPALIVE_BYTES) {
      this.handlers!.keepalive(buf.readBigUInt64BE(start + 1), buf[start + 17] !== 0)
      return
    }
    this.onError(new ReplicationError('protocol_violation', `the walsender sent a copy message Sluice does not know (type ${kind ?? 'none'}, ${length} bytes)`))
  }

  /**
   * Sends a standby status update: `lsn` written, flushed and applied (the
   * slot's confirmed position moves to it). Only while streaming; false
   * otherwise.
   */
  sendStatus(lsn: bigint, requestReply: boolean): boolean {
    const connection = this.connection
    if (connection === undefined || !this.streaming || this.ended) return false
    const message = Buffer.allocUnsafe(34)
    message[0] = STATUS
    message.writeBigUInt64BE(lsn, 1)
    message.writeBigUInt64BE(lsn, 9)
    message.writeBigUInt64BE(lsn, 17)
    message.writeBigInt64BE(BigInt(Date.now() - PG_EPOCH_MS) * 1000n, 25)
    message[33] = requestReply ? 1 : 0
    connection.sendCopyFromChunk(message)
    return true
  }

  /** Stops reading the socket: Postgres is held back through TCP. */
  pause(): void {
    this.connection?.stream.pause()
  }

  resume(): void {
    this.connection?.stream.resume()
  }

  /**
   * Ends the COPY from our side (CopyDone) and resolves when the server
   * answers with its own CopyDone, or the connection ends, or after
   * `timeoutMs`. Reading resumes meanwhile: closing a socket with unread data
   * in it sends a reset, which makes the other side drop what it had not read.
   */
  async endStream(timeoutMs: number): Promise<void> {
    const connection = this.connection
    if (connection === undefined || !this.streaming || this.ended) return
    connection.stream.resume()
    let timer: NodeJS.Timeout | undefined
    let done: (() => void) | undefined
    const answered = new Promise<void>((resolve) => {
      done = resolve
      timer = setTimeout(resolve, timeoutMs)
      connection.once('copyDone', resolve)
      connection.once('end', resolve)
    })
    // From our CopyDone on, a status update would be outside the COPY.
    this.streaming = false
    connection.endCopyFrom()
    await answered
    clearTimeout(timer)
    connection.removeListener('copyDone', done!)
    connection.removeListener('end', done!)
  }

  /** Closes the connection; every call gets the same promise. */
  close(): Promise<void> {
    this.streaming = false
    this.closing ??= this.end()
    this.abandonConnect?.(new ReplicationError('client_stopped', 'the connection was closed while it was being opened'))
    return this.closing
  }

  /**
   * pg's `end()` says goodbye and waits for the server to close the socket: a
   * server that does not read any more (a hung host, a half-open link) would
   * hold it for ever. While connecting nothing it has to say matters, so the
   * socket goes at once; otherwise after CLOSE_WAIT_MS.
   */
  private async end(): Promise<void> {
    const ended = this.client.end()
    const socket = (): { destroy(): void } => (this.client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream
    if (this.abandonConnect !== undefined) socket().destroy()
    let timer: NodeJS.Timeout | undefined
    const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), CLOSE_WAIT_MS)))
    const outcome = await Promise.race([ended, late])
    clearTimeout(timer)
    if (outcome === 'late') {
      socket().destroy()
      await ended
    }
  }
}
