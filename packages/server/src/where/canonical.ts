import type { EnumType } from './sql-type.js'
import { quoteIdent, resolveTypeName } from './type-names.js'

/**
 * The normalised text of a clause: printed back from Postgres's parse tree,
 * fully parenthesised, keywords upper-case, identifiers quoted, literals in one
 * spelling, type names canonical. Two clauses that differ only in whitespace,
 * case of keywords and unquoted identifiers, redundant parentheses, comments,
 * `!=` versus `<>` or `::int` versus `CAST(... AS integer)` print the same.
 *
 * The text is valid SQL with the same meaning (`$n` kept), so it can also be
 * used in the snapshot query; it is printed only for trees the binder accepted.
 *
 * `collated` holds the nodes the binder found comparing or case-folding text
 * (`Binder.collated`): their operand is printed with `COLLATE "C"`, the order
 * and case folding the evaluator uses, so that a snapshot query on a column of
 * another collation (a database created as en_US, an ICU column) selects the
 * rows the evaluator would. An operand the clause already collates is left.
 */
export function canonicalText(
  root: unknown,
  enums: ReadonlyMap<string, EnumType>,
  sublink?: SublinkPrinter,
  collated: ReadonlySet<object> = NONE,
): string {
  return print(root, { enums, sublink, collated })
}

const NONE: ReadonlySet<object> = new Set()

interface PrintContext {
  readonly enums: ReadonlyMap<string, EnumType>
  readonly sublink: SublinkPrinter | undefined
  readonly collated: ReadonlySet<object>
}

/** Prints a subquery (subquery-clause.ts knows its inner clause's canonical text). */
export type SublinkPrinter = (node: Node, p: (child: unknown) => string) => string

type Node = Readonly<Record<string, unknown>>

function unwrap(raw: unknown): [string, Node] {
  const [entry] = Object.entries(raw as Record<string, unknown>)
  if (entry === undefined) throw new Error('malformed parse tree node')
  return [entry[0], entry[1] as Node]
}

function strings(list: unknown): string[] {
  return ((list as readonly { String?: { sval?: string } }[] | undefined) ?? []).map((n) => n.String?.sval ?? '')
}

export function quoteLiteral(value: string): string {
  return `'${value.replaceAll("'", "''")}'`
}

const LIKE_WORDS: Readonly<Record<string, string>> = {
  '~~': 'LIKE',
  '!~~': 'NOT LIKE',
  '~~*': 'ILIKE',
  '!~~*': 'NOT ILIKE',
}

const BETWEEN_WORDS: Readonly<Record<string, string>> = {
  AEXPR_BETWEEN: 'BETWEEN',
  AEXPR_NOT_BETWEEN: 'NOT BETWEEN',
  AEXPR_BETWEEN_SYM: 'BETWEEN SYMMETRIC',
  AEXPR_NOT_BETWEEN_SYM: 'NOT BETWEEN SYMMETRIC',
}

function print(raw: unknown, ctx: PrintContext): string {
  const p = (child: unknown): string => print(child, ctx)
  const { enums, sublink } = ctx
  const [tag, node] = unwrap(raw)
  switch (tag) {
    case 'ColumnRef':
      return strings(node['fields']).map(quoteIdent).join('.')
    case 'A_Const': {
      if (node['isnull'] === true) return 'NULL'
      const ival = node['ival'] as { ival?: number } | undefined
      if (ival !== undefined) return String(ival.ival ?? 0)
      const fval = node['fval'] as { fval?: string } | undefined
      if (fval !== undefined) return fval.fval ?? '0'
      const boolval = node['boolval'] as { boolval?: boolean } | undefined
      if (boolval !== undefined) return boolval.boolval === true ? 'TRUE' : 'FALSE'
      const sval = node['sval'] as { sval?: string } | undefined
      return quoteLiteral(sval?.sval ?? '')
    }
    case 'ParamRef':
      return `$${String(node['number'])}`
    case 'TypeCast': {
      const type = resolveTypeName(node['typeName'] as never, enums)
      return `CAST(${p(node['arg'])} AS ${type.sql})`
    }
    case 'CollateClause':
      // The binder accepts only collations meaning C's order ("C", "POSIX", "ucs_basic"): one spelling, which
      // is also the one the canonical text adds elsewhere, so two explicit collations in one operation agree.
      return `(${p(node['arg'])} COLLATE "C")`
    case 'BoolExpr': {
      const args = (node['args'] as unknown[]).map(p)
      if (node['boolop'] === 'NOT_EXPR') return `(NOT ${args[0] ?? ''})`
      return `(${args.join(node['boolop'] === 'AND_EXPR' ? ' AND ' : ' OR ')})`
    }
    case 'NullTest':
      return `(${p(node['arg'])} ${node['nulltesttype'] === 'IS_NOT_NULL' ? 'IS NOT NULL' : 'IS NULL'})`
    case 'BooleanTest':
      return `(${p(node['arg'])} ${String(node['booltesttype']).replaceAll('_', ' ')})`
    case 'CoalesceExpr':
      return `COALESCE(${(node['args'] as unknown[]).map(p).join(', ')})`
    case 'A_ArrayExpr':
      return `ARRAY${printArrayBody(node, ctx)}`
    case 'FuncCall': {
      const names = strings(node['funcname'])
      const name = names[names.length - 1] ?? ''
      const arg = ctx.collated.has(node) ? (child: unknown) => collateC(child, ctx) : p
      return `${name}(${((node['args'] as unknown[] | undefined) ?? []).map(arg).join(', ')})`
    }
    case 'A_Expr':
      return printAExpr(node, ctx)
    case 'SubLink':
      if (sublink !== undefined) return sublink(node, p)
      throw new Error('cannot print a subquery without its printer')
    default:
      throw new Error(`cannot print ${tag}`)
  }
}

/** `(operand COLLATE "C")`, or the operand as it is when the clause collates it already. */
function collateC(raw: unknown, ctx: PrintContext): string {
  const [tag] = unwrap(raw)
  return tag === 'CollateClause' ? print(raw, ctx) : `(${print(raw, ctx)} COLLATE "C")`
}

function printArrayBody(node: Node, ctx: PrintContext): string {
  const elements = (node['elements'] as unknown[] | undefined) ?? []
  const parts = elements.map((e) => {
    const [tag, inner] = unwrap(e)
    return tag === 'A_ArrayExpr' ? printArrayBody(inner, ctx) : print(e, ctx)
  })
  return `[${parts.join(', ')}]`
}

function operatorOf(node: Node): string {
  const names = strings(node['name'])
  return names[names.length - 1] ?? ''
}

function printAExpr(node: Node, ctx: PrintContext): string {
  const p = (child: unknown): string => print(child, ctx)
  // The left operand carries the collation: an explicit one decides the operation's.
  const left = (): string => (ctx.collated.has(node) ? collateC(node['lexpr'], ctx) : p(node['lexpr']))
  const op = operatorOf(node)
  const list = (): string[] =>
    (((node['rexpr'] as { List?: { items?: unknown[] } }).List?.items ?? []) as unknown[]).map(p)
  switch (node['kind']) {
    case 'AEXPR_OP':
      return node['lexpr'] === undefined ? `(${op} ${p(node['rexpr'])})` : `(${left()} ${op} ${p(node['rexpr'])})`
    case 'AEXPR_OP_ANY':
      return `(${left()} ${op} ANY (${p(node['rexpr'])}))`
    case 'AEXPR_OP_ALL':
      return `(${left()} ${op} ALL (${p(node['rexpr'])}))`
    case 'AEXPR_DISTINCT':
      return `(${left()} IS DISTINCT FROM ${p(node['rexpr'])})`
    case 'AEXPR_NOT_DISTINCT':
      return `(${left()} IS NOT DISTINCT FROM ${p(node['rexpr'])})`
    case 'AEXPR_IN':
      return `(${left()} ${op === '=' ? 'IN' : 'NOT IN'} (${list().join(', ')}))`
    case 'AEXPR_LIKE':
    case 'AEXPR_ILIKE': {
      const [rtag, rnode] = unwrap(node['rexpr'])
      const word = LIKE_WORDS[op] ?? op
      const names = rtag === 'FuncCall' ? strings(rnode['funcname']) : []
      if (names.length === 2 && names[0] === 'pg_catalog' && names[1] === 'like_escape') {
        const [pattern, escape] = (rnode['args'] as unknown[]).map(p)
        return `(${left()} ${word} ${pattern ?? ''} ESCAPE ${escape ?? ''})`
      }
      return `(${left()} ${word} ${p(node['rexpr'])})`
    }
    default: {
      const word = BETWEEN_WORDS[String(node['kind'])]
      if (word === undefined) throw new Error(`cannot print ${String(node['kind'])}`)
      const [low, high] = list()
      return `(${left()} ${word} ${low ?? ''} AND ${high ?? ''})`
    }
  }
}
