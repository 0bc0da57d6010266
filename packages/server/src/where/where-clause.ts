import type { RowValues } from '@sluice/protocol'
import { Binder, type BindContext } from './bind.js'
import { canonicalText } from './canonical.js'
import { type Evaluator, compileExpr } from './compile.js'
import type { IndexableConjunct } from './conjuncts.js'
import { indexableConjuncts } from './conjuncts.js'
import { type Expr, columnsOf } from './expr.js'
import { constantError } from './fold.js'
import type { WhereLimits } from './limits.js'
import { DEFAULT_WHERE_LIMITS } from './limits.js'
import { LONE_SURROGATE, type RawNode, loadWhereParser, parseWhereClause } from './parse-clause.js'
import { findSublinks } from './sublink-form.js'
import { type CompileInner, type PreparedSublinks, type SubqueryPlan, planSubqueries, prepareSublinks } from './subquery-clause.js'
import type { ElementType, EnumType, SqlType } from './sql-type.js'
import { arrayOf, enumType, isScalarName, opaqueType, scalar } from './sql-type.js'
import { EvaluationError, EvaluationFailure, WhereClauseError } from './where-error.js'
import { whereQual } from './where-qual.js'

/** A column of the shape's table, as the replication layer or the catalog describes it. */
export interface WhereColumn {
  readonly name: string
  /**
   * `pg_type.typname`: `int4`, `text`, an enum's name... An array is either
   * `_int4` or the element type with `dims`. Types the evaluator does not know
   * are accepted and usable only in IS [NOT] NULL and casts to text.
   */
  readonly type: string
  readonly dims?: number
  readonly typeOid?: number
  /** For an enum (or an array of one): its labels in sort order. */
  readonly enumValues?: readonly string[]
  readonly notNull?: boolean
  /** Its collation, when nondeterministic: the column may only be tested for NULL. */
  readonly nondeterministicCollation?: string
}

export interface CompileWhereOptions {
  readonly columns: readonly WhereColumn[]
  /** Values of `$1..$n`, as text: each is typed by its context like a quoted literal. */
  readonly params?: readonly string[]
  readonly limits?: Partial<WhereLimits>
  /**
   * Looks up the columns of a table a subquery reads (undefined: no such
   * table). Without it a subquery is refused (subset where clauses).
   */
  readonly tables?: (schema: string, name: string) => Promise<readonly WhereColumn[] | undefined>
}

/** Evaluating a clause on a row: Postgres's three-valued result, or what Postgres would have raised. */
export type WhereResult = boolean | null | EvaluationFailure

/** A WHERE verdict: whether Postgres's `SELECT ... WHERE` returns the row, or the error it raises. */
export type WhereVerdict = boolean | EvaluationFailure

export interface WhereClause {
  /** The clause as given. */
  readonly source: string
  /** Normalised SQL text: equal for clauses that differ only in spelling (see canonical.ts). */
  readonly canonical: string
  readonly params: readonly string[]
  /** Columns the clause reads, sorted. */
  readonly columns: readonly string[]
  /** Conjuncts of the top-level AND the router can index. */
  readonly conjuncts: readonly IndexableConjunct[]
  /** Set when the clause is exactly one indexable conjunct: matching its keys is matching the clause. */
  readonly exact: IndexableConjunct | undefined
  /**
   * The clause's value on the row, as Postgres computes the expression (in a
   * select list): TRUE, FALSE or NULL, or the error it raises. Pure: the row's
   * values are Postgres text (or null). Never throws.
   */
  evaluate(row: RowValues): WhereResult
  /**
   * Whether Postgres's `SELECT ... WHERE <clause>` returns the row, after the
   * rewrites Postgres applies to a WHERE clause (where-qual.ts): it may skip
   * an evaluation (and so an error) that `evaluate` performs, and a NULL is
   * simply no match. A failure means Postgres would raise an error for the row.
   */
  test(row: RowValues): WhereVerdict
  /** Whether the row belongs to the shape: `test(row) === true`. */
  matches(row: RowValues): boolean
  /**
   * Set when the clause has subqueries: its dependencies and DNF positions.
   * Such a clause is evaluated on rows carrying the dependencies' current
   * views (subquery-view.ts `withViews`).
   */
  readonly subqueries?: SubqueryPlan | undefined
}

/**
 * The SQL types of a table's columns (and its enums), once per frozen columns
 * array (whereColumns gives one per table): a restart compiles every stored
 * shape's clause against the same few tables. The binder only looks them up.
 */
const typesOfColumns = new WeakMap<readonly WhereColumn[], { columns: ReadonlyMap<string, SqlType>; enums: ReadonlyMap<string, EnumType> }>()

function columnTypes(list: readonly WhereColumn[]): ColumnTypes {
  const known = typesOfColumns.get(list)
  if (known !== undefined) return known
  const enums = new Map<string, EnumType>()
  const columns = new Map<string, SqlType>()
  const collations = new Map<string, string>()
  for (const column of list) {
    columns.set(column.name, columnType(column, enums))
    if (column.nondeterministicCollation !== undefined) collations.set(column.name, column.nondeterministicCollation)
  }
  const types = { columns, enums, ...(collations.size > 0 ? { nondeterministic: collations } : {}) }
  // A list that could change under the cache is not cached.
  if (Object.isFrozen(list)) typesOfColumns.set(list, types)
  return types
}

interface ColumnTypes {
  readonly columns: ReadonlyMap<string, SqlType>
  readonly enums: ReadonlyMap<string, EnumType>
  readonly nondeterministic?: ReadonlyMap<string, string>
}

function columnType(column: WhereColumn, enums: Map<string, EnumType>): SqlType {
  let name = column.type
  let isArray = (column.dims ?? 0) > 0
  if (!isArray && name.startsWith('_')) {
    name = name.slice(1)
    isArray = true
  }
  let element: ElementType
  if (column.enumValues !== undefined) {
    const existing = enums.get(name)
    element = existing ?? enumType(name, column.enumValues)
    if (existing === undefined) enums.set(name, element)
  } else if (isScalarName(name)) element = scalar(name)
  else {
    // An array of a type we do not interpret stays opaque as a whole: its literal may not even use
    // commas as delimiters (box[] uses ';').
    return opaqueType(isArray ? `${name}[]` : name)
  }
  return isArray ? arrayOf(element) : element
}

/**
 * Canonical texts by parse tree and enums: the text depends on nothing else,
 * and parse trees are shared by clauses that differ only in their parameters
 * (parse-clause.ts), so a restart's 100k `user_id = $1` print it once.
 */
let canonicalTexts = new WeakMap<object, WeakMap<ReadonlyMap<string, EnumType>, string>>()

/** Starts the canonical texts afresh (as `forgetDefinitionKeys`, for the table a WeakMap keeps at its peak). */
export function forgetCanonicalTexts(): void {
  canonicalTexts = new WeakMap()
}

function canonicalOf(tree: object, enums: ReadonlyMap<string, EnumType>): string {
  let byEnums = canonicalTexts.get(tree)
  const known = byEnums?.get(enums)
  if (known !== undefined) return known
  const text = canonicalText(tree, enums)
  // Only frozen trees are shared, and only they cannot change under the cache.
  if (Object.isFrozen(tree)) {
    if (byEnums === undefined) canonicalTexts.set(tree, (byEnums = new WeakMap()))
    byEnums.set(enums, text)
  }
  return text
}

/** Compiles a where clause; loads the WASM parser on first use. */
export async function compileWhere(source: string, options: CompileWhereOptions): Promise<WhereClause> {
  await loadWhereParser()
  const tables = options.tables
  if (tables !== undefined && /select/i.test(source)) {
    const limits: WhereLimits = { ...DEFAULT_WHERE_LIMITS, ...options.limits }
    const tree = parseWhereClause(source, limits)
    if (findSublinks(tree).length > 0) {
      checkParams(options.params ?? [], limits)
      const innerColumns = async (schema: string, name: string): Promise<ReadonlyMap<string, SqlType> | undefined> => {
        const columns = await tables(schema, name)
        return columns === undefined ? undefined : columnTypes(columns).columns
      }
      const compileInner: CompileInner = async (innerTree, innerSource, schema, name) => {
        const columns = await tables(schema, name)
        if (columns === undefined) throw new Error(`table ${schema}.${name} vanished while compiling`)
        const sublinks = await prepareSublinks(innerTree, innerSource, innerColumns, compileInner)
        const clause = build(innerSource, innerTree, { ...options, columns }, limits, sublinks)
        return { clause, columns: columnTypes(columns).columns }
      }
      const sublinks = await prepareSublinks(tree, source, innerColumns, compileInner)
      return build(source, tree, options, limits, sublinks)
    }
  }
  return compileWhereSync(source, options)
}

function checkParams(params: readonly string[], limits: WhereLimits): void {
  if (params.length > limits.maxParams) {
    throw new WhereClauseError('limit_exceeded', `Too many parameters (${params.length}; the limit is ${limits.maxParams})`, {
      field: 'params',
    })
  }
  const nul = params.findIndex((value) => value.includes('\0'))
  if (nul >= 0) {
    // Postgres's own words for a NUL in any text value; unrefused here, the snapshot query would fail with them.
    throw new WhereClauseError('invalid_value', `$${nul + 1}: invalid byte sequence for encoding "UTF8": 0x00`, { field: 'params' })
  }
  const lone = params.findIndex((value) => LONE_SURROGATE.test(value))
  if (lone >= 0) {
    // Sent to Postgres as UTF-8 it would become U+FFFD: the snapshot would match other rows than the evaluator.
    throw new WhereClauseError('invalid_value', `$${lone + 1}: contains an unpaired UTF-16 surrogate, which is not a character`, { field: 'params' })
  }
}

/** As {@link compileWhere}, once {@link loadWhereParser} has completed; refuses subqueries. */
export function compileWhereSync(source: string, options: CompileWhereOptions): WhereClause {
  const limits: WhereLimits = options.limits === undefined ? DEFAULT_LIMITS : { ...DEFAULT_WHERE_LIMITS, ...options.limits }
  checkParams(options.params ?? [], limits)
  return build(source, parseWhereClause(source, limits), options, limits, undefined)
}

function build(source: string, tree: RawNode, options: CompileWhereOptions, limits: WhereLimits, sublinks: PreparedSublinks | undefined): WhereClause {
  const params = options.params ?? []
  const { columns, enums, nondeterministic } = columnTypes(options.columns)
  const collated = new Set<object>()
  const ctx: BindContext = {
    columns,
    enums,
    params,
    limits,
    collated,
    ...(nondeterministic === undefined ? {} : { nondeterministic }),
    ...(sublinks === undefined ? {} : { sublink: sublinks.bind }),
  }
  const expr = new Binder(ctx).bindWhere(tree)
  const planningError = constantError(expr)
  if (planningError !== undefined) throw new WhereClauseError('invalid_value', planningError.message)

  const conjuncts = indexableConjuncts(expr)
  // The cache holds texts without collated nodes only: which nodes are depends on the columns' types too.
  const canonical =
    sublinks === undefined && collated.size === 0 ? canonicalOf(tree, enums) : canonicalText(tree, enums, sublinks?.print, collated)
  const subqueries =
    sublinks === undefined ? undefined : planSubqueries(tree, sublinks, ctx, (atom) => canonicalText(atom, enums, sublinks.print, collated))
  return new CompiledClause(
    source,
    canonical,
    Object.freeze([...params]),
    sharedColumns([...columnsOf(expr)].sort()),
    Object.freeze(conjuncts),
    expr.k !== 'and' && conjuncts.length === 1 ? conjuncts[0] : undefined,
    expr,
    subqueries,
  )
}

/** The merged limits when a call gives none of its own (a restart compiles every stored clause). */
const DEFAULT_LIMITS: WhereLimits = Object.freeze({ ...DEFAULT_WHERE_LIMITS })

/**
 * Column lists by their text: clauses made from one template read the same
 * columns, and a restart restores 100k of them. Holds one array per distinct
 * list ever compiled, which the clauses of a process have few of.
 */
const columnLists = new Map<string, readonly string[]>()

function sharedColumns(columns: string[]): readonly string[] {
  const key = columns.join('\u0000')
  let list = columnLists.get(key)
  if (list === undefined) {
    list = Object.freeze(columns)
    if (columnLists.size < 10_000) columnLists.set(key, list)
  }
  return list
}

/**
 * A compiled clause. A class, not an object of closures: one object per clause
 * instead of one plus three functions and their context, for each of the 100k
 * clauses a restart restores. The evaluators are built on the first row, not
 * here: most restored clauses see no row for a while, and building them
 * (closures over the bound tree, the WHERE rewrite) for every stored shape cost
 * a good part of the start-up in time and retained memory.
 */
class CompiledClause implements WhereClause {
  private valueFn: Evaluator | undefined = undefined
  private verdictOf: Evaluator | undefined = undefined

  constructor(
    readonly source: string,
    readonly canonical: string,
    readonly params: readonly string[],
    readonly columns: readonly string[],
    readonly conjuncts: readonly IndexableConjunct[],
    readonly exact: IndexableConjunct | undefined,
    private readonly expr: Expr,
    readonly subqueries?: SubqueryPlan,
  ) {}

  evaluate(row: RowValues): WhereResult {
    try {
      return (this.valueFn ??= compileExpr(this.expr))(row) as boolean | null
    } catch (error) {
      return failure(error)
    }
  }

  test(row: RowValues): WhereVerdict {
    try {
      if (this.verdictOf === undefined) {
        const qual = whereQual(this.expr)
        this.verdictOf = qual === this.expr ? (this.valueFn ??= compileExpr(this.expr)) : compileExpr(qual)
      }
      return this.verdictOf(row) === true
    } catch (error) {
      return failure(error)
    }
  }

  matches(row: RowValues): boolean {
    return this.test(row) === true
  }
}

function failure(error: unknown): EvaluationFailure {
  if (error instanceof EvaluationError) return new EvaluationFailure(error.code, error.message)
  // A bug of ours must not take replication down: the row is reported as failed.
  return new EvaluationFailure('internal_error', error instanceof Error ? error.message : String(error))
}

