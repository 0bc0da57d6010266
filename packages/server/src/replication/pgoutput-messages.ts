/**
 * The pgoutput logical replication messages (protocol versions 1 and 2) as
 * the decoder returns them. Field names follow the Postgres documentation
 * ("Logical Replication Message Formats"); LSNs are u64 BigInts, timestamps the
 * raw signed microseconds since 2000-01-01 00:00 UTC that Postgres sends.
 *
 * `xid` on relation, type, insert, update, delete, truncate and message is the
 * (sub)transaction id that pgoutput prefixes inside a streamed segment
 * (between Stream Start and Stream Stop); outside one it is `undefined`.
 */

/** Stands for a TOASTed value that the row change did not touch (pgoutput 'u'). */
export const UNCHANGED_TOAST: unique symbol = Symbol('sluice.unchanged-toast')
export type UnchangedToast = typeof UNCHANGED_TOAST

/**
 * One column value: the Postgres text output of the value exactly as sent
 * (never parsed), `null` for SQL NULL, or the unchanged-TOAST marker.
 */
export type TupleValue = string | null | UnchangedToast

/** Values in the order of the relation's columns. */
export type Tuple = TupleValue[]

export type ReplicaIdentity = 'default' | 'nothing' | 'full' | 'index'

export interface RelationColumn {
  readonly name: string
  readonly typeOid: number
  /** -1 when the type has no modifier. */
  readonly typeMod: number
  /** Part of the replica identity (the key sent in 'K' old tuples). */
  readonly isKey: boolean
  /** Raw flags byte (bit 1 = key); kept for forward compatibility. */
  readonly flags: number
}

/** A table as pgoutput describes it. Tuples of its changes line up with `columns`. */
export interface Relation {
  /** The table's OID. */
  readonly id: number
  /** Postgres sends '' for pg_catalog; the decoder writes 'pg_catalog'. */
  readonly schema: string
  readonly table: string
  readonly replicaIdentity: ReplicaIdentity
  readonly columns: readonly RelationColumn[]
  /** Indexes into `columns` of the replica identity columns, in column order. */
  readonly keyColumns: readonly number[]
}

export interface BeginMessage {
  readonly tag: 'begin'
  /** LSN of the commit record: the transaction's position in the log. */
  readonly finalLsn: bigint
  readonly commitTime: bigint
  readonly xid: number
}

export interface CommitMessage {
  readonly tag: 'commit'
  readonly flags: number
  readonly commitLsn: bigint
  /** End of the commit record. */
  readonly endLsn: bigint
  readonly commitTime: bigint
}

export interface OriginMessage {
  readonly tag: 'origin'
  readonly originLsn: bigint
  readonly name: string
}

export interface RelationMessage {
  readonly tag: 'relation'
  readonly xid: number | undefined
  readonly relation: Relation
}

export interface TypeMessage {
  readonly tag: 'type'
  readonly xid: number | undefined
  readonly typeOid: number
  /** '' on the wire for pg_catalog is written as 'pg_catalog'. */
  readonly schema: string
  readonly name: string
}

export interface InsertMessage {
  readonly tag: 'insert'
  readonly xid: number | undefined
  readonly relationId: number
  readonly newTuple: Tuple
  /** Size of the message on the wire: a cheap memory estimate for the assembler. */
  readonly byteLength: number
}

/** 'key': replica identity columns only (others null); 'full': the whole old row. */
export type OldTupleKind = 'key' | 'full'

export interface UpdateMessage {
  readonly tag: 'update'
  readonly xid: number | undefined
  readonly relationId: number
  /** Present for REPLICA IDENTITY FULL ('O'), or when the key changed ('K'). */
  readonly oldTuple: Tuple | undefined
  readonly oldTupleKind: OldTupleKind | undefined
  readonly newTuple: Tuple
  readonly byteLength: number
}

export interface DeleteMessage {
  readonly tag: 'delete'
  readonly xid: number | undefined
  readonly relationId: number
  readonly oldTuple: Tuple
  readonly oldTupleKind: OldTupleKind
  readonly byteLength: number
}

export interface TruncateMessage {
  readonly tag: 'truncate'
  readonly xid: number | undefined
  readonly cascade: boolean
  readonly restartIdentity: boolean
  readonly relationIds: readonly number[]
}

/** A logical decoding message (`pg_logical_emit_message`); sent only with `messages 'true'`. */
export interface LogicalMessage {
  readonly tag: 'message'
  readonly xid: number | undefined
  readonly transactional: boolean
  readonly lsn: bigint
  readonly prefix: string
  /** A copy: the connection's receive buffer is reused. */
  readonly content: Buffer
}

export interface StreamStartMessage {
  readonly tag: 'stream-start'
  readonly xid: number
  readonly firstSegment: boolean
}

export interface StreamStopMessage {
  readonly tag: 'stream-stop'
}

export interface StreamCommitMessage {
  readonly tag: 'stream-commit'
  readonly xid: number
  readonly flags: number
  readonly commitLsn: bigint
  readonly endLsn: bigint
  readonly commitTime: bigint
}

/** `subxid === xid` aborts the whole transaction; otherwise only that subtransaction. */
export interface StreamAbortMessage {
  readonly tag: 'stream-abort'
  readonly xid: number
  readonly subxid: number
}

export type PgoutputMessage =
  | BeginMessage
  | CommitMessage
  | OriginMessage
  | RelationMessage
  | TypeMessage
  | InsertMessage
  | UpdateMessage
  | DeleteMessage
  | TruncateMessage
  | LogicalMessage
  | StreamStartMessage
  | StreamStopMessage
  | StreamCommitMessage
  | StreamAbortMessage

export type PgoutputTag = PgoutputMessage['tag']
