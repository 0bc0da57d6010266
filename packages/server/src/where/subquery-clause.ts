import type { RowValues } from '@sluice/protocol'
import { Binder, type BindContext } from './bind.js'
import { compileExpr } from './compile.js'
import { toDnf } from './dnf.js'
import type { ColumnExpr, Expr } from './expr.js'
import { fail, type Node } from './parse-node.js'
import type { RawNode } from './parse-clause.js'
import { BOOL, displayName, type SqlType } from './sql-type.js'
import { findSublinks, sublinkForm } from './sublink-form.js'
import { codecFor } from './type-codec.js'
import { quoteIdent } from './type-names.js'
import type { WhereClause } from './where-clause.js'

/*
 * The parts of a where clause with subqueries (`col IN (SELECT …)`) that its
 * shape needs beyond the evaluator: the subqueries themselves (its
 * dependencies, each an inner table, selected columns and an inner clause
 * compiled like any other) and the clause's DNF positions, which the rows'
 * `tags` and `active_conditions` headers are defined by.
 */

/** A subquery's table and clause, compiled: what the shape keeps a view of. */
export interface SubqueryDependency {
  readonly schema: string
  readonly table: string
  /** Selected columns, in select-list order. */
  readonly select: readonly string[]
  readonly types: readonly SqlType[]
  /** The inner clause, compiled against the inner table (it may have subqueries of its own). */
  readonly where: WhereClause | undefined
  /** `SELECT "x" FROM "s"."t" [WHERE …]`: canonical, valid SQL with the clause's `$n`. */
  readonly sql: string
  /** Polarity: whether the dependency stands under an odd number of NOTs (one polarity per dependency). */
  readonly negated: boolean
}

/** What a dependency's view is maintained with: the inner clause's verdict on an inner row, and its own subqueries. */
export interface SubqueryInnerClause {
  readonly canonical: string
  readonly columns: readonly string[]
  readonly subqueries?: SubqueryPlan | undefined
  matches(row: RowValues): boolean
}

/** One literal of the DNF. */
export interface SubqueryPosition {
  readonly negated: boolean
  /** The dependency of a subquery position; undefined for a row predicate. */
  readonly dep: number | undefined
  /** A subquery position's left-side (outer) columns. */
  readonly left: readonly string[]
  /** The atom as SQL, without the negation. */
  readonly sql: string
  /** The atom's three-valued value on a row (with views attached, subquery-view.ts); throws what Postgres would raise. */
  readonly value: (row: RowValues) => unknown
  /** A subquery position's left-side values parsed from a row, as `value` compares them with the view (the router files shapes by them). */
  readonly leftValues?: (row: RowValues) => unknown[]
}

export interface SubqueryPlan {
  readonly dependencies: readonly SubqueryDependency[]
  readonly positions: readonly SubqueryPosition[]
  /** Each disjunct's positions, in order. */
  readonly disjuncts: readonly (readonly number[])[]
}

/** What a compilation of an inner clause gives back (where-clause.ts compiles it). */
export type CompileInner = (tree: RawNode, source: string, schema: string, table: string) => Promise<{
  clause: WhereClause
  columns: ReadonlyMap<string, SqlType>
}>

/** Looks an inner table's column types up; undefined when the table does not exist. */
export type InnerColumns = (schema: string, table: string) => Promise<ReadonlyMap<string, SqlType> | undefined>

export interface PreparedSublinks {
  /** For the binder: each SubLink node to its membership expression. */
  readonly bind: NonNullable<BindContext['sublink']>
  /** For the canonical printer: each SubLink node as SQL. */
  readonly print: (node: Node, p: (child: unknown) => string) => string
  readonly dependencies: readonly SubqueryDependency[]
}

/**
 * Checks and compiles every subquery of the tree (inner ones before the outer
 * clause, as Electric does), deduplicating identical ones.
 */
export async function prepareSublinks(tree: RawNode, source: string, innerColumns: InnerColumns, compileInner: CompileInner): Promise<PreparedSublinks | undefined> {
  const nodes = findSublinks(tree)
  if (nodes.length === 0) return undefined
  const bySql = new Map<string, number>()
  const deps: { schema: string; table: string; select: string[]; types: SqlType[]; where: WhereClause | undefined; sql: string }[] = []
  const depOf = new Map<Node, number>()
  for (const node of nodes) {
    const form = sublinkForm(node)
    const columns = await innerColumns(form.schema, form.table)
    if (columns === undefined) {
      fail(
        'unknown_column',
        `Table ${JSON.stringify(form.schema)}.${JSON.stringify(form.table)} does not exist. If the table name contains capitals or special characters you must quote it.`,
        form.location,
        'table',
      )
    }
    const types = form.select.map((name) => {
      const type = columns.get(name)
      if (type === undefined) fail('unknown_column', `column "${name}" does not exist`, form.location)
      if (codecFor(type).key === undefined) fail('unsupported', `a subquery cannot select ${displayName(type)} column "${name}": the type has no equality`, form.location)
      // A move-in sends the view's values as one array parameter per column, and an array of arrays is not one.
      if (type.kind === 'array') fail('unsupported', `a subquery cannot select array column "${name}"`, form.location)
      return type
    })
    const inner = form.where === undefined ? undefined : (await compileInner(form.where as RawNode, source, form.schema, form.table)).clause
    const sql = `SELECT ${form.select.map(quoteIdent).join(', ')} FROM ${quoteIdent(form.schema)}.${quoteIdent(form.table)}${inner === undefined ? '' : ` WHERE ${inner.canonical}`}`
    let index = bySql.get(sql)
    if (index === undefined) {
      index = deps.length
      bySql.set(sql, index)
      deps.push({ schema: form.schema, table: form.table, select: form.select as string[], types, where: inner, sql })
    }
    depOf.set(node, index)
  }
  const bind = (node: Node, left: readonly ColumnExpr[]): Expr => {
    const dep = deps[depOf.get(node)!]!
    const at = typeof node['location'] === 'number' ? (node['location'] as number) : undefined
    const leftName = left.length === 1 ? displayName(left[0]!.type) : `row of (${left.map((c) => displayName(c.type)).join(', ')})`
    const rightName = dep.types.length === 1 ? displayName(dep.types[0]!) : `row of (${dep.types.map(displayName).join(', ')})`
    if (left.length !== dep.types.length || left.some((c, i) => c.type.key !== dep.types[i]!.key)) {
      fail('datatype_mismatch', `At location ${at ?? 0}: left side of \`IN (SELECT ...)\` has type ${leftName} but subquery returns ${rightName}`, at)
    }
    return { k: 'sublink', type: BOOL, dep: depOf.get(node)!, left }
  }
  const print = (node: Node, p: (child: unknown) => string): string => {
    const test = node['testexpr'] as Record<string, unknown>
    const row = test['RowExpr'] as Node | undefined
    const left = row === undefined ? p(test) : `(${(row['args'] as unknown[]).map(p).join(', ')})`
    return `(${left} IN (${deps[depOf.get(node)!]!.sql}))`
  }
  // Polarity is filled in by planSubqueries, which sees the NOTs.
  return { bind, print, dependencies: deps.map((d) => ({ ...d, negated: false })) }
}

/** The DNF positions of the clause, each atom bound on its own; checks one polarity per dependency. */
export function planSubqueries(tree: RawNode, prepared: PreparedSublinks, ctx: BindContext, printAtom: (atom: Node) => string): SubqueryPlan {
  const disjuncts = toDnf(tree)
  const positions: SubqueryPosition[] = []
  const numbered: number[][] = []
  const polarity = new Map<number, boolean>()
  for (const disjunct of disjuncts) {
    const list: number[] = []
    for (const literal of disjunct) {
      const sublink = literal.atom['SubLink'] as Node | undefined
      if (sublink === undefined && findSublinks(literal.atom).length > 0) {
        // Inside another expression (`(x IN (SELECT …)) IS NOT TRUE`, `COALESCE(…)`) a subquery has no position
        // of its own: no move would ever be sent for it.
        fail('unsupported', 'a subquery can only be a condition of its own (`col IN (SELECT …)`), under AND, OR and NOT')
      }
      const expr = new Binder(ctx).bindWhere(literal.atom as RawNode)
      let dep: number | undefined
      let left: readonly string[] = []
      let leftValues: ((row: RowValues) => unknown[]) | undefined
      if (sublink !== undefined && expr.k === 'sublink') {
        dep = expr.dep
        left = expr.left.map((c) => c.name)
        const parts = expr.left.map(compileExpr)
        leftValues = (row) => parts.map((part) => part(row))
        const seen = polarity.get(dep)
        if (seen !== undefined && seen !== literal.negated) {
          fail('unsupported', 'a subquery dependency cannot be used with both positive and negative polarity in the same filter')
        }
        polarity.set(dep, literal.negated)
      }
      list.push(positions.length)
      positions.push({ negated: literal.negated, dep, left, sql: printAtom(literal.atom), value: compileExpr(expr), ...(leftValues === undefined ? {} : { leftValues }) })
    }
    numbered.push(list)
  }
  const dependencies = prepared.dependencies.map((d, i) => ({ ...d, negated: polarity.get(i) ?? false }))
  return { dependencies, positions, disjuncts: numbered }
}

