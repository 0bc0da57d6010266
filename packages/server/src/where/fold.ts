import { compileExpr } from './compile.js'
import type { Expr } from './expr.js'
import { columnsOf, hasStable } from './expr.js'
import { BOOL } from './sql-type.js'
import { EvaluationError } from './where-error.js'

/**
 * Constant folding as Postgres's planner does it (eval_const_expressions), so
 * that a clause is accepted or refused exactly when Postgres would plan or
 * refuse it, and rows see the same errors:
 *
 * - a subexpression without column references is evaluated once, here;
 * - a strict call with a NULL constant argument is NULL, even if other
 *   arguments read columns (`NULL + 1/x` never divides);
 * - AND/OR drop TRUE/FALSE constants and stop at a deciding one, left to right;
 * - COALESCE drops NULL constants and stops at the first non-NULL constant.
 *
 * Folding never throws: a constant subexpression that fails to evaluate is
 * left in place, and {@link constantError} reports it after binding, unless an
 * earlier deciding constant made Postgres skip it too.
 */
export function foldExpr(expr: Expr): Expr {
  switch (expr.k) {
    case 'const':
    case 'column':
      return expr
    case 'call': {
      if (expr.args.some(containsFailed)) return expr
      if (expr.args.some(isNullConst)) return { k: 'const', type: expr.type, value: null }
      return expr.stable !== true && expr.args.every(isConstExpr) ? evaluate(expr) : expr
    }
    case 'and':
    case 'or':
      return foldBool(expr.k, expr.args)
    case 'coalesce': {
      const args: Expr[] = []
      for (const arg of expr.args) {
        if (containsFailed(arg)) {
          args.push(arg)
          continue
        }
        if (arg.k === 'const') {
          if (arg.value === null) continue
          if (args.length === 0) return arg
          args.push(arg)
          break
        }
        args.push(arg)
      }
      if (args.length === 0) return { k: 'const', type: expr.type, value: null }
      if (args.length === 1 && !containsFailed(args[0] as Expr)) return args[0] as Expr
      return { ...expr, args }
    }
    case 'not':
      return expr.arg.k === 'const' ? evaluate(expr) : negate(expr.arg)
    case 'nulltest':
    case 'booltest':
      return expr.arg.k === 'const' ? evaluate(expr) : expr
    case 'distinct':
    case 'scalararray':
      return expr.stable !== true && expr.left.k === 'const' && expr.right.k === 'const' ? evaluate(expr) : expr
    case 'array':
      return expr.elements.every(isConstExpr) ? evaluate(expr) : expr
    case 'sublink':
      return expr
  }
}

function isConstExpr(expr: Expr): boolean {
  return expr.k === 'const'
}

function isNullConst(expr: Expr): boolean {
  return expr.k === 'const' && expr.value === null
}

/** A subexpression without columns that did not fold, though Postgres would have: evaluating it raised an error. */
function failed(expr: Expr): boolean {
  return expr.k !== 'const' && columnsOf(expr).size === 0 && !hasStable(expr)
}

/**
 * Whether Postgres would raise an error while simplifying this subexpression:
 * it simplifies every child before its parent, so a failing constant anywhere
 * inside counts, unless an AND/OR/COALESCE had already stopped before it (then
 * it is no longer in the tree).
 */
function containsFailed(expr: Expr): boolean {
  return failed(expr) || children(expr).some(containsFailed)
}

function evaluate(expr: Expr): Expr {
  try {
    return { k: 'const', type: expr.type, value: compileExpr(expr)({}) }
  } catch (error) {
    if (error instanceof EvaluationError) return expr
    throw error
  }
}

function foldBool(kind: 'and' | 'or', input: readonly Expr[]): Expr {
  const deciding = kind === 'or'
  const args: Expr[] = []
  let sawNull = false
  const pending = [...input]
  while (pending.length > 0) {
    const arg = pending.shift() as Expr
    // Nested ANDs in an AND (ORs in an OR) are flattened first, as Postgres does.
    if (arg.k === kind) {
      pending.unshift(...arg.args)
      continue
    }
    if (containsFailed(arg)) {
      // Postgres raises this error here unless a deciding constant came before it.
      args.push(arg, ...pending)
      break
    }
    if (arg.k === 'const') {
      if (arg.value === null) sawNull = true
      else if (arg.value === deciding) return { k: 'const', type: BOOL, value: deciding }
      continue
    }
    args.push(arg)
  }
  if (sawNull) args.push({ k: 'const', type: BOOL, value: null })
  if (args.length === 0) return { k: 'const', type: BOOL, value: !deciding }
  if (args.length === 1) return args[0] as Expr
  return { k: kind, type: BOOL, args }
}

/** Operators and their negators (`pg_operator.oprnegate`) among those we implement. */
const NEGATORS: Readonly<Record<string, string>> = {
  '=': '<>',
  '<>': '=',
  '<': '>=',
  '>=': '<',
  '>': '<=',
  '<=': '>',
  '~~': '!~~',
  '!~~': '~~',
  '~~*': '!~~*',
  '!~~*': '~~*',
}

const NEGATED_TESTS = {
  IS_TRUE: 'IS_NOT_TRUE',
  IS_NOT_TRUE: 'IS_TRUE',
  IS_FALSE: 'IS_NOT_FALSE',
  IS_NOT_FALSE: 'IS_FALSE',
  IS_UNKNOWN: 'IS_NOT_UNKNOWN',
  IS_NOT_UNKNOWN: 'IS_UNKNOWN',
} as const

/**
 * Postgres's `negate_clause`, which its planner applies to every NOT: the NOT
 * goes through AND/OR by De Morgan, into operators that have a negator
 * (NOT a < b is a >= b), null tests and boolean tests. The value is the same in
 * three-valued logic; what changes is the shape later WHERE simplifications
 * (and the router's conjunct extraction) see.
 */
function negate(expr: Expr): Expr {
  switch (expr.k) {
    case 'const':
      return evaluate({ k: 'not', type: BOOL, arg: expr })
    case 'call': {
      const negator = expr.operator === undefined ? undefined : NEGATORS[expr.operator]
      if (negator === undefined || expr.args.length !== 2) break
      const fn = expr.fn
      return { ...expr, operator: negator, label: negator, fn: (a: unknown, b: unknown) => !fn(a, b) }
    }
    case 'scalararray': {
      const negator = NEGATORS[expr.operator]
      if (negator === undefined) break
      const fn = expr.fn
      return { ...expr, any: !expr.any, operator: negator, fn: (a: unknown, b: unknown) => !fn(a, b) }
    }
    case 'and':
    case 'or':
      return foldBool(expr.k === 'and' ? 'or' : 'and', expr.args.map(negate))
    case 'not':
      return expr.arg
    case 'nulltest':
      return { ...expr, negated: !expr.negated }
    case 'booltest':
      return { ...expr, test: NEGATED_TESTS[expr.test] }
    default:
      break
  }
  return { k: 'not', type: BOOL, arg: expr }
}

/**
 * The error Postgres would raise while planning: the first constant
 * subexpression (depth first, left to right) that fails to evaluate.
 */
export function constantError(expr: Expr): EvaluationError | undefined {
  if (expr.k === 'const') return undefined
  if (failed(expr)) {
    for (const child of children(expr)) {
      const inner = constantError(child)
      if (inner !== undefined) return inner
    }
    try {
      compileExpr(expr)({})
    } catch (error) {
      if (error instanceof EvaluationError) return error
      throw error
    }
    return undefined
  }
  for (const child of children(expr)) {
    const inner = constantError(child)
    if (inner !== undefined) return inner
  }
  return undefined
}

function children(expr: Expr): readonly Expr[] {
  switch (expr.k) {
    case 'const':
    case 'column':
      return []
    case 'call':
    case 'and':
    case 'or':
    case 'coalesce':
      return expr.args
    case 'array':
      return expr.elements
    case 'not':
    case 'nulltest':
    case 'booltest':
      return [expr.arg]
    case 'distinct':
    case 'scalararray':
      return [expr.left, expr.right]
    case 'sublink':
      return expr.left
  }
}
