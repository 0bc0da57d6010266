// One concern, kept in one file past 500 lines: the Binder is Postgres's parse
// analysis for the where clause, one recursive descent whose node kinds call one
// another (an operator binds its operands, IN expands to operators, a function
// coerces its arguments, each through `bind` and `coerce`). Splitting it by node
// kind would only scatter one class's methods; the pieces that stand alone live
// next to it (parse-node.ts, resolve-overload.ts, casts.ts, operators.ts, fold.ts).
import type { CastContext } from './casts.js'
import { castFunction, castIsStable, castParsesText, parsesAnyText, typmodCoercion } from './casts.js'
import type { Signature } from './catalog.js'
import { FUNCTION_NAMES, functionCandidates, OPERATOR_NAMES, operatorCandidates } from './catalog.js'
import type { BoolTest, ColumnExpr, ConstExpr, Expr } from './expr.js'
import { columnsOf } from './expr.js'
import { foldExpr } from './fold.js'
import type { WhereLimits } from './limits.js'
import {
  arithmeticFn,
  arrayOperatorFn,
  COMPARISON_OPERATORS,
  comparisonFn,
  comparisonIsStable,
  equality,
  LIKE_OPERATORS,
  likeFn,
  prefixFn,
} from './operators.js'
import type { RawNode } from './parse-clause.js'
import type { Resolution } from './resolve-overload.js'
import { resolveFunction, resolveOperator, selectCommonType, verifyCommonType } from './resolve-overload.js'
import type { ElementType, EnumType, SqlType, Typmod } from './sql-type.js'
import {
  arrayOf,
  BOOL,
  displayName,
  formatTypmod,
  INT4,
  INT8,
  isScalar,
  isUnknown,
  NUMERIC,
  UNKNOWN,
} from './sql-type.js'
import { codecFor } from './type-codec.js'
import { resolveTypeName } from './type-names.js'
import { functionImpl } from './functions.js'
import { type ArrayValue, EMPTY_ARRAY } from './values/array.js'
import { parseInteger } from './values/integer.js'
import { parseNumeric } from './values/numeric.js'
import { NODE_DESCRIPTIONS, type Node, fail, location, nodeOf, strings, valueError } from './parse-node.js'
import { WhereClauseError } from './where-error.js'
import { sublinkLeft } from './sublink-form.js'

/**
 * Type-checks Postgres's parse tree against the table's columns and builds a
 * bound {@link Expr}, following Postgres's parse analysis (transformExpr and
 * friends): unknown literals and `$n` parameters take their type from context,
 * operators and functions are resolved as Postgres resolves them, IN lists,
 * BETWEEN and IS DISTINCT FROM expand the way Postgres expands them, and
 * constant subexpressions are folded as Postgres's planner folds them.
 *
 * Everything outside the allow-list is refused here, with a message naming it.
 */
export interface BindContext {
  readonly columns: ReadonlyMap<string, SqlType>
  readonly enums: ReadonlyMap<string, EnumType>
  readonly params: readonly string[]
  readonly limits: WhereLimits
  /**
   * Binds `left IN (SELECT …)` (subquery-clause.ts): the SubLink node and its
   * bound left-side columns in, the membership expression out. Absent: a
   * subquery is refused, as where no inner table can be looked up (subsets).
   */
  readonly sublink?: (node: Node, left: readonly ColumnExpr[]) => Expr
  /**
   * Filled with the nodes whose result depends on a text collation (ordering
   * comparisons and ILIKE on text, lower and upper): the evaluator uses C's,
   * and the canonical text says so (canonical.ts).
   */
  readonly collated?: Set<object>
  /**
   * Columns of a nondeterministic collation, with its name: Postgres compares
   * them as the collation says (case-insensitively, say) and the evaluator
   * byte for byte, so they may only be tested for NULL.
   */
  readonly nondeterministic?: ReadonlyMap<string, string>
}

/** Operators whose result on text depends on the collation (equality does not, for the deterministic ones). */
const COLLATION_SENSITIVE_OPERATORS: ReadonlySet<string> = new Set(['<', '<=', '>', '>=', '~~*', '!~~*'])
const COLLATION_SENSITIVE_FUNCTIONS: ReadonlySet<string> = new Set(['lower', 'upper'])

/** text and varchar read and compare a value alike (bpchar does not: its trailing spaces). */
function readsTextAlike(type: SqlType): boolean {
  return isScalar(type, 'text', 'varchar')
}

function isInteger(type: SqlType): boolean {
  return isScalar(type, 'int2', 'int4', 'int8')
}

/** Text types and arrays of them: what a collation applies to. */
function isCollatable(type: SqlType): boolean {
  return type.kind === 'array' ? isCollatable(type.element) : isScalar(type, 'text', 'varchar', 'bpchar')
}

export class Binder {
  private depth = 0
  /** The type each `$n` took at its first use, and the params seen untyped so far. */
  private readonly paramTypes = new Map<number, SqlType>()
  private readonly paramsSeen = new Set<number>()

  constructor(private readonly ctx: BindContext) {}

  bindWhere(root: RawNode): Expr {
    let expr = this.bind(root)
    if (isUnknown(expr.type)) expr = this.coerce(expr, BOOL, 'implicit')
    if (!isScalar(expr.type, 'bool')) fail('datatype_mismatch', 'WHERE clause must return a boolean')
    for (const n of this.paramsSeen) {
      // Postgres's words: the snapshot query would fail with them.
      if (!this.paramTypes.has(n)) fail('datatype_mismatch', `could not determine data type of parameter $${n}`, undefined, 'params')
    }
    return expr
  }

  private bind(raw: unknown): Expr {
    this.depth++
    if (this.depth > this.ctx.limits.maxDepth) {
      fail('limit_exceeded', `The where clause is nested too deeply (the limit is ${this.ctx.limits.maxDepth} levels)`)
    }
    try {
      return foldExpr(this.bindNode(raw))
    } catch (error) {
      if (error instanceof WhereClauseError) throw error
      return valueError(error, undefined)
    } finally {
      this.depth--
    }
  }

  private bindNode(raw: unknown): Expr {
    const [tag, node] = nodeOf(raw)
    switch (tag) {
      case 'ColumnRef':
        return this.bindColumn(node)
      case 'A_Const':
        return this.bindConst(node)
      case 'ParamRef':
        return this.bindParam(node)
      case 'TypeCast':
        return this.bindTypeCast(node)
      case 'A_Expr':
        return this.bindAExpr(node)
      case 'BoolExpr':
        return this.bindBoolExpr(node)
      case 'NullTest': {
        const [argTag, argNode] = nodeOf(node['arg'])
        return {
          k: 'nulltest',
          type: BOOL,
          negated: node['nulltesttype'] === 'IS_NOT_NULL',
          // A column of any collation may be tested for NULL.
          arg: argTag === 'ColumnRef' ? this.bindColumn(argNode, true) : this.bind(node['arg']),
        }
      }
      case 'BooleanTest': {
        const test = node['booltesttype'] as BoolTest
        const words = test.replaceAll('_', ' ')
        return { k: 'booltest', type: BOOL, test, arg: this.toBoolean(this.bind(node['arg']), words) }
      }
      case 'CoalesceExpr':
        return this.bindCoalesce(node)
      case 'A_ArrayExpr':
        return this.bindArray(node, undefined)
      case 'FuncCall':
        return this.bindFuncCall(node)
      case 'CollateClause':
        return this.bindCollate(node)
      case 'SubLink':
        if (this.ctx.sublink !== undefined) return this.ctx.sublink(node, sublinkLeft(node).map((ref) => this.bindColumn(ref) as ColumnExpr))
        return fail('unsupported', 'subqueries are not supported here', location(node))
      default: {
        const what = NODE_DESCRIPTIONS[tag] ?? tag
        return fail('unsupported', `${what} ${what.endsWith('s') ? 'are' : 'is'} not supported in where clauses`, location(node))
      }
    }
  }

  // --- leaves ---------------------------------------------------------------------------

  private bindColumn(node: Node, nullTest = false): Expr {
    const fields = node['fields'] as readonly Record<string, unknown>[]
    const at = location(node)
    if (fields.some((f) => 'A_Star' in f)) fail('unsupported', '* is not supported in where clauses', at)
    const names = strings(fields)
    if (names.length !== 1) {
      fail('unsupported', `qualified column references are not supported: ${names.join('.')}`, at)
    }
    const name = names[0] ?? ''
    const type = this.ctx.columns.get(name)
    if (type === undefined) fail('unknown_column', `column "${name}" does not exist`, at)
    const collation = nullTest ? undefined : this.ctx.nondeterministic?.get(name)
    if (collation !== undefined) {
      fail(
        'unsupported',
        `column "${name}" has the nondeterministic collation "${collation}", which where clauses cannot follow (they compare text byte for byte); only IS [NOT] NULL is supported on it`,
        at,
      )
    }
    return { k: 'column', type, name }
  }

  private bindConst(node: Node): Expr {
    const at = location(node)
    const base = at === undefined ? {} : { location: at }
    if (node['isnull'] === true) return { k: 'const', type: UNKNOWN, value: null, ...base }
    const ival = node['ival'] as { ival?: number } | undefined
    if (ival !== undefined) return { k: 'const', type: INT4, value: ival.ival ?? 0, ...base }
    const fval = node['fval'] as { fval?: string } | undefined
    if (fval !== undefined) {
      const text = fval.fval ?? '0'
      // make_const: an integer too big for int4 becomes int8 when it fits, numeric otherwise.
      try {
        const big = parseInteger('int8', text)
        const small = Number(big)
        return small >= -2147483648 && small <= 2147483647
          ? { k: 'const', type: INT4, value: small, ...base }
          : { k: 'const', type: INT8, value: big, ...base }
      } catch {
        return { k: 'const', type: NUMERIC, value: parseNumeric(text), ...base }
      }
    }
    const sval = node['sval'] as { sval?: string } | undefined
    if (sval !== undefined) return { k: 'const', type: UNKNOWN, value: sval.sval ?? '', ...base }
    const boolval = node['boolval'] as { boolval?: boolean } | undefined
    if (boolval !== undefined) return { k: 'const', type: BOOL, value: boolval.boolval === true, ...base }
    return fail('unsupported', 'bit string constants are not supported in where clauses', at)
  }

  private bindParam(node: Node): Expr {
    const n = (node['number'] as number | undefined) ?? 0
    const at = location(node)
    const value = this.ctx.params[n - 1]
    if (n < 1 || value === undefined) fail('undefined_parameter', `there is no parameter $${n}`, at, 'params')
    this.paramsSeen.add(n)
    return { k: 'const', type: UNKNOWN, value, param: n, ...(at === undefined ? {} : { location: at }) }
  }

  // --- coercion -------------------------------------------------------------------------

  /** Coerces to `target` (coerce_type): parses unknown constants, otherwise applies a cast pathway. */
  coerce(expr: Expr, target: SqlType, context: CastContext, typmod?: Typmod): Expr {
    let result = expr
    if (expr.type.key !== target.key) {
      if (expr.k === 'const' && isUnknown(expr.type)) {
        result = this.parseConst(expr, target)
      } else {
        if (expr.type.kind === 'opaque' && !isScalar(target, 'text', 'varchar', 'bpchar')) {
          this.opaqueUse(expr, `a cast to ${displayName(target)}`)
        }
        const fn = castFunction(expr.type, target, context)
        if (fn === undefined) {
          fail('datatype_mismatch', `cannot cast type ${displayName(expr.type)} to ${displayName(target)}`)
        }
        if (castParsesText(expr.type, target) && !parsesAnyText(target) && columnsOf(expr).size > 0) {
          fail(
            'unsupported',
            `casting text computed from columns to ${displayName(target)} is not supported in where clauses (only constants can be cast to date/time types)`,
          )
        }
        const stable = castIsStable(expr.type, target)
        result = foldExpr({ k: 'call', type: target, fn, args: [expr], label: `::${target.key}`, ...(stable ? { stable } : {}) })
      }
    }
    if (typmod !== undefined) {
      result = foldExpr({ k: 'call', type: target, fn: typmodCoercion(target, typmod), args: [result], label: `::${target.key}${formatTypmod(typmod)}` })
    }
    return result
  }

  private parseConst(expr: ConstExpr, target: SqlType): Expr {
    if (expr.param !== undefined) this.typeParam(expr.param, target)
    const base = {
      ...(expr.param === undefined ? {} : { param: expr.param }),
      ...(expr.location === undefined ? {} : { location: expr.location }),
    }
    if (expr.value === null) return { k: 'const', type: target, value: null, ...base }
    if (target.kind === 'opaque') this.opaqueUse(expr, 'a constant', target)
    try {
      const value = codecFor(target, this.ctx.limits.maxArrayElements).parse(expr.value as string)
      return { k: 'const', type: target, value, ...base }
    } catch (error) {
      return valueError(error, expr)
    }
  }

  /**
   * Postgres gives a `$n` one type, its first use's, and casts it at the others;
   * here each use parses the value for its own context. The two agree only when
   * the types read a value alike, so other mixes are refused rather than
   * evaluated differently from the snapshot (`f4 = $1 AND f8 = $1`: 0.1 as
   * float8 is not 0.1 as float4).
   */
  private typeParam(n: number, type: SqlType): void {
    const first = this.paramTypes.get(n)
    if (first === undefined) {
      this.paramTypes.set(n, type)
      return
    }
    if (first.key === type.key || (readsTextAlike(first) && readsTextAlike(type)) || (isInteger(first) && isInteger(type))) return
    fail(
      'datatype_mismatch',
      `parameter $${n} is used as ${displayName(first)} and as ${displayName(type)}; Postgres gives it one type: cast it where it is used (e.g. $${n}::${displayName(type)})`,
      undefined,
      'params',
    )
  }

  private opaqueUse(expr: Expr, use: string, type: SqlType = expr.type): never {
    const subject =
      expr.k === 'column'
        ? `column "${expr.name}" has type ${displayName(type)}, which where clauses support`
        : `type ${displayName(type)} is supported in where clauses`
    return fail('unsupported', `${subject} only in IS [NOT] NULL and casts to text (here: ${use})`)
  }

  /** coerce_to_boolean: for WHERE, AND/OR/NOT and IS TRUE and friends. */
  private toBoolean(expr: Expr, construct: string): Expr {
    if (isUnknown(expr.type)) return this.coerce(expr, BOOL, 'implicit')
    if (!isScalar(expr.type, 'bool')) {
      fail('datatype_mismatch', `argument of ${construct} must be type boolean, not type ${displayName(expr.type)}`)
    }
    return expr
  }

  // --- casts ----------------------------------------------------------------------------

  private bindTypeCast(node: Node): Expr {
    const typeName = resolveTypeName(node['typeName'] as never, this.ctx.enums)
    const [argTag, argNode] = nodeOf(node['arg'])
    if (argTag === 'A_ArrayExpr') return this.coerce(this.bindArray(argNode, typeName.type), typeName.type, 'explicit', typeName.typmod)
    const arg = this.bind(node['arg'])
    return this.coerce(arg, typeName.type, 'explicit', typeName.typmod)
  }

  private bindCollate(node: Node): Expr {
    const names = strings(node['collname'])
    const arg = this.bind(node['arg'])
    const name = names[names.length - 1] ?? ''
    if (!isCollatable(arg.type) && !isScalar(arg.type, 'unknown')) {
      fail('datatype_mismatch', `collations are not supported by type ${displayName(arg.type)}`, location(node))
    }
    // Evaluation always compares in C order, so only collations meaning exactly that are accepted.
    if (!['C', 'POSIX', 'ucs_basic'].includes(name) || (names.length === 2 && names[0] !== 'pg_catalog')) {
      fail('unsupported', `collation "${names.join('.')}" is not supported in where clauses (only "C")`, location(node))
    }
    return arg
  }

  // --- operators ------------------------------------------------------------------------

  private operatorName(node: Node): string {
    const names = strings(node['name'])
    if (names.length === 2 && names[0] === 'pg_catalog') return names[1] ?? ''
    if (names.length !== 1) fail('unsupported', `operator ${names.join('.')} is not supported in where clauses`, location(node))
    return names[0] ?? ''
  }

  private bindAExpr(node: Node): Expr {
    const kind = node['kind'] as string
    const at = location(node)
    switch (kind) {
      case 'AEXPR_OP':
      case 'AEXPR_LIKE':
      case 'AEXPR_ILIKE': {
        const op = this.operatorName(node)
        const left = node['lexpr'] === undefined ? undefined : this.bind(node['lexpr'])
        const right = this.bind(node['rexpr'])
        return this.makeOperator(op, left, right, at, node)
      }
      case 'AEXPR_OP_ANY':
      case 'AEXPR_OP_ALL': {
        const op = this.operatorName(node)
        return this.makeScalarArray(op, kind === 'AEXPR_OP_ANY', this.bind(node['lexpr']), this.bind(node['rexpr']), at, node)
      }
      case 'AEXPR_DISTINCT':
      case 'AEXPR_NOT_DISTINCT': {
        const distinct = this.makeDistinct(this.bind(node['lexpr']), this.bind(node['rexpr']), at)
        return kind === 'AEXPR_DISTINCT' ? distinct : foldExpr({ k: 'not', type: BOOL, arg: distinct })
      }
      case 'AEXPR_IN':
        return this.bindIn(node)
      case 'AEXPR_BETWEEN':
      case 'AEXPR_NOT_BETWEEN':
      case 'AEXPR_BETWEEN_SYM':
      case 'AEXPR_NOT_BETWEEN_SYM':
        return this.bindBetween(node, kind)
      case 'AEXPR_NULLIF':
        return fail('unsupported', 'NULLIF is not supported in where clauses', at)
      case 'AEXPR_SIMILAR':
        return fail('unsupported', 'SIMILAR TO is not supported in where clauses', at)
      default:
        return fail('unsupported', `${kind} expressions are not supported in where clauses`, at)
    }
  }

  private describeOperator(op: string, left: SqlType | undefined, right: SqlType): string {
    return left === undefined ? `${op} ${displayName(right)}` : `${displayName(left)} ${op} ${displayName(right)}`
  }

  private resolutionFailure(resolution: Resolution, what: string, kind: 'operator' | 'function', at?: number): never {
    switch (resolution.kind) {
      case 'none':
        return kind === 'operator'
          ? fail('undefined_operator', `operator does not exist: ${what}`, at)
          : fail('undefined_function', `function ${what} does not exist`, at)
      case 'ambiguous':
        return kind === 'operator'
          ? fail('undefined_operator', `operator is not unique: ${what}`, at)
          : fail('undefined_function', `function ${what} is not unique`, at)
      case 'polymorphic':
        return fail('datatype_mismatch', resolution.message, at)
      case 'found':
        throw new Error('unreachable')
    }
  }

  /** make_op: resolve, coerce the arguments, pick the implementation. `node`: the clause's node, noted if collated. */
  makeOperator(op: string, left: Expr | undefined, right: Expr, at?: number, node?: Node): Expr {
    if (!OPERATOR_NAMES.has(op)) fail('unsupported', `operator ${op} is not supported in where clauses`, at)
    for (const arg of [left, right]) {
      if (arg !== undefined && arg.type.kind === 'opaque') this.opaqueUse(arg, `operator ${op}`)
    }
    const inputs = left === undefined ? [right.type] : [left.type, right.type]
    const resolution = resolveOperator(operatorCandidates(op, left === undefined ? 1 : 2), inputs)
    // Only a failure prints it: a restart binds 100k clauses that succeed.
    const what = (): string => this.describeOperator(op, left?.type, right.type)
    if (resolution.kind !== 'found') return this.resolutionFailure(resolution, what(), 'operator', at)
    const { signature, args } = resolution
    if (!signature.supported) fail('unsupported', `operator is not supported in where clauses: ${what()}`, at)
    if (left === undefined) {
      const argType = args[0] as SqlType
      const fn = prefixFn(op, argType)
      if (fn === undefined) fail('unsupported', `operator is not supported in where clauses: ${what()}`, at)
      const arg = this.coerce(right, argType, 'implicit')
      return foldExpr({ k: 'call', type: signature.result, fn, args: [arg], label: op, operator: op })
    }
    const [lt, rt] = args as [SqlType, SqlType]
    this.noteCollated(node, op, lt)
    const l = this.coerce(left, lt, 'implicit')
    const r = this.coerce(right, rt, 'implicit')
    const fn = this.operatorFn(op, lt, rt, signature, r)
    if (fn === undefined) fail('unsupported', `operator is not supported in where clauses: ${what()}`, at)
    const stable = COMPARISON_OPERATORS.has(op) && comparisonIsStable(lt, rt)
    return foldExpr({ k: 'call', type: signature.result, fn, args: [l, r], label: op, operator: op, ...(stable ? { stable } : {}) })
  }

  private operatorFn(
    op: string,
    left: SqlType,
    right: SqlType,
    signature: Signature,
    rightExpr: Expr | undefined,
  ): ((a: unknown, b: unknown) => unknown) | undefined {
    if (COMPARISON_OPERATORS.has(op)) return comparisonFn(op, left, right)
    if (LIKE_OPERATORS[op] !== undefined) {
      const pattern = rightExpr?.k === 'const' && typeof rightExpr.value === 'string' ? rightExpr.value : undefined
      return likeFn(op, pattern)
    }
    if (op === '@>' || op === '<@' || op === '&&') {
      const constant = rightExpr?.k === 'const' && rightExpr.value !== null ? (rightExpr.value as ArrayValue<unknown>) : undefined
      return arrayOperatorFn(op, left, constant)
    }
    return arithmeticFn(op, left, right, signature.result)
  }

  /** make_scalar_array_op: `left op ANY/ALL (right)`. */
  makeScalarArray(op: string, any: boolean, left: Expr, right: Expr, at?: number, node?: Node): Expr {
    if (!OPERATOR_NAMES.has(op)) fail('unsupported', `operator ${op} is not supported in where clauses`, at)
    if (left.type.kind === 'opaque') this.opaqueUse(left, `operator ${op}`)
    let elementType: SqlType
    if (isUnknown(right.type)) elementType = UNKNOWN
    else if (right.type.kind === 'array') elementType = right.type.element
    else return fail('datatype_mismatch', 'op ANY/ALL (array) requires array on right side', at)
    if (elementType.kind === 'opaque') this.opaqueUse(right, `operator ${op}`)
    const resolution = resolveOperator(operatorCandidates(op, 2), [left.type, elementType])
    const what = this.describeOperator(op, left.type, elementType)
    if (resolution.kind !== 'found') return this.resolutionFailure(resolution, what, 'operator', at)
    const { signature, args } = resolution
    if (!isScalar(signature.result, 'bool')) fail('datatype_mismatch', 'op ANY/ALL (array) requires operator to yield boolean', at)
    if (!signature.supported) fail('unsupported', `operator is not supported in where clauses: ${what}`, at)
    const [lt, rt] = args as [SqlType, SqlType]
    this.noteCollated(node, op, lt)
    const arrayType = rt.kind === 'array' && right.type.kind === 'array' ? right.type : arrayOf(rt as ElementType)
    const l = this.coerce(left, lt, 'implicit')
    const r = this.coerce(right, arrayType, 'implicit')
    const fn = this.operatorFn(op, lt, rt, signature, undefined)
    if (fn === undefined) fail('unsupported', `operator is not supported in where clauses: ${what}`, at)
    const stable = COMPARISON_OPERATORS.has(op) && comparisonIsStable(lt, rt)
    return foldExpr({ k: 'scalararray', type: BOOL, any, operator: op, fn, left: l, right: r, ...(stable ? { stable } : {}) })
  }

  private noteCollated(node: Node | undefined, op: string, left: SqlType): void {
    if (node !== undefined && COLLATION_SENSITIVE_OPERATORS.has(op) && isCollatable(left)) this.ctx.collated?.add(node)
  }

  private makeDistinct(left: Expr, right: Expr, at?: number): Expr {
    for (const arg of [left, right]) if (arg.type.kind === 'opaque') this.opaqueUse(arg, 'IS DISTINCT FROM')
    const resolution = resolveOperator(operatorCandidates('=', 2), [left.type, right.type])
    const what = this.describeOperator('=', left.type, right.type)
    if (resolution.kind !== 'found') return this.resolutionFailure(resolution, what, 'operator', at)
    const [lt, rt] = resolution.args as [SqlType, SqlType]
    if (!resolution.signature.supported) fail('unsupported', `operator is not supported in where clauses: ${what}`, at)
    const equals = equality(lt, rt)
    if (equals === undefined) fail('unsupported', `operator is not supported in where clauses: ${what}`, at)
    const stable = comparisonIsStable(lt, rt)
    return foldExpr({
      k: 'distinct',
      type: BOOL,
      ...(stable ? { stable } : {}),
      equals,
      left: this.coerce(left, lt, 'implicit'),
      right: this.coerce(right, rt, 'implicit'),
    })
  }

  /** transformAExprIn: constants become one `= ANY(ARRAY[...])`, column items separate comparisons. */
  private bindIn(node: Node): Expr {
    const op = this.operatorName(node)
    const useOr = op === '='
    const at = location(node)
    const items = ((node['rexpr'] as { List?: { items?: unknown[] } }).List?.items ?? []) as unknown[]
    if (items.length > this.ctx.limits.maxListItems) {
      fail('limit_exceeded', `IN list has ${items.length} items; the limit is ${this.ctx.limits.maxListItems}`, at)
    }
    const left = this.bind(node['lexpr'])
    const rights = items.map((item) => this.bind(item))
    let others = rights
    const parts: Expr[] = []
    const constants = rights.filter((r) => columnsOf(r).size === 0)
    if (constants.length > 1) {
      const all = [left, ...constants]
      const common = selectCommonType(
        all.map((e) => e.type),
        'IN',
      )
      if (!('error' in common) && common.kind !== 'opaque' && verifyCommonType(common, all.map((e) => e.type))) {
        const element = common as ElementType
        const array = this.arrayOfExprs(
          constants.map((c) => this.coerce(c, element, 'implicit')),
          arrayOf(element),
        )
        parts.push(this.makeScalarArray(op, useOr, left, array, at))
        others = rights.filter((r) => columnsOf(r).size > 0)
      }
    }
    for (const right of others) parts.push(this.makeOperator(op, left, right, at))
    if (parts.length === 1) return parts[0] as Expr
    return foldExpr({ k: useOr ? 'or' : 'and', type: BOOL, args: parts })
  }

  private arrayOfExprs(elements: readonly Expr[], type: SqlType): Expr {
    return foldExpr({ k: 'array', type, elements, nested: false })
  }

  /** transformAExprBetween: `a >= b AND a <= c` and its negated and symmetric forms. */
  private bindBetween(node: Node, kind: string): Expr {
    const at = location(node)
    const items = ((node['rexpr'] as { List?: { items?: unknown[] } }).List?.items ?? []) as unknown[]
    const value = () => this.bind(node['lexpr'])
    const low = () => this.bind(items[0])
    const high = () => this.bind(items[1])
    const and = (args: Expr[]): Expr => foldExpr({ k: 'and', type: BOOL, args })
    const or = (args: Expr[]): Expr => foldExpr({ k: 'or', type: BOOL, args })
    const inRange = (lo: () => Expr, hi: () => Expr): Expr =>
      and([this.makeOperator('>=', value(), lo(), at, node), this.makeOperator('<=', value(), hi(), at, node)])
    const outOfRange = (lo: () => Expr, hi: () => Expr): Expr =>
      or([this.makeOperator('<', value(), lo(), at, node), this.makeOperator('>', value(), hi(), at, node)])
    switch (kind) {
      case 'AEXPR_BETWEEN':
        return inRange(low, high)
      case 'AEXPR_NOT_BETWEEN':
        return outOfRange(low, high)
      case 'AEXPR_BETWEEN_SYM':
        return or([inRange(low, high), inRange(high, low)])
      default:
        return and([outOfRange(low, high), outOfRange(high, low)])
    }
  }

  // --- boolean connectives --------------------------------------------------------------

  private bindBoolExpr(node: Node): Expr {
    const op = node['boolop'] as string
    const word = op === 'AND_EXPR' ? 'AND' : op === 'OR_EXPR' ? 'OR' : 'NOT'
    const args = (node['args'] as unknown[]).map((a) => this.toBoolean(this.bind(a), word))
    if (word === 'NOT') return foldExpr({ k: 'not', type: BOOL, arg: args[0] as Expr })
    return foldExpr({ k: word === 'AND' ? 'and' : 'or', type: BOOL, args })
  }

  // --- COALESCE, ARRAY[], functions ---------------------------------------------------------

  private bindCoalesce(node: Node): Expr {
    const args = (node['args'] as unknown[]).map((a) => this.bind(a))
    for (const arg of args) if (arg.type.kind === 'opaque') this.opaqueUse(arg, 'COALESCE')
    const common = selectCommonType(
      args.map((a) => a.type),
      'COALESCE',
    )
    if ('error' in common) fail('datatype_mismatch', common.error, location(node))
    return foldExpr({ k: 'coalesce', type: common, args: args.map((a) => this.coerce(a, common, 'implicit')) })
  }

  private bindArray(node: Node, target: SqlType | undefined): Expr {
    const raw = (node['elements'] as unknown[] | undefined) ?? []
    const at = location(node)
    if (raw.length > this.ctx.limits.maxListItems) {
      fail('limit_exceeded', `ARRAY[] has ${raw.length} elements; the limit is ${this.ctx.limits.maxListItems}`, at)
    }
    const nested = raw.length > 0 && raw.every((r) => nodeOf(r)[0] === 'A_ArrayExpr')
    if (nested) {
      const subs = raw.map((r) => this.bindArray(nodeOf(r)[1], target))
      const common = selectCommonType(
        subs.map((s) => s.type),
        'ARRAY',
      )
      if ('error' in common) fail('datatype_mismatch', common.error, at)
      return foldExpr({ k: 'array', type: common, elements: subs.map((s) => this.coerce(s, common, 'implicit')), nested: true })
    }
    if (raw.length === 0) {
      if (target === undefined || target.kind !== 'array') {
        fail('datatype_mismatch', 'cannot determine type of empty array (cast it, e.g. ARRAY[]::integer[])', at)
      }
      return { k: 'const', type: target, value: EMPTY_ARRAY }
    }
    const elements = raw.map((r) => this.bind(r))
    for (const e of elements) if (e.type.kind === 'opaque') this.opaqueUse(e, 'ARRAY[]')
    let element: SqlType
    if (target !== undefined && target.kind === 'array') {
      element = target.element
    } else {
      const common = selectCommonType(
        elements.map((e) => e.type),
        'ARRAY',
      )
      if ('error' in common) fail('datatype_mismatch', common.error, at)
      element = common
    }
    if (element.kind === 'array') fail('unsupported', 'arrays of arrays are not supported', at)
    const context: CastContext = target === undefined ? 'implicit' : 'explicit'
    return foldExpr({
      k: 'array',
      type: arrayOf(element as ElementType),
      elements: elements.map((e) => this.coerce(e, element, context)),
      nested: false,
    })
  }

  private bindFuncCall(node: Node): Expr {
    const names = strings(node['funcname'])
    const at = location(node)
    const name = names.length === 2 && names[0] === 'pg_catalog' ? (names[1] ?? '') : names.length === 1 ? (names[0] ?? '') : ''
    if (name === '' || !FUNCTION_NAMES.has(name)) {
      fail('unsupported', `function ${names.join('.')} is not supported in where clauses`, at)
    }
    for (const flag of ['agg_star', 'agg_distinct', 'func_variadic', 'agg_within_group']) {
      if (node[flag] === true) fail('unsupported', `${name}() with this syntax is not supported in where clauses`, at)
    }
    for (const part of ['agg_order', 'agg_filter', 'over']) {
      if (node[part] !== undefined) fail('unsupported', `${name}() with this syntax is not supported in where clauses`, at)
    }
    const args = ((node['args'] as unknown[] | undefined) ?? []).map((a) => this.bind(a))
    for (const arg of args) if (arg.type.kind === 'opaque') this.opaqueUse(arg, `function ${name}`)
    const resolution = resolveFunction(
      functionCandidates(name, args.length),
      args.map((a) => a.type),
    )
    const what = `${name}(${args.map((a) => displayName(a.type)).join(', ')})`
    if (resolution.kind !== 'found') return this.resolutionFailure(resolution, what, 'function', at)
    const declared = resolution.args
    if (COLLATION_SENSITIVE_FUNCTIONS.has(name) && declared.some((type) => isCollatable(type as SqlType))) this.ctx.collated?.add(node)
    const coerced = args.map((a, i) => this.coerce(a, declared[i] as SqlType, 'implicit'))
    const fn = functionImpl(name, declared)
    return foldExpr({ k: 'call', type: resolution.signature.result, fn, args: coerced, label: name })
  }
}
