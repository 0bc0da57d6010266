import { U64_MAX, buildRowKey, rowKeyFromValues, rowKeyPrefix } from '@sluice/protocol'
import type { Operation, RelationName, ReplicaMode } from '@sluice/protocol'
import { UnchangedToastError } from '../replication/index.js'
import type { OldTupleKind, TupleValue } from '../replication/index.js'
import type { LineScratch } from './line-scratch.js'

/**
 * Encodes one replicated row change into the JSON line(s) of a shape log
 * (PROTOCOL.md §3.1–3.3, 3.5). Pure: tuples in, bytes out.
 *
 * Line layout (no whitespace, no trailing comma):
 *
 *   {"key":K,"value":{…}[,"old_value":{…}],"headers":{"operation":O,"relation":[S,T]
 *     [,"key_change_to"|"key_change_from":K2],"lsn":"<decimal>","op_position":N,"txids":[X][,"last":true]}}
 *
 * Key order: clients read lines with JSON.parse, so order carries no meaning;
 * PROTOCOL.md does not fix it. We use the order of Electric's `log_items.ex`
 * literals (key, value, old_value, headers; operation, relation first) rather
 * than what Jason emits for small Elixir maps (sorted keys), because it is
 * the readable one and nothing depends on it. Within `value`/`old_value`
 * columns appear in table order.
 *
 * Every string goes through `JSON.stringify`, so escaping is exactly
 * JSON.stringify's (non-ASCII kept, control characters and lone surrogates
 * escaped); the line is built as one string and UTF-8 encoded once.
 */

/** What the encoder needs of a table; PK info comes from the catalog, not pgoutput (REPLICA IDENTITY FULL flags every column). */
export interface TableDescription {
  readonly schema: string
  readonly name: string
  /** Column names in table order: the order of the tuples' values. */
  readonly columns: readonly string[]
  /** Primary-key column names in key order; empty when the table has none. */
  readonly primaryKey: readonly string[]
}

export interface ChangeEncoderOptions {
  readonly table: TableDescription
  /** The shape's selected columns; omitted means all. Must include every PK column. */
  readonly columns?: readonly string[] | undefined
  readonly replica: ReplicaMode
}

/** The parts of the replication stage's Insert/Update/DeleteChange that the encoder reads (those types fit as is). */
export type EncodableChange =
  | { readonly kind: 'insert'; readonly newTuple: readonly TupleValue[] }
  | {
      readonly kind: 'update'
      readonly newTuple: readonly TupleValue[]
      readonly oldTuple: readonly TupleValue[] | undefined
      readonly oldTupleKind?: OldTupleKind | undefined
    }
  | { readonly kind: 'delete'; readonly oldTuple: readonly TupleValue[]; readonly oldTupleKind?: OldTupleKind | undefined }

export interface ChangePosition {
  /** Commit LSN of the transaction (the offset's tx part). */
  readonly lsn: bigint
  /** Op offset of the change; a PK-changing update also takes `op + 1` (ops count by 2, PROTOCOL.md §4.1). */
  readonly op: number
  /** 32-bit xid from Begin, sent as a JSON number. */
  readonly txid: number
  /** Whether this is the transaction's last change for this shape. */
  readonly last: boolean
}

export interface EncodedLine {
  /** Op offset of this line: `op`, or `op + 1` for the insert half of a PK change. */
  readonly op: number
  readonly operation: Operation
  readonly key: string
  readonly bytes: Uint8Array
}

export type ChangeEncodingErrorCode = 'invalid_table' | 'invalid_position' | 'invalid_tuple' | 'missing_old_row'

export class ChangeEncodingError extends Error {
  override readonly name = 'ChangeEncodingError'
  constructor(
    readonly code: ChangeEncodingErrorCode,
    message: string,
  ) {
    super(message)
  }
}

const MAX_XID = 0xffff_ffff

// Stateless, so sharing one across encoders leaks nothing.
const utf8 = new TextEncoder()

type Row = readonly (string | null)[]

/**
 * One encoder per (table, projection, replica): the router encodes each change
 * once per distinct projection and shares the bytes among shapes that use it.
 */
export class ChangeEncoder {
  readonly table: TableDescription
  readonly replica: ReplicaMode
  readonly #relation: RelationName
  readonly #keyPrefix: string
  /** `,"relation":["schema","table"]` */
  readonly #relationJson: string
  /** Projected column indexes, in table order. */
  readonly #projected: readonly number[]
  /** `"name":` per column index. */
  readonly #names: readonly string[]
  readonly #pk: readonly number[]
  readonly #isPk: readonly boolean[]

  constructor(options: ChangeEncoderOptions) {
    const { table, replica } = options
    this.table = table
    this.replica = replica
    this.#relation = { schema: table.schema, name: table.name }
    this.#keyPrefix = rowKeyPrefix(this.#relation)
    this.#relationJson = `,"relation":${JSON.stringify([table.schema, table.name])}`
    this.#names = table.columns.map((name) => `${JSON.stringify(name)}:`)

    const indexOf = new Map<string, number>()
    table.columns.forEach((name, i) => {
      if (indexOf.has(name)) throw new ChangeEncodingError('invalid_table', `duplicate column ${JSON.stringify(name)}`)
      indexOf.set(name, i)
    })
    const lookup = (name: string, what: string): number => {
      const i = indexOf.get(name)
      if (i === undefined) throw new ChangeEncodingError('invalid_table', `${what} ${JSON.stringify(name)} is not a column of the table`)
      return i
    }
    this.#pk = table.primaryKey.map((name) => lookup(name, 'primary-key column'))
    this.#isPk = table.columns.map((_, i) => this.#pk.includes(i))

    if (options.columns === undefined) {
      this.#projected = table.columns.map((_, i) => i)
    } else {
      const selected = new Set(options.columns.map((name) => lookup(name, 'selected column')))
      for (const i of this.#pk) {
        if (!selected.has(i)) {
          throw new ChangeEncodingError('invalid_table', `selected columns must include primary-key column ${JSON.stringify(table.columns[i])}`)
        }
      }
      this.#projected = table.columns.map((_, i) => i).filter((i) => selected.has(i))
    }
  }

  /**
   * The line(s) for one change: one, or two (delete then insert) for an update that changes the row key.
   * With `scratch`, the bytes are views of its memory, valid until it is reset; otherwise each line has its own.
   */
  encode(change: EncodableChange, position: ChangePosition, scratch?: LineScratch): EncodedLine[] {
    const tail = this.#positionTail(position)
    switch (change.kind) {
      case 'insert': {
        const row = this.#row(change.newTuple)
        const key = this.#key(row)
        return [this.#line('insert', key, this.#object(row, this.#projected), '', '', tail, position.op, position.last, scratch)]
      }
      case 'delete': {
        const row = this.#row(change.oldTuple)
        const key = this.#key(row)
        const value = this.#deleteValue(row, change.oldTupleKind)
        return [this.#line('delete', key, value, '', '', tail, position.op, position.last, scratch)]
      }
      case 'update':
        return this.#update(change.newTuple, change.oldTuple, change.oldTupleKind, position, tail, scratch)
    }
  }

  #update(
    newTuple: readonly TupleValue[],
    oldTuple: readonly TupleValue[] | undefined,
    oldKind: OldTupleKind | undefined,
    position: ChangePosition,
    tail: string,
    scratch: LineScratch | undefined,
  ): EncodedLine[] {
    const next = this.#row(newTuple)
    const prev = oldTuple === undefined ? undefined : this.#row(oldTuple)
    // Without a logged old row (REPLICA IDENTITY DEFAULT and the key unchanged) Postgres says nothing about the old values.
    const prevIsFull = prev !== undefined && oldKind !== 'key'
    const key = this.#key(next)
    const oldKey = prev === undefined ? key : this.#key(prev)

    if (oldKey !== key) {
      // §3.2: a key change is a delete of the old key then an insert of the new one.
      // Electric puts `last` only on the insert half: the delete is never the transaction's last line.
      if (prev === undefined) throw new Error('unreachable: a changed key implies an old tuple')
      const deleteValue = this.#deleteValue(prev, oldKind)
      const insertTail = this.#positionTail({ ...position, op: position.op + 1 })
      return [
        this.#line('delete', oldKey, deleteValue, '', `,"key_change_to":${JSON.stringify(key)}`, tail, position.op, false, scratch),
        this.#line(
          'insert',
          key,
          this.#object(next, this.#projected),
          '',
          `,"key_change_from":${JSON.stringify(oldKey)}`,
          insertTail,
          position.op + 1,
          position.last,
          scratch,
        ),
      ]
    }

    // Unknown old values count as changed, so the client never misses a new value.
    const changed = this.#projected.filter((i) => !prevIsFull || prev[i] !== next[i])
    if (this.replica === 'default') {
      const columns = this.#projected.filter((i) => this.#isPk[i] === true || changed.includes(i))
      return [this.#line('update', key, this.#object(next, columns), '', '', tail, position.op, position.last, scratch)]
    }
    if (!prevIsFull) throw this.#missingOldRow('update')
    const oldValue = `,"old_value":${this.#object(prev, changed)}`
    return [this.#line('update', key, this.#object(next, this.#projected), oldValue, '', tail, position.op, position.last, scratch)]
  }

  #deleteValue(row: Row, kind: OldTupleKind | undefined): string {
    if (this.replica === 'full') {
      if (kind === 'key') throw this.#missingOldRow('delete')
      return this.#object(row, this.#projected)
    }
    return this.#object(row, this.#pk.length > 0 ? this.#projected.filter((i) => this.#isPk[i] === true) : this.#projected)
  }

  #line(
    operation: Operation,
    key: string,
    value: string,
    oldValue: string,
    keyChange: string,
    tail: string,
    op: number,
    last: boolean,
    scratch: LineScratch | undefined,
  ): EncodedLine {
    const text =
      `{"key":${JSON.stringify(key)},"value":${value}${oldValue},"headers":{"operation":"${operation}"` +
      `${this.#relationJson}${keyChange}${tail}${last ? ',"last":true' : ''}}}`
    return { op, operation, key, bytes: scratch === undefined ? utf8.encode(text) : scratch.put(text) }
  }

  /** `,"lsn":"…","op_position":n,"txids":[x]` */
  #positionTail(position: ChangePosition): string {
    const { lsn, op, txid } = position
    if (typeof lsn !== 'bigint' || lsn < 0n || lsn > U64_MAX) throw new ChangeEncodingError('invalid_position', `LSN out of range: ${String(lsn)}`)
    if (!Number.isSafeInteger(op) || op < 0) throw new ChangeEncodingError('invalid_position', `invalid op position: ${op}`)
    if (!Number.isInteger(txid) || txid < 0 || txid > MAX_XID) throw new ChangeEncodingError('invalid_position', `xid is not a 32-bit xid: ${txid}`)
    return `,"lsn":"${lsn}","op_position":${op},"txids":[${txid}]`
  }

  #object(row: Row, columns: readonly number[]): string {
    let out = '{'
    for (let n = 0; n < columns.length; n++) {
      const i = columns[n] as number
      const value = row[i]
      if (n > 0) out += ','
      out += (this.#names[i] as string) + (value === null || value === undefined ? 'null' : JSON.stringify(value))
    }
    return out + '}'
  }

  #key(row: Row): string {
    if (this.#pk.length > 0) return rowKeyFromValues(this.#keyPrefix, this.#pk.map((i) => row[i] ?? null))
    // No PK: all table columns (not just the projection) in name order, as Electric keys the row before projecting.
    // buildRowKey owns that ordering; such tables are rare enough that the per-row record is fine.
    const record: Record<string, string | null> = {}
    this.table.columns.forEach((name, i) => {
      record[name] = row[i] ?? null
    })
    return buildRowKey(this.#relation, record, [])
  }

  /** Checks a tuple's width and that no unchanged-TOAST marker is left (the value would be unknown). */
  #row(tuple: readonly TupleValue[]): Row {
    if (tuple.length !== this.table.columns.length) {
      throw new ChangeEncodingError(
        'invalid_tuple',
        `tuple has ${tuple.length} values, table ${JSON.stringify(this.table.name)} has ${this.table.columns.length} columns`,
      )
    }
    const toast: string[] = []
    tuple.forEach((value, i) => {
      if (typeof value === 'symbol') toast.push(this.table.columns[i] ?? `#${i}`)
    })
    if (toast.length > 0) throw new UnchangedToastError(this.table.schema, this.table.name, toast)
    return tuple as Row
  }

  #missingOldRow(operation: Operation): ChangeEncodingError {
    return new ChangeEncodingError(
      'missing_old_row',
      `replica=full needs the old row of each ${operation}, but ${JSON.stringify(this.table.schema)}.${JSON.stringify(this.table.name)} ` +
        'did not log it (REPLICA IDENTITY FULL is required)',
    )
  }
}

