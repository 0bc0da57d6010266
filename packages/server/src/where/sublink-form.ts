import { type Node, fail, location, nodeOf, strings } from './parse-node.js'

/*
 * The forms of subquery a where clause may hold (docs/where-clauses.md,
 * "Subqueries"): `col IN (SELECT c FROM t [WHERE …])` and
 * `(a, b) IN (SELECT x, y FROM t [WHERE …])`, under any AND/OR/NOT. Everything
 * else is refused with the construct named: other sublinks (EXISTS, `= ANY`,
 * scalar), an expression on the left, and any clause of the inner SELECT but
 * its WHERE. Messages follow Electric's where it has one.
 */

/** What a subquery asks for, read off its SubLink node. */
export interface SublinkForm {
  readonly node: Node
  readonly schema: string
  readonly table: string
  /** The selected columns, in select-list order (paired positionally with the left side). */
  readonly select: readonly string[]
  /** The inner WHERE's raw tree. */
  readonly where: Node | undefined
  readonly location: number | undefined
}

const ALLOWED_INNER_KEYS: ReadonlySet<string> = new Set(['targetList', 'fromClause', 'whereClause', 'limitOption', 'op'])

/** The left side's column references (one, or a row of them), or a 400. */
export function sublinkLeft(node: Node): Node[] {
  const at = location(node)
  checkKind(node)
  const [tag, test] = nodeOf(node['testexpr'])
  const refs = tag === 'RowExpr' ? ((test['args'] as unknown[] | undefined) ?? []).map(nodeOf) : [[tag, test] as [string, Node]]
  for (const [kind] of refs) {
    if (kind !== 'ColumnRef') {
      fail('unsupported', `At location ${at ?? 0}: currently, left side of \`IN (SELECT ...)\` can only be a column reference or a list of column references`, at)
    }
  }
  return refs.map(([, ref]) => ref)
}

function checkKind(node: Node): void {
  const at = location(node)
  if (node['subLinkType'] !== 'ANY_SUBLINK' || node['operName'] !== undefined) {
    fail('unsupported', `At location ${at ?? 0}: only \`value IN (SELECT ...)\` sublinks are supported right now`, at)
  }
}

/** The inner SELECT's parts, or a 400 naming what is refused. */
export function sublinkForm(node: Node): SublinkForm {
  const at = location(node)
  const [, select] = nodeOf(node['subselect'])
  const targets = (select['targetList'] as unknown[] | undefined) ?? []
  const columns: string[] = []
  for (const target of targets) {
    const [, res] = nodeOf(target)
    const value = res['val']
    const [tag, ref] = value === undefined ? ['', {} as Node] : nodeOf(value)
    const fields = (ref['fields'] as readonly Record<string, unknown>[] | undefined) ?? []
    if (tag !== 'ColumnRef' || fields.length !== 1 || 'A_Star' in (fields[0] ?? {}) || res['name'] !== undefined) {
      fail('unsupported', `At location ${location(res) ?? at ?? 0}: Expected a plain column reference`, location(res) ?? at)
    }
    columns.push(strings(fields)[0] ?? '')
  }
  checkKind(node)
  const extra = Object.keys(select).filter((key) => !ALLOWED_INNER_KEYS.has(key))
  if (extra.length > 0 || select['op'] !== 'SETOP_NONE' || select['limitOption'] !== 'LIMIT_OPTION_DEFAULT') {
    fail('unsupported', 'SELECT statement must not contain any clauses', at)
  }
  const from = (select['fromClause'] as unknown[] | undefined) ?? []
  const [fromTag, range] = from.length === 1 ? nodeOf(from[0]) : ['', {} as Node]
  if (fromTag !== 'RangeVar' || range['alias'] !== undefined || range['catalogname'] !== undefined || range['inh'] === false) {
    fail('unsupported', 'Expected a single table reference', at)
  }
  if (columns.length === 0) fail('unsupported', `At location ${at ?? 0}: Expected a plain column reference`, at)
  const where = select['whereClause'] as Node | undefined
  return {
    node,
    schema: (range['schemaname'] as string | undefined) ?? 'public',
    table: range['relname'] as string,
    select: columns,
    where,
    location: at,
  }
}

/** The SubLink nodes of a clause's tree, outermost first; the inner SELECTs are not entered (they are their own clauses). */
export function findSublinks(root: unknown): Node[] {
  const found: Node[] = []
  const stack: unknown[] = [root]
  while (stack.length > 0) {
    const value = stack.pop()
    if (value === null || typeof value !== 'object') continue
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push(value[i])
      continue
    }
    const sublink = (value as Record<string, unknown>)['SubLink'] as Node | undefined
    if (sublink !== undefined) {
      found.push(sublink)
      stack.push(sublink['testexpr'])
      continue
    }
    for (const child of Object.values(value as Record<string, unknown>)) stack.push(child)
  }
  return found
}
