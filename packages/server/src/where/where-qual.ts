import type { Expr } from './expr.js'
import { BOOL } from './sql-type.js'
import { codecFor } from './type-codec.js'

/**
 * What Postgres does to a WHERE clause after constant folding and before
 * running it (`canonicalize_qual` / `find_duplicate_ors` in prepqual.c), so
 * that a row matches here exactly when Postgres returns it, errors included:
 *
 * - within the top-level AND/OR structure a NULL constant counts as FALSE
 *   (equivalent for a WHERE clause), so `(x LIKE y AND NULL) OR z` never
 *   evaluates the LIKE;
 * - OR arms sharing conjuncts are factored: `(A AND B) OR (A AND C)` becomes
 *   `A AND (B OR C)`, and `(A AND B) OR A` becomes just `A`.
 *
 * The result is the same in two-valued WHERE terms; a few NULL results become
 * FALSE. Only the evaluator sees this tree; canonical text and conjunct
 * extraction are unaffected.
 */
export function whereQual(expr: Expr): Expr {
  const result = rewrite(expr)
  return structuralKey(result) === structuralKey(expr) ? expr : result
}

function rewrite(expr: Expr): Expr {
  if (expr.k === 'or') {
    const arms: Expr[] = []
    for (const arg of expr.args) {
      const arm = rewrite(arg)
      if (arm.k === 'const') {
        if (arm.value === true) return arm
        continue
      }
      if (arm.k === 'or') arms.push(...arm.args)
      else arms.push(arm)
    }
    return factorOrs(arms)
  }
  if (expr.k === 'and') {
    const parts: Expr[] = []
    for (const arg of expr.args) {
      const part = rewrite(arg)
      if (part.k === 'const') {
        if (part.value === true) continue
        return FALSE
      }
      if (part.k === 'and') parts.push(...part.args)
      else parts.push(part)
    }
    return and(parts)
  }
  return expr
}

const FALSE: Expr = { k: 'const', type: BOOL, value: false }
const TRUE: Expr = { k: 'const', type: BOOL, value: true }

function and(parts: readonly Expr[]): Expr {
  if (parts.length === 0) return TRUE
  if (parts.length === 1) return parts[0] as Expr
  return { k: 'and', type: BOOL, args: flatten('and', parts) }
}

function or(arms: readonly Expr[]): Expr {
  if (arms.length === 1) return arms[0] as Expr
  return { k: 'or', type: BOOL, args: flatten('or', arms) }
}

function flatten(kind: 'and' | 'or', list: readonly Expr[]): Expr[] {
  return list.flatMap((e) => (e.k === kind ? e.args : [e]))
}

/** `process_duplicate_ors`. */
function factorOrs(arms: readonly Expr[]): Expr {
  if (arms.length === 0) return FALSE
  if (arms.length === 1) return arms[0] as Expr
  const conjuncts = (arm: Expr): readonly Expr[] => (arm.k === 'and' ? arm.args : [arm])
  // The shortest AND arm is the reference: a factor must appear in every arm.
  let reference: readonly Expr[] | undefined
  for (const arm of arms) {
    if (arm.k !== 'and') {
      reference = [arm]
      break
    }
    if (reference === undefined || arm.args.length < reference.length) reference = arm.args
  }
  const keys = arms.map((arm) => new Set(conjuncts(arm).map(structuralKey)))
  const winners: Expr[] = []
  const winnerKeys = new Set<string>()
  for (const candidate of reference ?? []) {
    const key = structuralKey(candidate)
    if (winnerKeys.has(key)) continue
    if (keys.every((set) => set.has(key))) {
      winners.push(candidate)
      winnerKeys.add(key)
    }
  }
  if (winners.length === 0) return or(arms)
  let remaining: Expr[] | undefined = []
  for (const arm of arms) {
    const rest = conjuncts(arm).filter((c) => !winnerKeys.has(structuralKey(c)))
    if (rest.length === 0) {
      // (A AND B) OR A: the other arms add nothing.
      remaining = undefined
      break
    }
    remaining.push(rest.length === 1 ? (rest[0] as Expr) : { k: 'and', type: BOOL, args: rest })
  }
  if (remaining !== undefined) winners.push(or(remaining))
  return and(winners)
}

/** Equal for expressions Postgres's `equal()` would call equal. */
export function structuralKey(expr: Expr): string {
  switch (expr.k) {
    case 'const': {
      if (expr.value === null) return `c:${expr.type.key}:null`
      const format = codecFor(expr.type).format
      return `c:${expr.type.key}:${JSON.stringify(format(expr.value))}`
    }
    case 'column':
      return `col:${JSON.stringify(expr.name)}`
    case 'call':
      return `f:${expr.label}:${expr.type.key}(${expr.args.map(structuralKey).join(',')})`
    case 'and':
    case 'or':
    case 'coalesce':
      return `${expr.k}:${expr.type.key}(${expr.args.map(structuralKey).join(',')})`
    case 'array':
      return `array:${expr.type.key}:${expr.nested}(${expr.elements.map(structuralKey).join(',')})`
    case 'not':
      return `not(${structuralKey(expr.arg)})`
    case 'nulltest':
      return `${expr.negated ? 'notnull' : 'isnull'}(${structuralKey(expr.arg)})`
    case 'booltest':
      return `${expr.test}(${structuralKey(expr.arg)})`
    case 'distinct':
      return `distinct(${structuralKey(expr.left)},${structuralKey(expr.right)})`
    case 'scalararray':
      return `${expr.any ? 'any' : 'all'}:${expr.operator}(${structuralKey(expr.left)},${structuralKey(expr.right)})`
    case 'sublink':
      return `sublink:${expr.dep}(${expr.left.map(structuralKey).join(',')})`
  }
}

