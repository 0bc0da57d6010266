import { type Node, fail, nodeOf } from './parse-node.js'

/*
 * A clause in disjunctive normal form, as subquery shapes' row headers are
 * defined (docs/protocol.md, "Subquery shapes"): NOT pushed to the leaves by
 * De Morgan (double negations cancel), OR concatenating its arguments'
 * disjuncts, AND their cross product (the first argument's disjuncts
 * outermost, literals left to right). Every literal of every disjunct is a
 * position, numbered from 0 disjunct by disjunct; the same atom in two
 * disjuncts is two positions. Kleene's three-valued logic keeps De Morgan and
 * distribution, so the clause is TRUE exactly when some disjunct has every
 * literal TRUE.
 */

/** Postgres's Kleene logic has no limit, but the headers grow with the product: Electric's cap. */
export const MAX_DISJUNCTS = 100

export interface Literal {
  /** The atom's raw parse tree: anything but AND, OR and NOT. */
  readonly atom: Node
  readonly negated: boolean
}

/** Disjuncts of literals (before numbering). */
export function toDnf(root: unknown): Literal[][] {
  const disjuncts = dnf(root, false)
  if (disjuncts.length > MAX_DISJUNCTS) {
    fail('limit_exceeded', `WHERE clause too complex for DNF decomposition (${disjuncts.length} disjuncts exceeds limit of ${MAX_DISJUNCTS})`)
  }
  return disjuncts
}

function dnf(raw: unknown, negated: boolean): Literal[][] {
  const [tag, node] = nodeOf(raw)
  if (tag === 'BoolExpr') {
    const args = node['args'] as unknown[]
    const op = node['boolop']
    if (op === 'NOT_EXPR') return dnf(args[0], !negated)
    // Under an odd number of NOTs, AND becomes OR and OR becomes AND.
    const isOr = (op === 'OR_EXPR') !== negated
    if (isOr) return args.flatMap((a) => dnf(a, negated))
    let product: Literal[][] = [[]]
    for (const arg of args) {
      const next: Literal[][] = []
      const parts = dnf(arg, negated)
      for (const left of product) for (const right of parts) next.push([...left, ...right])
      product = next
      // Bounded while it grows: a clause of many ANDed ORs must not build an exponential list first.
      if (product.length > MAX_DISJUNCTS) {
        fail('limit_exceeded', `WHERE clause too complex for DNF decomposition (more than ${MAX_DISJUNCTS} disjuncts)`)
      }
    }
    return product
  }
  return [[{ atom: { [tag]: node }, negated }]]
}
