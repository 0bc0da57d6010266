import type { SqlType } from './sql-type.js'

/**
 * A type-checked where clause: the tree the binder builds from Postgres's parse
 * tree, with every operator, function and coercion resolved to a pure JS
 * function. Values are the per-type representations of values/; `null` is SQL
 * NULL. Trees are immutable once built.
 */
export type Expr =
  | ConstExpr
  | ColumnExpr
  | CallExpr
  | BoolExpr
  | NotExpr
  | NullTestExpr
  | BoolTestExpr
  | DistinctExpr
  | ScalarArrayExpr
  | CoalesceExpr
  | ArrayExpr
  | SublinkExpr

export interface ConstExpr {
  readonly k: 'const'
  readonly type: SqlType
  readonly value: unknown
  /** Set on constants that came from `$n`, so errors about them name the params field. */
  readonly param?: number
  /** 0-based offset in `SELECT 1 WHERE <clause>`, for messages. */
  readonly location?: number
}

export interface ColumnExpr {
  readonly k: 'column'
  readonly type: SqlType
  readonly name: string
}

/**
 * A strict function call: an operator, a function or a type coercion. Strict
 * means a NULL argument makes the result NULL without calling `fn`.
 */
export interface CallExpr {
  readonly k: 'call'
  readonly type: SqlType
  readonly fn: (...args: unknown[]) => unknown
  readonly args: readonly Expr[]
  /** What this is, for domains and debugging: `=`, `lower`, `::numeric`. */
  readonly label: string
  /** Operators only: the resolved operator name (`=`, `@>`, …). */
  readonly operator?: string
  /**
   * Postgres marks the function STABLE (it reads the session's TimeZone or
   * DateStyle): its planner does not fold it, so neither do we, and an error it
   * raises surfaces per row rather than when the clause is compiled.
   */
  readonly stable?: boolean
}

export interface BoolExpr {
  readonly k: 'and' | 'or'
  readonly type: SqlType
  readonly args: readonly Expr[]
}

export interface NotExpr {
  readonly k: 'not'
  readonly type: SqlType
  readonly arg: Expr
}

export interface NullTestExpr {
  readonly k: 'nulltest'
  readonly type: SqlType
  readonly negated: boolean
  readonly arg: Expr
}

export type BoolTest = 'IS_TRUE' | 'IS_NOT_TRUE' | 'IS_FALSE' | 'IS_NOT_FALSE' | 'IS_UNKNOWN' | 'IS_NOT_UNKNOWN'

export interface BoolTestExpr {
  readonly k: 'booltest'
  readonly type: SqlType
  readonly test: BoolTest
  readonly arg: Expr
}

/** `a IS DISTINCT FROM b` (NOT around it for IS NOT DISTINCT FROM). */
export interface DistinctExpr {
  readonly k: 'distinct'
  readonly type: SqlType
  readonly stable?: boolean
  readonly equals: (a: unknown, b: unknown) => unknown
  readonly left: Expr
  readonly right: Expr
}

/** `left op ANY (right)` / `left op ALL (right)`; IN lists become this. */
export interface ScalarArrayExpr {
  readonly k: 'scalararray'
  readonly type: SqlType
  readonly stable?: boolean
  readonly any: boolean
  readonly operator: string
  readonly fn: (a: unknown, b: unknown) => unknown
  readonly left: Expr
  readonly right: Expr
}

export interface CoalesceExpr {
  readonly k: 'coalesce'
  readonly type: SqlType
  readonly args: readonly Expr[]
}

/** `ARRAY[...]`; `nested` when its elements are themselves arrays (ARRAY[[1,2],[3,4]]). */
export interface ArrayExpr {
  readonly k: 'array'
  readonly type: SqlType
  readonly elements: readonly Expr[]
  readonly nested: boolean
}

/**
 * `left IN (SELECT … FROM other …)`: membership of the left-side columns' values
 * in a subquery's current result set. The set is not part of the tree: the
 * evaluator reads it from the row (`SUBQUERY_VIEWS`, subquery-view.ts), so one
 * compiled clause serves any state of the inner tables.
 */
export interface SublinkExpr {
  readonly k: 'sublink'
  readonly type: SqlType
  /** Index of the subquery among the clause's dependencies. */
  readonly dep: number
  readonly left: readonly ColumnExpr[]
}

/** Names of the columns an expression reads. */
export function columnsOf(expr: Expr, into: Set<string> = new Set()): Set<string> {
  switch (expr.k) {
    case 'const':
      break
    case 'column':
      into.add(expr.name)
      break
    case 'call':
    case 'and':
    case 'or':
    case 'coalesce':
      for (const a of expr.args) columnsOf(a, into)
      break
    case 'array':
      for (const a of expr.elements) columnsOf(a, into)
      break
    case 'not':
    case 'nulltest':
    case 'booltest':
      columnsOf(expr.arg, into)
      break
    case 'distinct':
    case 'scalararray':
      columnsOf(expr.left, into)
      columnsOf(expr.right, into)
      break
    case 'sublink':
      for (const a of expr.left) columnsOf(a, into)
      break
  }
  return into
}

/** Whether the expression calls a STABLE function anywhere (see {@link CallExpr.stable}). */
export function hasStable(expr: Expr): boolean {
  switch (expr.k) {
    case 'const':
    case 'column':
    case 'sublink':
      return false
    case 'call':
      return expr.stable === true || expr.args.some(hasStable)
    case 'and':
    case 'or':
    case 'coalesce':
      return expr.args.some(hasStable)
    case 'array':
      return expr.elements.some(hasStable)
    case 'not':
    case 'nulltest':
    case 'booltest':
      return hasStable(expr.arg)
    case 'distinct':
    case 'scalararray':
      return expr.stable === true || hasStable(expr.left) || hasStable(expr.right)
  }
}

export function isConst(expr: Expr): expr is ConstExpr {
  return expr.k === 'const'
}
