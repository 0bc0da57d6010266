import type { RowValues } from '@sluice/protocol'
import type { Expr } from './expr.js'
import { codecFor } from './type-codec.js'
import type { ArrayValue } from './values/array.js'
import { EMPTY_ARRAY } from './values/array.js'
import { EvaluationError } from './where-error.js'
import { viewOf } from './subquery-view.js'

/**
 * Turns a bound expression into a tree of closures over a row of Postgres text
 * values. Semantics follow Postgres's executor: strict calls yield NULL on a
 * NULL argument without being called; AND stops at the first FALSE and OR at
 * the first TRUE (evaluating left to right, so an error after a deciding
 * argument is never raised, as in Postgres); COALESCE stops at the first
 * non-NULL argument.
 */
export type Evaluator = (row: RowValues) => unknown

export function compileExpr(expr: Expr): Evaluator {
  switch (expr.k) {
    case 'const': {
      const value = expr.value
      return () => value
    }
    case 'column': {
      const name = expr.name
      const parse = codecFor(expr.type).parseOutput
      return (row) => {
        const text = row[name]
        if (text === undefined) {
          throw new EvaluationError('missing_value', `the row has no value for column "${name}"`)
        }
        return text === null ? null : parse(text)
      }
    }
    case 'call':
      return compileCall(expr.fn, expr.args.map(compileExpr))
    case 'and': {
      const args = expr.args.map(compileExpr)
      return (row) => {
        let sawNull = false
        for (const arg of args) {
          const v = arg(row)
          if (v === false) return false
          if (v === null) sawNull = true
        }
        return sawNull ? null : true
      }
    }
    case 'or': {
      const args = expr.args.map(compileExpr)
      return (row) => {
        let sawNull = false
        for (const arg of args) {
          const v = arg(row)
          if (v === true) return true
          if (v === null) sawNull = true
        }
        return sawNull ? null : false
      }
    }
    case 'not': {
      const arg = compileExpr(expr.arg)
      return (row) => {
        const v = arg(row)
        return v === null ? null : !v
      }
    }
    case 'nulltest': {
      const arg = compileExpr(expr.arg)
      return expr.negated ? (row) => arg(row) !== null : (row) => arg(row) === null
    }
    case 'booltest': {
      const arg = compileExpr(expr.arg)
      switch (expr.test) {
        case 'IS_TRUE':
          return (row) => arg(row) === true
        case 'IS_NOT_TRUE':
          return (row) => arg(row) !== true
        case 'IS_FALSE':
          return (row) => arg(row) === false
        case 'IS_NOT_FALSE':
          return (row) => arg(row) !== false
        case 'IS_UNKNOWN':
          return (row) => arg(row) === null
        case 'IS_NOT_UNKNOWN':
          return (row) => arg(row) !== null
      }
      break
    }
    case 'distinct': {
      const left = compileExpr(expr.left)
      const right = compileExpr(expr.right)
      const equals = expr.equals
      return (row) => {
        const a = left(row)
        const b = right(row)
        if (a === null || b === null) return a !== b
        return !equals(a, b)
      }
    }
    case 'scalararray': {
      const hashed = hashedMembership(expr)
      if (hashed !== undefined) return hashed
      const left = compileExpr(expr.left)
      const right = compileExpr(expr.right)
      const fn = expr.fn
      const any = expr.any
      return (row) => {
        const a = left(row)
        const array = right(row) as ArrayValue<unknown> | null
        if (array === null) return null
        const items = array.items
        if (items.length === 0) return !any
        if (a === null) return null
        let sawNull = false
        for (const item of items) {
          if (item === null) {
            sawNull = true
            continue
          }
          const r = fn(a, item)
          if (r === null) sawNull = true
          else if (r === any) return any
        }
        return sawNull ? null : !any
      }
    }
    case 'coalesce': {
      const args = expr.args.map(compileExpr)
      return (row) => {
        for (const arg of args) {
          const v = arg(row)
          if (v !== null) return v
        }
        return null
      }
    }
    case 'array': {
      const elements = expr.elements.map(compileExpr)
      if (!expr.nested) {
        return (row) => {
          const items = elements.map((e) => e(row))
          return items.length === 0 ? EMPTY_ARRAY : { dims: [items.length], lbounds: [1], items }
        }
      }
      return (row) => nestArrays(elements.map((e) => e(row) as ArrayValue<unknown> | null))
    }
    case 'sublink': {
      const left = expr.left.map(compileExpr)
      const dep = expr.dep
      return (row) => viewOf(row, dep).test(left.map((e) => e(row)))
    }
  }
  throw new Error('unreachable')
}

/**
 * `x = ANY(const)` / `x <> ALL(const)` (IN and NOT IN lists) as a hash lookup
 * when the array is constant and both sides have the same type, so a long IN
 * list costs O(1) per row. Same results as the loop: NULL when there is no
 * match but the array holds a NULL.
 */
function hashedMembership(expr: Extract<Expr, { k: 'scalararray' }>): Evaluator | undefined {
  const { right, left } = expr
  const isIn = expr.operator === '=' && expr.any
  const isNotIn = expr.operator === '<>' && !expr.any
  if ((!isIn && !isNotIn) || right.k !== 'const' || right.value === null || right.type.kind !== 'array') return undefined
  if (left.type.key !== right.type.element.key) return undefined
  const key = codecFor(left.type).key
  const items = (right.value as ArrayValue<unknown>).items
  if (key === undefined || items.length < 8) return undefined
  const keys = new Set<string>()
  let hasNull = false
  for (const item of items) {
    if (item === null) hasNull = true
    else keys.add(key(item))
  }
  const evaluateLeft = compileExpr(left)
  return (row) => {
    const value = evaluateLeft(row)
    if (value === null) return null
    if (keys.has(key(value))) return isIn
    return hasNull ? null : !isIn
  }
}

function compileCall(fn: (...args: unknown[]) => unknown, args: readonly Evaluator[]): Evaluator {
  if (args.length === 1) {
    const [a] = args as [Evaluator]
    return (row) => {
      const x = a(row)
      return x === null ? null : fn(x)
    }
  }
  if (args.length === 2) {
    const [a, b] = args as [Evaluator, Evaluator]
    // Every argument is evaluated before the NULL check, as Postgres does (so errors surface alike).
    return (row) => {
      const x = a(row)
      const y = b(row)
      return x === null || y === null ? null : fn(x, y)
    }
  }
  return (row) => {
    const values = args.map((arg) => arg(row))
    return values.includes(null) ? null : fn(...values)
  }
}

/** ARRAY[ARRAY[...], ...]: sub-arrays must agree in shape; NULL and empty ones are skipped, as in Postgres. */
function nestArrays(subs: readonly (ArrayValue<unknown> | null)[]): ArrayValue<unknown> {
  let shape: readonly number[] | undefined
  const items: unknown[] = []
  let count = 0
  for (const sub of subs) {
    if (sub === null || sub.dims.length === 0) continue
    if (shape === undefined) shape = sub.dims
    else if (shape.length !== sub.dims.length || shape.some((d, i) => d !== sub.dims[i])) {
      throw new EvaluationError(
        'array_subscript_error',
        'multidimensional arrays must have array expressions with matching dimensions',
      )
    }
    items.push(...sub.items)
    count++
  }
  if (shape === undefined) return EMPTY_ARRAY
  if (shape.length >= 6) {
    throw new EvaluationError('array_subscript_error', 'number of array dimensions (7) exceeds the maximum allowed (6)')
  }
  return { dims: [count, ...shape], lbounds: [1, ...shape.map(() => 1)], items }
}
