/**
 * The `electric-schema` header (docs/protocol.md §7): a JSON object over the selected
 * columns, sent with every non-live 200. Clients parse values with it, so it
 * must be right: `not_null` on a column that can be null makes the official
 * client throw on the first null it sees.
 *
 * Optional keys are omitted, never `null` or `false`.
 */

export interface ColumnSchema {
  /**
   * `pg_type.typname`: `int4`, `text`, `timestamptz`, an enum or domain name...
   * For an array column, the *element* type (`int8`, not `_int8`) with `dims`.
   */
  readonly type: string
  /** Array dimensions (≥ 1); present only for arrays. */
  readonly dims?: number
  /** 0-based position in the primary key; primary-key columns only. */
  readonly pk_index?: number
  /** Present (as `true`) only for NOT NULL columns, primary-key columns included. */
  readonly not_null?: true
  /** varchar(n): n. */
  readonly max_length?: number
  /** bpchar(n): n (`CHAR` alone is 1); bit(n) / varbit(n): n. */
  readonly length?: number
  /** time, timetz, timestamp, timestamptz, interval: fractional-second digits; numeric(p, s): p. */
  readonly precision?: number
  /** numeric(p, s): s. */
  readonly scale?: number
  /** interval field restriction: `YEAR`, `DAY TO SECOND`, ... */
  readonly fields?: IntervalFields
  /** Any other type modifier above -1, raw. */
  readonly type_mod?: number
}

export type IntervalFields =
  | 'YEAR'
  | 'MONTH'
  | 'DAY'
  | 'HOUR'
  | 'MINUTE'
  | 'SECOND'
  | 'YEAR TO MONTH'
  | 'DAY TO HOUR'
  | 'DAY TO MINUTE'
  | 'DAY TO SECOND'
  | 'HOUR TO MINUTE'
  | 'HOUR TO SECOND'
  | 'MINUTE TO SECOND'

/** Column name → column info; serialise with `JSON.stringify` for the header. */
export interface ShapeSchema {
  readonly [column: string]: ColumnSchema
}
