import { ServerError, codeTable } from '../errors.js'

/**
 * Errors of the replication stage. Every one is a `ReplicationError` with a
 * stable `code` (defined in src/errors.ts); callers branch on the code (or the
 * class), never on the message.
 *
 * `fatal` says whether retrying can help: a decoding or privilege problem comes
 * back on every reconnect, so the replication client stops on it instead of
 * looping; a dropped connection or a failing consumer is retried.
 */
export const REPLICATION_ERROR_CODES = codeTable(
  'pgoutput_truncated',
  'pgoutput_malformed',
  'pgoutput_unsupported',
  'binary_tuple_value',
  'unknown_relation',
  'protocol_violation',
  'unchanged_toast',
  'insufficient_privilege',
  'slot_not_found',
  'slot_mismatch',
  'publication_not_found',
  'table_not_found',
  'server_configuration',
  'invalid_name',
  'client_stopped',
  'already_started',
  'connection_lost',
)

export type ReplicationErrorCode = keyof typeof REPLICATION_ERROR_CODES

const FATAL_CODES: ReadonlySet<ReplicationErrorCode> = new Set<ReplicationErrorCode>([
  'pgoutput_truncated',
  'pgoutput_malformed',
  'pgoutput_unsupported',
  'binary_tuple_value',
  'unknown_relation',
  'protocol_violation',
  'insufficient_privilege',
  'slot_not_found',
  'slot_mismatch',
  'publication_not_found',
  'server_configuration',
  'invalid_name',
])

export class ReplicationError extends ServerError<ReplicationErrorCode> {
  override readonly name: string = 'ReplicationError'

  /** Whether retrying (reconnecting) cannot help. */
  get fatal(): boolean {
    return FATAL_CODES.has(this.code)
  }
}

/** A pgoutput message could not be decoded; `messageType` is its first byte as a character. */
export class PgoutputDecodeError extends ReplicationError {
  override readonly name = 'PgoutputDecodeError'
  constructor(
    code: 'pgoutput_truncated' | 'pgoutput_malformed' | 'pgoutput_unsupported' | 'binary_tuple_value',
    readonly messageType: string,
    detail: string,
  ) {
    super(code, `pgoutput ${describeType(messageType)}: ${detail}`)
  }
}

function describeType(messageType: string): string {
  return messageType === '' ? 'empty message' : `message '${messageType}'`
}

export class UnknownRelationError extends ReplicationError {
  override readonly name = 'UnknownRelationError'
  constructor(readonly relationId: number) {
    super('unknown_relation', `No Relation message was received for relation id ${relationId} before a change to it`)
  }
}

export class ProtocolViolationError extends ReplicationError {
  override readonly name = 'ProtocolViolationError'
  constructor(detail: string) {
    super('protocol_violation', `Replication stream out of order: ${detail}`)
  }
}

/**
 * Raised by a consumer (see `assertNoUnchangedToast`) when an update still
 * carries unchanged-TOAST markers: the table does not log full old rows.
 */
export class UnchangedToastError extends ReplicationError {
  override readonly name = 'UnchangedToastError'
  constructor(
    readonly schema: string,
    readonly table: string,
    readonly columns: readonly string[],
  ) {
    const relation = `${quote(schema)}.${quote(table)}`
    super(
      'unchanged_toast',
      `An update to ${relation} left the TOASTed column(s) ${columns.map(quote).join(', ')} unchanged, ` +
        'and the table does not log old rows, so their values are unknown. ' +
        `Run: ALTER TABLE ${relation} REPLICA IDENTITY FULL;`,
    )
  }
}

/**
 * The role cannot do something replication needs. `fix` is the SQL an
 * administrator (a superuser or the object's owner) runs to grant it.
 */
export class ReplicationPrivilegeError extends ReplicationError {
  override readonly name = 'ReplicationPrivilegeError'
  constructor(
    readonly action: string,
    readonly role: string,
    readonly fix: string,
    readonly serverMessage: string,
    options?: { cause?: unknown },
  ) {
    super('insufficient_privilege', `Role ${quote(role)} cannot ${action} (${serverMessage}). As an administrator, run: ${fix}`, options)
  }
}

export class SlotNotFoundError extends ReplicationError {
  override readonly name = 'SlotNotFoundError'
  constructor(readonly slotName: string) {
    super(
      'slot_not_found',
      `Replication slot ${quote(slotName)} does not exist. Create it (SlotManager.ensure) before streaming; ` +
        'if it was dropped while Sluice ran, changes since then are lost and every shape must be rebuilt.',
    )
  }
}

export class SlotMismatchError extends ReplicationError {
  override readonly name = 'SlotMismatchError'
  constructor(
    readonly slotName: string,
    detail: string,
  ) {
    super('slot_mismatch', `Replication slot ${quote(slotName)} cannot be used: ${detail}`)
  }
}

export class PublicationNotFoundError extends ReplicationError {
  override readonly name = 'PublicationNotFoundError'
  constructor(
    readonly publication: string,
    serverMessage: string,
  ) {
    super('publication_not_found', `Publication ${quote(publication)} does not exist (${serverMessage}); create it with PublicationManager.ensure`)
  }
}

export class TableNotFoundError extends ReplicationError {
  override readonly name = 'TableNotFoundError'
  constructor(
    readonly schema: string,
    readonly table: string,
    options?: { cause?: unknown },
  ) {
    super('table_not_found', `Table ${quote(schema)}.${quote(table)} does not exist`, options)
  }
}

/** The server's settings prevent logical replication; `fix` says what to change. */
export class ServerConfigurationError extends ReplicationError {
  override readonly name = 'ServerConfigurationError'
  constructor(
    readonly fix: string,
    readonly serverMessage: string,
    options?: { cause?: unknown },
  ) {
    super('server_configuration', `${serverMessage}. ${fix}`, options)
  }
}

export class InvalidNameError extends ReplicationError {
  override readonly name = 'InvalidNameError'
  constructor(kind: 'slot' | 'publication', value: string, rule: string) {
    super('invalid_name', `Invalid ${kind} name ${JSON.stringify(value)}: ${rule}`)
  }
}

function quote(name: string): string {
  return `"${name.replaceAll('"', '""')}"`
}
