import { parseLsn, quoteIdentifier } from '@sluice/protocol'
import { PgoutputDecoder } from './pgoutput-decoder.js'
import type { PgoutputMessage } from './pgoutput-messages.js'
import { quoteLiteral } from './pg-names.js'
import type { Queryable } from './queryable.js'
import { SlotMismatchError, SlotNotFoundError } from './replication-errors.js'

/** Postgres 14 added protocol 2 (streaming of in-progress transactions). */
const STREAMING_SERVER_VERSION = 140000

export type ProtoVersion = 1 | 2

/** The first server version whose pgoutput takes the `messages` option. */
const MESSAGES_SERVER_VERSION = 140000

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
 * The pgoutput side of one replication connection: it starts the stream with
 * the options our decoder speaks and decodes each XLogData payload. (It began
 * as a plugin for pg-logical-replication's service, whose own `PgoutputPlugin`
 * parses values with pg's type parsers and rejects protocol 2 streaming; it
 * keeps Postgres text and speaks protocol 2.)
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

  /** XLogData messages parsed so far (each is parsed as it arrives). */
  get received(): number {
    return this.count
  }

  get setup(): StreamSetup | undefined {
    return this.setupInfo
  }

  /**
   * Issues START_REPLICATION, which resolves only when the stream ends. Before
   * that, on the same connection (a `replication=database` walsender runs
   * plain SQL): the server version picks the protocol, and the slot is checked
   * and its confirmed position read.
   *
   * The start position is always 0/0: the server then resumes from the slot's
   * confirmed_flush_lsn. A start position past the confirmed one (say, the
   * last LSN received on a previous connection) would skip transactions that
   * were received but never made durable.
   */
  async start(client: Queryable, slotName: string): Promise<unknown> {
    const version = await client.query('SHOW server_version_num')
    const serverVersionNum = Number(version.rows[0]?.server_version_num)
    const protoVersion = this.options.protoVersion ?? (serverVersionNum >= STREAMING_SERVER_VERSION ? 2 : 1)

    const slot = await client.query(
      `SELECT plugin::text AS plugin, confirmed_flush_lsn::text AS confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = ${quoteLiteral(slotName)}`,
    )
    const row = slot.rows[0] as { plugin: string | null; confirmed_flush_lsn: string | null } | undefined
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
    // pgoutput knows the option from Postgres 14 on; before, no message is delivered (and asking fails).
    if (this.options.messages === true && serverVersionNum >= MESSAGES_SERVER_VERSION) options.push(`messages 'true'`)
    return client.query(`START_REPLICATION SLOT ${quoteIdentifier(slotName)} LOGICAL 0/0 (${options.join(', ')})`)
  }

  /**
   * Called synchronously inside the socket's data handler, where a throw would
   * escape as an uncaught exception: failures are returned as a value and the
   * client ends the connection on them.
   */
  parse(buffer: Buffer, start = 0, end = buffer.length): PgoutputMessage | DecodeFailure {
    this.count++
    try {
      return this.decoder.decode(buffer, start, end)
    } catch (error) {
      return { tag: 'decode-failure', error }
    }
  }
}
