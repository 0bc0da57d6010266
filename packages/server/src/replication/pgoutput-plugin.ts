import { parseLsn, quoteIdentifier } from '@sluice/protocol'
import type pg from 'pg'
import { PgoutputDecoder } from './pgoutput-decoder.js'
import type { PgoutputMessage } from './pgoutput-messages.js'
import { quoteLiteral } from './pg-names.js'
import { SlotMismatchError, SlotNotFoundError } from './replication-errors.js'

/** Postgres 14 added protocol 2 (streaming of in-progress transactions). */
const STREAMING_SERVER_VERSION = 140000

export type ProtoVersion = 1 | 2

export interface PgoutputPluginOptions {
  readonly publicationNames: readonly string[]
  /** Forced protocol version; by default 2 on Postgres ≥ 14, else 1. */
  readonly protoVersion?: ProtoVersion
  /** Ask for logical decoding messages (`pg_logical_emit_message`). */
  readonly messages?: boolean
}

/** What the plugin learned on the connection before streaming started. */
export interface StreamSetup {
  readonly serverVersionNum: number
  readonly protoVersion: ProtoVersion
  /** The slot's confirmed_flush_lsn: streaming resumes after it. */
  readonly confirmedFlushLsn: bigint
}

/** A message that failed to decode. Returned, not thrown: see `parse`. */
export interface DecodeFailure {
  readonly tag: 'decode-failure'
  readonly error: unknown
}

/**
 * Our pgoutput plugin for `LogicalReplicationService` (it implements that
 * package's plugin contract: `name`, `options`, `start`, `parse`). Its own
 * `PgoutputPlugin` parses values with pg's type parsers and rejects protocol 2
 * streaming; this one keeps Postgres text and speaks protocol 2.
 *
 * One instance per connection: the decoder's stream state and the counters
 * belong to one stream.
 */
export class SluicePgoutputPlugin {
  readonly name = 'pgoutput'
  private readonly decoder = new PgoutputDecoder()
  private count = 0
  private setupInfo: StreamSetup | undefined

  constructor(readonly options: PgoutputPluginOptions) {}

  /** XLogData messages parsed so far (the service parses as it receives). */
  get received(): number {
    return this.count
  }

  get setup(): StreamSetup | undefined {
    return this.setupInfo
  }

  /**
   * Issues START_REPLICATION. Before that, on the same connection (a
   * `replication=database` walsender runs plain SQL): the server version picks
   * the protocol, and the slot is checked and its confirmed position read.
   *
   * The start position is always 0/0 whatever the service passes: the server
   * then resumes from the slot's confirmed_flush_lsn. The service would pass
   * the last LSN it *received* on a previous connection, and a start position
   * past the confirmed one skips transactions that were received but never
   * made durable.
   */
  async start(client: pg.Client, slotName: string, _lastLsn: string): Promise<unknown> {
    const version = await client.query<{ server_version_num: string }>('SHOW server_version_num')
    const serverVersionNum = Number(version.rows[0]?.server_version_num)
    const protoVersion = this.options.protoVersion ?? (serverVersionNum >= STREAMING_SERVER_VERSION ? 2 : 1)

    const slot = await client.query<{ plugin: string | null; confirmed_flush_lsn: string | null }>(
      `SELECT plugin::text AS plugin, confirmed_flush_lsn::text AS confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = ${quoteLiteral(slotName)}`,
    )
    const row = slot.rows[0]
    if (row === undefined) throw new SlotNotFoundError(slotName)
    if (row.plugin !== 'pgoutput' || row.confirmed_flush_lsn === null) throw new SlotMismatchError(slotName, 'it is not a pgoutput logical slot')
    this.setupInfo = { serverVersionNum, protoVersion, confirmedFlushLsn: parseLsn(row.confirmed_flush_lsn) }

    // publication_names is parsed by the server as an identifier list, so each
    // name is quoted as an identifier and the whole list as a string literal.
    const options = [
      `proto_version '${protoVersion}'`,
      `publication_names ${quoteLiteral(this.options.publicationNames.map(quoteIdentifier).join(','))}`,
    ]
    if (protoVersion >= 2) options.push(`streaming 'on'`)
    if (this.options.messages === true) options.push(`messages 'true'`)
    return client.query(`START_REPLICATION SLOT ${quoteIdentifier(slotName)} LOGICAL 0/0 (${options.join(', ')})`)
  }

  /**
   * Called by the service synchronously inside the socket's data handler, where
   * a throw would escape as an uncaught exception: failures are returned as a
   * value and the client ends the connection on them.
   */
  parse(buffer: Buffer): PgoutputMessage | DecodeFailure {
    this.count++
    try {
      return this.decoder.decode(buffer)
    } catch (error) {
      return { tag: 'decode-failure', error }
    }
  }
}
