import type { RowValues } from '@sluice/protocol'
import { compileExpr } from './compile.js'
import type { Expr } from './expr.js'
import { columnsOf } from './expr.js'
import type { SqlType } from './sql-type.js'
import { codecFor } from './type-codec.js'
import type { ArrayValue } from './values/array.js'

/**
 * The parts of a clause the shape router can look up in a hash index instead
 * of evaluating: top-level conjuncts of the forms `col = const`, `col IN
 * (consts)`, `const = ANY(col)`, `col @> const` (and a bare boolean column or
 * its NOT). "col" may be any expression of one column (`lower(email)`), since
 * it is computed once per change and domain.
 *
 * Keys are strings equal exactly when Postgres's `=` for the compared type
 * says equal: 7 and 007 give "7", 1.50 and 1.5 give "1.5", '1 mon' and
 * '30 days' the same interval key, bpchar ignores trailing spaces.
 */
export interface IndexableConjunct {
  /**
   * - `equals`: the conjunct is true iff the row's key is one of `keys`
   *   (`col = c`, `col IN (...)`, `flag`, `NOT flag`);
   * - `any`: true iff `keys[0]` is among the row's element keys (`c = ANY(col)`);
   * - `contains`: true iff every key of `keys` is among the row's element keys
   *   (`col @> '{...}'`); `keys` is never empty.
   */
  readonly kind: 'equals' | 'any' | 'contains'
  /** The one column the conjunct reads. */
  readonly column: string
  /**
   * Identifies the key function: conjuncts (of any shape on the table) with the
   * same domain compute the same keys from a row, so an index is kept per domain.
   * Domains and keys are stored in shape metas (route-summary.ts): a change to
   * how either is written raises ROUTE_SUMMARY_VERSION.
   */
  readonly domain: string
  readonly keys: readonly string[]
  /** The row's key (`equals`) or its array's element keys (`any`, `contains`); empty for NULL or errors. */
  rowKeys(row: RowValues): readonly string[]
}

/** Types whose `=` across them agrees with comparing their keys (int4 = int8, float4 = float8, ...). */
function keyClass(type: SqlType): string {
  if (type.kind === 'scalar') {
    switch (type.name) {
      case 'int2':
      case 'int4':
      case 'int8':
        return 'int'
      case 'float4':
      case 'float8':
        return 'float'
      case 'timestamp':
      case 'timestamptz':
        return 'timestamp'
      case 'varchar':
        return 'text'
    }
  }
  if (type.kind === 'array') return `${keyClass(type.element)}[]`
  return type.key
}

/** A deterministic rendering of an expression, for domains. */
function signature(expr: Expr): string {
  switch (expr.k) {
    case 'column':
      return JSON.stringify(expr.name)
    case 'const':
      return expr.value === null ? 'NULL' : `${expr.type.key}:${JSON.stringify(codecFor(expr.type).format(expr.value))}`
    case 'call':
      return `${expr.label}(${expr.args.map(signature).join(',')})`
    default:
      return expr.k
  }
}

/** A column-side expression the router can compute alone: one column, plain calls only. */
function singleColumn(expr: Expr): string | undefined {
  const columns = columnsOf(expr)
  if (columns.size !== 1) return undefined
  const plain = (e: Expr): boolean => e.k === 'column' || e.k === 'const' || (e.k === 'call' && e.args.every(plain))
  return plain(expr) ? [...columns][0] : undefined
}

function keyOf(type: SqlType): ((value: unknown) => string) | undefined {
  return codecFor(type).key
}

function makeConjunct(
  kind: IndexableConjunct['kind'],
  side: Expr,
  column: string,
  comparedType: SqlType,
  keys: readonly string[],
): IndexableConjunct | undefined {
  const elementType = kind === 'equals' ? comparedType : comparedType.kind === 'array' ? comparedType.element : undefined
  if (elementType === undefined) return undefined
  const key = keyOf(elementType)
  if (key === undefined) return undefined
  const domain = interned(`${kind === 'equals' ? 'value' : 'elements'}:${keyClass(elementType)}:${signature(side)}`)
  return new Conjunct(kind, column, domain, keys, side, directKey(side, elementType), key)
}

/**
 * Domains (and the column names of recorded routes, route-summary.ts) by
 * their text: every clause of one template names the same domain, and a
 * restart restores 100k clauses. Holds one string per distinct text ever
 * made, which a process has few of; bounded, as a hostile mix of clauses
 * could make any number.
 */
const texts = new Map<string, string>()

export function interned(text: string): string {
  const known = texts.get(text)
  if (known !== undefined) return known
  if (texts.size < 10_000) texts.set(text, text)
  return text
}

/**
 * A conjunct whose `rowKeys` is built on its first row: the router computes a
 * domain's row keys through the first conjunct filed under it, so the other
 * clauses' (100k of them after a restart) are never built at all.
 */
class Conjunct implements IndexableConjunct {
  private keysOfRow: ((row: RowValues) => readonly string[]) | undefined = undefined

  constructor(
    readonly kind: IndexableConjunct['kind'],
    readonly column: string,
    readonly domain: string,
    readonly keys: readonly string[],
    private readonly side: Expr,
    private readonly direct: 'text' | 'int' | undefined,
    private readonly key: (value: unknown) => string,
  ) {}

  rowKeys(row: RowValues): readonly string[] {
    this.keysOfRow ??= rowKeysOf(this.kind, this.column, this.direct, compileExpr(this.side), this.key)
    return this.keysOfRow(row)
  }
}

/** The conjunct's `rowKeys`: the row's key (`equals`) or its array's element keys; empty for NULL or errors. */
function rowKeysOf(
  kind: IndexableConjunct['kind'],
  column: string,
  direct: 'text' | 'int' | undefined,
  evaluate: (row: RowValues) => unknown,
  key: (value: unknown) => string,
): (row: RowValues) => readonly string[] {
  if (kind !== 'equals') {
    return (row) => {
      try {
        const value = evaluate(row) as ArrayValue<unknown> | null
        if (value === null) return []
        const out: string[] = []
        for (const item of value.items) if (item !== null) out.push(key(item))
        return out
      } catch {
        return []
      }
    }
  }
  const evaluated = (row: RowValues): readonly string[] => {
    try {
      const value = evaluate(row)
      return value === null ? [] : [key(value)]
    } catch {
      return []
    }
  }
  if (direct === 'text') {
    return (row) => {
      const text = row[column]
      return typeof text === 'string' ? [text] : evaluated(row)
    }
  }
  if (direct === 'int') {
    return (row) => {
      const text = row[column]
      return typeof text === 'string' && isCanonicalInt(text) ? [text] : evaluated(row)
    }
  }
  return evaluated
}

/**
 * A bare column whose Postgres text output is already its key: text and
 * varchar (the key is the string), and integers, whose output (digits, a `-`,
 * no leading zeros) is what the key writes back. For those the router takes
 * the row's text as it comes instead of parsing it and printing it again: at
 * 100k shapes on `k = const` that round trip was a new string per change for
 * the index lookup.
 */
function directKey(side: Expr, compared: SqlType): 'text' | 'int' | undefined {
  if (side.k !== 'column') return undefined
  const group = directGroup(side.type)
  return group !== undefined && group === directGroup(compared) ? group : undefined
}

function directGroup(type: SqlType): 'text' | 'int' | undefined {
  if (type.kind !== 'scalar') return undefined
  switch (type.name) {
    case 'text':
    case 'varchar':
      return 'text'
    case 'int2':
    case 'int4':
    case 'int8':
      return 'int'
    default:
      return undefined
  }
}

/** Integer text exactly as Postgres writes it; anything else (`007`, `+7`, ` 7`, `-0`) goes through parsing. */
export function isCanonicalInt(text: string): boolean {
  const n = text.length
  let i = n > 0 && text.charCodeAt(0) === 45 ? 1 : 0
  if (i === n) return false
  if (text.charCodeAt(i) === 48) return n === 1
  for (; i < n; i++) {
    const c = text.charCodeAt(i)
    if (c < 48 || c > 57) return false
  }
  return true
}

function arrayKeys(value: unknown, type: SqlType): string[] | undefined {
  if (type.kind !== 'array') return undefined
  const key = keyOf(type.element)
  if (key === undefined) return undefined
  const keys = new Set<string>()
  for (const item of (value as ArrayValue<unknown>).items) if (item !== null) keys.add(key(item))
  return [...keys]
}

function conjunctOf(expr: Expr): IndexableConjunct | undefined {
  if (expr.k === 'column' && expr.type.kind === 'scalar' && expr.type.name === 'bool') {
    return makeConjunct('equals', expr, expr.name, expr.type, ['t'])
  }
  if (expr.k === 'not' && expr.arg.k === 'column') {
    return makeConjunct('equals', expr.arg, expr.arg.name, expr.arg.type, ['f'])
  }
  if (expr.k === 'call' && expr.operator === '=' && expr.args.length === 2) {
    const [a, b] = expr.args as [Expr, Expr]
    for (const [side, other] of [
      [a, b],
      [b, a],
    ] as const) {
      const column = singleColumn(side)
      if (column === undefined || other.k !== 'const' || other.value === null) continue
      if (keyClass(side.type) !== keyClass(other.type)) return undefined
      const key = keyOf(other.type)
      if (key === undefined) return undefined
      return makeConjunct('equals', side, column, side.type, [key(other.value)])
    }
    return undefined
  }
  if (expr.k === 'scalararray' && expr.any && expr.operator === '=') {
    const { left, right } = expr
    const leftColumn = singleColumn(left)
    if (leftColumn !== undefined && right.k === 'const' && right.value !== null && right.type.kind === 'array') {
      if (keyClass(left.type) !== keyClass(right.type.element)) return undefined
      const keys = arrayKeys(right.value, right.type)
      return keys === undefined ? undefined : makeConjunct('equals', left, leftColumn, left.type, keys)
    }
    const rightColumn = singleColumn(right)
    if (rightColumn !== undefined && left.k === 'const' && left.value !== null && right.type.kind === 'array') {
      if (keyClass(left.type) !== keyClass(right.type.element)) return undefined
      const key = keyOf(left.type)
      return key === undefined ? undefined : makeConjunct('any', right, rightColumn, right.type, [key(left.value)])
    }
    return undefined
  }
  if (expr.k === 'call' && (expr.operator === '@>' || expr.operator === '<@') && expr.args.length === 2) {
    const [a, b] = expr.args as [Expr, Expr]
    const [container, contained] = expr.operator === '@>' ? [a, b] : [b, a]
    const column = singleColumn(container)
    if (column === undefined || contained.k !== 'const' || contained.value === null) return undefined
    const array = contained.value as ArrayValue<unknown>
    // A NULL element is never contained: the conjunct is always false, which an index cannot express.
    if (array.items.length === 0 || array.items.includes(null)) return undefined
    const keys = arrayKeys(array, contained.type)
    return keys === undefined ? undefined : makeConjunct('contains', container, column, container.type, keys)
  }
  return undefined
}

/** Indexable conjuncts of the clause's top-level AND (the clause itself when it is not an AND). */
export function indexableConjuncts(expr: Expr): IndexableConjunct[] {
  const parts = expr.k === 'and' ? expr.args : [expr]
  const out: IndexableConjunct[] = []
  for (const part of parts) {
    const conjunct = conjunctOf(part)
    if (conjunct !== undefined) out.push(conjunct)
  }
  // A copy of its length: pushing grew the array to room for 17, and a compiled clause keeps it for the shape's life.
  return out.slice()
}
