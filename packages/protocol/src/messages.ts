import { U64_MAX } from './offset.js'

/**
 * Messages of a shape log body (docs/protocol.md §3).
 *
 * A body is a JSON array of change messages, control messages and (for
 * subquery shapes) event messages. Change lines are encoded by the server once
 * per change and stored as bytes; the control lines below are constant apart
 * from a few numbers, so they are built here as text, byte for byte.
 */

export type Operation = 'insert' | 'update' | 'delete'

/** Column name → Postgres text output, or `null` for SQL NULL. */
export interface RowValues {
  readonly [column: string]: string | null
}

export interface ChangeHeaders {
  readonly operation: Operation
  /** `[schema, table]`. */
  readonly relation: readonly [schema: string, table: string]
  /** Decimal commit LSN, as a string. Replication changes only. */
  readonly lsn?: string
  /** Op index inside the transaction. Replication changes only. */
  readonly op_position?: number
  /** One 32-bit xid, as a JSON number. Replication changes only. */
  readonly txids?: readonly number[]
  /** On the transaction's last change for this shape; absent otherwise, never `false`. */
  readonly last?: true
  /** On the `delete` half of a primary-key change: the row's new key. */
  readonly key_change_to?: string
  /** On the `insert` half of a primary-key change: the row's old key. */
  readonly key_change_from?: string
  /** Subquery shapes only (§3.4). */
  readonly tags?: readonly string[]
  readonly removed_tags?: readonly string[]
  readonly active_conditions?: readonly boolean[]
  /** Subquery shapes: a row that entered the shape because a subquery value entered its inner set. */
  readonly is_move_in?: true
  /** Rows of a subset snapshot (§6): the response's `snapshot_mark`. */
  readonly snapshot_mark?: number
}

export interface ChangeMessage {
  /** The row key (§3.3, `buildRowKey`). */
  readonly key: string
  /**
   * insert: the selected row. update: primary key plus changed columns
   * (`replica=default`) or the full new row (`replica=full`). delete: the
   * primary key (`default`) or the full old row (`full`).
   */
  readonly value: RowValues
  /** `replica=full` updates only: old values of the changed columns. */
  readonly old_value?: RowValues
  readonly headers: ChangeHeaders
}

export interface UpToDateHeaders {
  readonly control: 'up-to-date'
  /** Decimal LSN the server has seen; the SSE client also resumes from `<this>_0`. */
  readonly global_last_seen_lsn?: string
}

export interface MustRefetchHeaders {
  readonly control: 'must-refetch'
}

/** xid8 values, sent as decimal strings. */
export interface SnapshotEndHeaders {
  readonly control: 'snapshot-end'
  readonly xmin: string
  readonly xmax: string
  readonly xip_list: readonly string[]
}

/** Built by the client itself after a subset snapshot; never sent by a server. */
export interface SubsetEndHeaders {
  readonly control: 'subset-end'
  readonly where?: string
  readonly params?: Readonly<Record<string, string | number | bigint>>
  readonly limit?: number
  readonly offset?: number
  readonly orderBy?: string
}

export type ControlHeaders = UpToDateHeaders | MustRefetchHeaders | SnapshotEndHeaders | SubsetEndHeaders

export interface ControlMessage {
  readonly headers: ControlHeaders
}

/** Subquery shapes only: which tagged rows moved in or out. */
export interface MovePattern {
  readonly pos: number
  readonly value: string
}

export interface EventMessage {
  readonly headers: {
    readonly event: 'move-out' | 'move-in'
    readonly patterns: readonly MovePattern[]
    /** The inner-table transactions that caused the move (32-bit xids). */
    readonly txids?: readonly number[]
  }
}

export type Message = ChangeMessage | ControlMessage | EventMessage

export function isChangeMessage(message: Message): message is ChangeMessage {
  return 'operation' in message.headers
}

export function isControlMessage(message: Message): message is ControlMessage {
  return 'control' in message.headers
}

/** `{"headers":{"control":"up-to-date","global_last_seen_lsn":"<lsn>"}}`: always a body's last element. */
export function upToDateMessage(globalLastSeenLsn: bigint): string {
  return `{"headers":{"control":"up-to-date","global_last_seen_lsn":"${u64(globalLastSeenLsn, 'LSN')}"}}`
}

/**
 * The line after the initial snapshot's rows: the snapshot's visibility, for
 * stitching. Keys in the order of docs/protocol.md; the values are xid8s.
 */
export function snapshotEndMessage(xmin: bigint, xmax: bigint, xipList: readonly bigint[]): string {
  const xip = xipList.map((xid) => `"${u64(xid, 'xid')}"`).join(',')
  return `{"headers":{"control":"snapshot-end","xmin":"${u64(xmin, 'xid')}","xmax":"${u64(xmax, 'xid')}","xip_list":[${xip}]}}`
}

export const MUST_REFETCH_MESSAGE = '{"headers":{"control":"must-refetch"}}'

/** The whole body of a 409. */
export const MUST_REFETCH_BODY = `[${MUST_REFETCH_MESSAGE}]`

function u64(value: bigint, what: string): string {
  if (value < 0n || value > U64_MAX) throw new RangeError(`${what} out of range: ${value}`)
  return value.toString()
}
