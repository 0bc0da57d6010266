import { U64_MAX, buildRowKey, rowKeyFromValue, rowKeyFromValues, rowKeyPrefix } from '@sluice/protocol'
import type { Operation, RelationName, ReplicaMode } from '@sluice/protocol'
import { ServerError } from '../errors.js'
import { UnchangedToastError } from '../replication/index.js'
import type { OldTupleKind, TupleValue } from '../replication/index.js'
import {
  MAX_U64_DIGITS,
  QUOTE,
  ascii,
  jsonBound,
  putBytes,
  putEscaped,
  putJsonString,
  putLsn,
  putUint,
} from './json-bytes.js'
import { LineScratch } from './line-scratch.js'

/**
 * Encodes one replicated row change into the JSON line(s) of a shape log
 * (docs/protocol.md §3.1–3.3, 3.5). Pure: tuples in, bytes out.
 *
 * Line layout (no whitespace, no trailing comma):
 *
 *   {"key":K,"value":{…}[,"old_value":{…}],"headers":{"operation":O,"relation":[S,T]
 *     [,"key_change_to"|"key_change_from":K2],"lsn":"<decimal>","op_position":N,"txids":[X][,"last":true]}}
 *
 * Key order: clients read lines with JSON.parse, so order carries no meaning;
 * docs/protocol.md does not fix it. We use the order of Electric's `log_items.ex`
 * literals (key, value, old_value, headers; operation, relation first) rather
 * than what Jason emits for small Elixir maps (sorted keys), because it is
 * the readable one and nothing depends on it. Within `value`/`old_value`
 * columns appear in table order.
 *
 * Escaping is exactly JSON.stringify's (non-ASCII kept, control characters
 * and lone surrogates escaped). The line is written byte by byte into the
 * router's scratch memory (line-scratch.ts): ASCII strings are escaped in
 * place, a string with anything else goes through JSON.stringify and a UTF-8
 * write (json-bytes.ts). Building each line as a string instead (a piece per
 * column, joined, then flattened and encoded) would make kilobytes of garbage
 * per change, and young-generation collections a large share of the main
 * thread with many shapes.
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
  /** Op offset of the change; a PK-changing update also takes `op + 1` (ops count by 2, docs/protocol.md §4.1). */
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
  readonly bytes: Uint8Array
}

export type ChangeEncodingErrorCode = 'invalid_table' | 'invalid_position' | 'invalid_tuple' | 'missing_old_row'

export class ChangeEncodingError extends ServerError<ChangeEncodingErrorCode> {
  override readonly name = 'ChangeEncodingError'
}

const MAX_XID = 0xffff_ffff

type Row = readonly (string | null)[]

const KEY_OPEN = ascii('{"key":')
const VALUE = ascii(',"value":')
const OLD_VALUE = ascii(',"old_value":')
const KEY_CHANGE_TO = ascii(',"key_change_to":')
const KEY_CHANGE_FROM = ascii(',"key_change_from":')
const HEADERS = ascii(',"headers":{"operation":"')
const OPERATIONS: Readonly<Record<Operation, Uint8Array>> = { insert: ascii('insert"'), update: ascii('update"'), delete: ascii('delete"') }
const LSN = ascii(',"lsn":"')
const OP_POSITION = ascii('","op_position":')
const TXIDS = ascii(',"txids":[')
const LAST_END = ascii('],"last":true}}')
const END = ascii(']}}')
const NULL = ascii('null')
/** Room for the fixed parts of a line and its numbers (the relation and key are counted apart). */
const LINE_OVERHEAD = 256

/** A row key's value parts inside the key's JSON string: `/"…"` (the quotes escaped) and `/_` for NULL. */
const PART_OPEN = ascii('/\\"')
const PART_CLOSE = ascii('\\"')
const NULL_PART = ascii('/_')


/** One of a line's objects: a row's values for some of its columns. */
interface RowPart {
  readonly row: Row
  readonly columns: readonly number[]
}

/** A key change's header (`key_change_to` on the delete half, `key_change_from` on the insert half). */
interface KeyChange {
  readonly to: boolean
  readonly key: string
}

/** A scratch for lines encoded without the router's (tests, one-off callers): each line is copied out of it. */
let ownScratch: LineScratch | undefined

/**
 * One encoder per (table, projection, replica): the router encodes each change
 * once per distinct projection and shares the bytes among shapes that use it.
 */
export class ChangeEncoder {
  readonly table: TableDescription
  readonly replica: ReplicaMode
  readonly #relation: RelationName
  readonly #keyPrefix: string
  /** The opening quote and the key prefix as a JSON string writes them: the same in every key of the table (#putRowKey). */
  readonly #keyPrefixJson: Uint8Array
  /** `,"headers":{"operation":"<op>","relation":["schema","table"]` per operation, UTF-8 */
  readonly #headers: Readonly<Record<Operation, Uint8Array>>
  /** `,"relation":["schema","table"]`, UTF-8: its length bounds a line's */
  readonly #relationJson: Uint8Array
  /** Projected column indexes, in table order. */
  readonly #projected: readonly number[]
  /** `"name":` per column index, UTF-8 */
  readonly #names: readonly Uint8Array[]
  /** Bytes all the names take: with each value's bound, what an object of the row can take. */
  readonly #namesBytes: number
  readonly #pk: readonly number[]
  readonly #isPk: readonly boolean[]

  constructor(options: ChangeEncoderOptions) {
    const { table, replica } = options
    this.table = table
    this.replica = replica
    this.#relation = { schema: table.schema, name: table.name }
    this.#keyPrefix = rowKeyPrefix(this.#relation)
    this.#relationJson = Buffer.from(`,"relation":${JSON.stringify([table.schema, table.name])}`, 'utf8')
    this.#keyPrefixJson = Buffer.from(JSON.stringify(this.#keyPrefix).slice(0, -1), 'utf8')
    const headers = (operation: Operation): Uint8Array => Buffer.concat([HEADERS, OPERATIONS[operation], this.#relationJson])
    this.#headers = { insert: headers('insert'), update: headers('update'), delete: headers('delete') }
    this.#names = table.columns.map((name) => Buffer.from(`${JSON.stringify(name)}:`, 'utf8'))
    this.#namesBytes = this.#names.reduce((sum, n) => sum + n.length, 0)

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
    this.#checkPosition(position)
    switch (change.kind) {
      case 'insert': {
        const row = this.#row(change.newTuple)
        return [this.#line('insert', row, { row, columns: this.#projected }, undefined, undefined, position.lsn, position.op, position.txid, position.last, scratch)]
      }
      case 'delete': {
        const row = this.#row(change.oldTuple)
        return [this.#line('delete', row, this.#deleteValue(row, change.oldTupleKind), undefined, undefined, position.lsn, position.op, position.txid, position.last, scratch)]
      }
      case 'update':
        return this.#update(change.newTuple, change.oldTuple, change.oldTupleKind, position, scratch)
    }
  }

  #update(
    newTuple: readonly TupleValue[],
    oldTuple: readonly TupleValue[] | undefined,
    oldKind: OldTupleKind | undefined,
    position: ChangePosition,
    scratch: LineScratch | undefined,
  ): EncodedLine[] {
    const next = this.#row(newTuple)
    const prev = oldTuple === undefined ? undefined : this.#row(oldTuple)
    // Without a logged old row (REPLICA IDENTITY DEFAULT and the key unchanged) Postgres says nothing about the old values.
    const prevIsFull = prev !== undefined && oldKind !== 'key'
    const { lsn, op, txid, last } = position

    // Equal key values make equal keys; only when they differ are the keys built to compare.
    if (prev !== undefined && !this.#sameKeyValues(prev, next)) {
      const key = this.#key(next)
      const oldKey = this.#key(prev)
      if (oldKey !== key) {
        // §3.2: a key change is a delete of the old key then an insert of the new one.
        // Electric puts `last` only on the insert half: the delete is never the transaction's last line.
        return [
          this.#line('delete', oldKey, this.#deleteValue(prev, oldKind), undefined, { to: true, key }, lsn, op, txid, false, scratch),
          this.#line('insert', key, { row: next, columns: this.#projected }, undefined, { to: false, key: oldKey }, lsn, op + 1, txid, last, scratch),
        ]
      }
    }

    // Unknown old values count as changed, so the client never misses a new value.
    const changed = this.#projected.filter((i) => !prevIsFull || prev[i] !== next[i])
    if (this.replica === 'default') {
      const columns = this.#projected.filter((i) => this.#isPk[i] === true || changed.includes(i))
      return [this.#line('update', next, { row: next, columns }, undefined, undefined, lsn, op, txid, last, scratch)]
    }
    if (!prevIsFull) throw this.#missingOldRow('update')
    return [this.#line('update', next, { row: next, columns: this.#projected }, { row: prev, columns: changed }, undefined, lsn, op, txid, last, scratch)]
  }

  #deleteValue(row: Row, kind: OldTupleKind | undefined): RowPart {
    if (this.replica === 'full') {
      if (kind === 'key') throw this.#missingOldRow('delete')
      return { row, columns: this.#projected }
    }
    return { row, columns: this.#pk.length > 0 ? this.#projected.filter((i) => this.#isPk[i] === true) : this.#projected }
  }

  /** `key`: the line's row key, or the row to write it from (see #putRowKey). */
  #line(
    operation: Operation,
    key: string | Row,
    value: RowPart,
    oldValue: RowPart | undefined,
    keyChange: KeyChange | undefined,
    lsn: bigint,
    op: number,
    txid: number,
    last: boolean,
    scratch: LineScratch | undefined,
  ): EncodedLine {
    const worst =
      LINE_OVERHEAD +
      MAX_U64_DIGITS +
      this.#relationJson.length +
      (typeof key === 'string' ? jsonBound(key) : this.#keyBound(key)) +
      (keyChange === undefined ? 0 : jsonBound(keyChange.key)) +
      this.#objectBound(value.row) +
      (oldValue === undefined ? 0 : this.#objectBound(oldValue.row))
    const into = scratch ?? (ownScratch ??= new LineScratch())
    const buf = into.open(worst)
    let at = putBytes(buf, into.start, KEY_OPEN)
    at = typeof key === 'string' ? putJsonString(buf, at, key) : this.#putRowKey(buf, at, key)
    at = putBytes(buf, at, VALUE)
    at = this.#object(buf, at, value)
    if (oldValue !== undefined) {
      at = putBytes(buf, at, OLD_VALUE)
      at = this.#object(buf, at, oldValue)
    }
    at = putBytes(buf, at, this.#headers[operation])
    if (keyChange !== undefined) {
      at = putBytes(buf, at, keyChange.to ? KEY_CHANGE_TO : KEY_CHANGE_FROM)
      at = putJsonString(buf, at, keyChange.key)
    }
    at = putBytes(buf, at, LSN)
    at = putLsn(buf, at, lsn)
    at = putBytes(buf, at, OP_POSITION)
    at = putUint(buf, at, op)
    at = putBytes(buf, at, TXIDS)
    at = putUint(buf, at, txid)
    at = putBytes(buf, at, last ? LAST_END : END)
    const line = into.take(at)
    if (scratch === undefined) {
      // Lines of their own: the shared scratch is reused by the next call.
      into.reset()
      return { op, operation, bytes: new Uint8Array(line) }
    }
    return { op, operation, bytes: line }
  }

  #checkPosition(position: ChangePosition): void {
    const { lsn, op, txid } = position
    if (typeof lsn !== 'bigint' || lsn < 0n || lsn > U64_MAX) throw new ChangeEncodingError('invalid_position', `LSN out of range: ${String(lsn)}`)
    if (!Number.isSafeInteger(op) || op < 0) throw new ChangeEncodingError('invalid_position', `invalid op position: ${op}`)
    if (!Number.isInteger(txid) || txid < 0 || txid > MAX_XID) throw new ChangeEncodingError('invalid_position', `xid is not a 32-bit xid: ${txid}`)
  }

  /**
   * The row's key as a JSON string, written from its key values: no key
   * string is built (a concatenation per change, then flattened to be
   * escaped). Each value part is `/"value"` with `/` doubled, `/_` for NULL
   * (rowKeyFromValues); a value past ASCII, or a table without a key, takes
   * the key string.
   */
  #putRowKey(buf: Buffer, at: number, row: Row): number {
    const pk = this.#pk
    if (pk.length === 0) return putJsonString(buf, at, this.#key(row))
    const start = at
    at = putBytes(buf, at, this.#keyPrefixJson)
    for (let k = 0; k < pk.length; k++) {
      const value = row[pk[k]!]
      if (value === null || value === undefined) {
        at = putBytes(buf, at, NULL_PART)
        continue
      }
      at = putBytes(buf, at, PART_OPEN)
      at = putEscaped(buf, at, value, true)
      if (at < 0) return putJsonString(buf, start, this.#key(row))
      at = putBytes(buf, at, PART_CLOSE)
    }
    buf[at] = QUOTE
    return at + 1
  }

  /** Bytes #putRowKey can take: the prefix, and per key value its part's fixed bytes and the value escaped with every unit doubled. */
  #keyBound(row: Row): number {
    if (this.#pk.length === 0) return jsonBound(this.#key(row))
    let n = this.#keyPrefixJson.length + 1
    for (const i of this.#pk) {
      const value = row[i]
      n += PART_OPEN.length + PART_CLOSE.length + (value === null || value === undefined ? 0 : 2 * jsonBound(value))
    }
    return n
  }

  /** Whether two rows have the same key values (the same key: see #key). */
  #sameKeyValues(a: Row, b: Row): boolean {
    if (this.#pk.length === 0) {
      for (let i = 0; i < this.table.columns.length; i++) if ((a[i] ?? null) !== (b[i] ?? null)) return false
      return true
    }
    for (const i of this.#pk) if ((a[i] ?? null) !== (b[i] ?? null)) return false
    return true
  }

  /** `{"name":value,…}` for the part's columns. */
  #object(buf: Buffer, at: number, part: RowPart): number {
    const { row, columns } = part
    buf[at++] = 0x7b // {
    for (let n = 0; n < columns.length; n++) {
      const i = columns[n]!
      const value = row[i]
      if (n > 0) buf[at++] = 0x2c // ,
      at = putBytes(buf, at, this.#names[i]!)
      at = value === null || value === undefined ? putBytes(buf, at, NULL) : putJsonString(buf, at, value)
    }
    buf[at++] = 0x7d // }
    return at
  }

  /** Bytes an object of any of `row`'s columns can take at most. */
  #objectBound(row: Row): number {
    let bytes = this.#namesBytes + 2 * row.length + 2
    for (let i = 0; i < row.length; i++) {
      const value = row[i]
      bytes += value === null || value === undefined ? NULL.length : jsonBound(value)
    }
    return bytes
  }

  #key(row: Row): string {
    // One key column (the common case) without an array of one.
    if (this.#pk.length === 1) return rowKeyFromValue(this.#keyPrefix, row[this.#pk[0]!] ?? null)
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
    // A loop, and the list only when there is something in it: this runs for every row of every change.
    let toast: string[] | undefined
    for (let i = 0; i < tuple.length; i++) {
      if (typeof tuple[i] === 'symbol') (toast ??= []).push(this.table.columns[i] ?? `#${i}`)
    }
    if (toast !== undefined) throw new UnchangedToastError(this.table.schema, this.table.name, toast)
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

