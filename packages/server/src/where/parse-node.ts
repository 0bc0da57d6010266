import type { ConstExpr } from './expr.js'
import { UnsupportedDateTimeError } from './values/datetime.js'
import type { WhereErrorField, WhereErrorReason } from './where-error.js'
import { EvaluationError, WhereClauseError } from './where-error.js'

/*
 * Reading Postgres's parse tree (libpg-query's JSON) while binding: a node's
 * kind and fields, its position in the clause, and the errors that point at it.
 */

export type Node = Readonly<Record<string, unknown>>

export function nodeOf(raw: unknown): [string, Node] {
  const entries = Object.entries(raw as Record<string, unknown>)
  const [entry] = entries
  if (entries.length !== 1 || entry === undefined) throw new Error('malformed parse tree node')
  return [entry[0], entry[1] as Node]
}

export function location(node: Node): number | undefined {
  const value = node['location']
  return typeof value === 'number' && value >= 0 ? value : undefined
}

export function fail(
  reason: WhereErrorReason,
  message: string,
  at?: number,
  field: WhereErrorField = 'where',
): never {
  throw new WhereClauseError(reason, message, {
    field,
    ...(at === undefined ? {} : { position: at }),
  })
}

export function strings(list: unknown): string[] {
  return ((list as readonly { String?: { sval?: string } }[] | undefined) ?? []).map((n) => n.String?.sval ?? '')
}

/** A value error found while binding a constant: the params field is to blame when the constant was `$n`. */
export function valueError(error: unknown, expr: ConstExpr | undefined): never {
  const field: WhereErrorField = expr?.param === undefined ? 'where' : 'params'
  if (error instanceof UnsupportedDateTimeError) fail('unsupported', error.message, expr?.location, field)
  if (error instanceof EvaluationError) {
    const message = expr?.param === undefined ? error.message : `$${expr.param}: ${error.message}`
    fail('invalid_value', message, expr?.location, field)
  }
  throw error
}

/** What Postgres node kinds outside the allow-list are, in words, for the refusal. */
export const NODE_DESCRIPTIONS: Readonly<Record<string, string>> = {
  SubLink: 'subqueries',
  CaseExpr: 'CASE expressions',
  MinMaxExpr: 'GREATEST and LEAST',
  SQLValueFunction: 'CURRENT_DATE, CURRENT_TIMESTAMP and similar functions',
  RowExpr: 'row constructors',
  A_Indirection: 'array subscripts and field selection',
  GroupingFunc: 'GROUPING',
  XmlExpr: 'XML expressions',
  XmlSerialize: 'XML expressions',
  JsonIsPredicate: 'IS JSON',
  JsonFuncExpr: 'SQL/JSON functions',
  JsonObjectConstructor: 'JSON constructors',
  JsonArrayConstructor: 'JSON constructors',
  NullIfExpr: 'NULLIF',
  CollateClause: 'COLLATE',
  SetToDefault: 'DEFAULT',
  CurrentOfExpr: 'CURRENT OF',
  A_Star: '*',
  MergeSupportFunc: 'MERGE_ACTION',
}
