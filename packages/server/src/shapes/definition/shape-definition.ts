import { createHash } from 'node:crypto'
import type { LogMode, ReplicaMode, ShapeDefinitionParams } from '@sluice/protocol'
import type { WhereClause, WhereColumn } from '../../where/index.js'
import { compileWhere } from '../../where/index.js'

/**
 * What makes a shape a shape (docs/protocol.md §2, "Shape identity"), in one
 * normalised spelling: two requests share a shape (and a handle) exactly when
 * their definitions are equal, which {@link definitionKey} reduces to string
 * equality.
 *
 * Normalisation:
 * - `where` is the compiled clause's `canonical` text, so whitespace, keyword
 *   and unquoted-identifier case, redundant parentheses, `!=`/`<>` and the like
 *   do not split a shape.
 * - `params` keep only the `$n` the canonical clause references: a value the
 *   clause never reads cannot change which rows it selects. Keyed by `n` as
 *   text so a gap (`$2` used, `$1` not) needs no placeholder value.
 * - `columns` are sorted (by code point, as Electric's `Enum.sort` orders
 *   binaries) and deduplicated; `undefined` means every column and is a
 *   different shape from an explicit full list, as in Electric.
 *
 * Not yet part of the identity: `queryable_columns` (docs/protocol.md §2 lists it);
 * the HTTP layer does not use it yet.
 */
export interface ShapeDefinition {
  readonly schema: string
  readonly table: string
  /** Canonical text of the where clause (`WhereClause.canonical`), or undefined for every row. */
  readonly where: string | undefined
  /** Values of the `$n` the clause references, keyed by `n` (`"1"`, `"2"`...). */
  readonly params: Readonly<Record<string, string>>
  /** Sorted, without duplicates; undefined selects every column. */
  readonly columns: readonly string[] | undefined
  readonly replica: ReplicaMode
  readonly log: LogMode
}

/**
 * Bumped whenever the key's layout or the normalisation changes, because the
 * key feeds the hash inside handles and the registry's lookup; keys of two
 * versions must never compare equal by accident.
 */
export const DEFINITION_KEY_VERSION = 1

/**
 * Normalises a parsed request's definition. Pure: the where clause must already
 * be compiled against the table (see {@link compileDefinition}), because only
 * the compiler knows the canonical spelling.
 */
export function normalizeDefinition(input: ShapeDefinitionParams, where: WhereClause | undefined): ShapeDefinition {
  const hasWhere = input.where !== undefined && input.where.trim() !== ''
  if (hasWhere && where === undefined) {
    throw new TypeError('normalizeDefinition: the request has a where clause but no compiled clause was given')
  }
  const canonical = hasWhere ? where?.canonical : undefined
  return freezeDefinition({
    schema: input.table.schema,
    table: input.table.name,
    where: canonical,
    params: canonical === undefined ? {} : referencedParams(canonical, input.params),
    columns: input.columns === undefined ? undefined : sortColumns(input.columns),
    replica: input.replica,
    log: input.log,
  })
}

export interface CompiledDefinition {
  readonly definition: ShapeDefinition
  readonly where: WhereClause | undefined
}

/** Compiles the where clause against the table's columns, then normalises. Throws `WhereClauseError`. */
export async function compileDefinition(
  input: ShapeDefinitionParams,
  columns: readonly WhereColumn[],
  tables?: (schema: string, name: string) => Promise<readonly WhereColumn[] | undefined>,
): Promise<CompiledDefinition> {
  const source = input.where
  const where =
    source === undefined || source.trim() === ''
      ? undefined
      : await compileWhere(source, { columns, params: input.params, ...(tables === undefined ? {} : { tables }) })
  return { definition: normalizeDefinition(input, where), where }
}

/** The list of every definition without parameters. */
const NO_PARAM_LIST: readonly string[] = Object.freeze([])

/**
 * The positional values to recompile a stored definition's where clause with
 * (`compileWhere(def.where, { params: paramList(def) })`). Unreferenced
 * positions below the highest one are `''`: the clause never reads them.
 */
export function paramList(def: ShapeDefinition): readonly string[] {
  // A plain loop: a restart calls this for every stored shape.
  let count = 0
  for (const key in def.params) {
    const n = Number(key)
    if (n > count) count = n
  }
  // Most clauses have none, and a restored clause keeps its list for the shape's life: one shared empty list.
  if (count === 0) return NO_PARAM_LIST
  const list = new Array<string>(count)
  for (let i = 0; i < count; i++) list[i] = def.params[String(i + 1)] ?? ''
  return list
}

/**
 * The canonical JSON text of a definition: a fixed-order array, so it never
 * depends on property insertion order. Equal definitions give equal keys and
 * vice versa.
 */
export function definitionKey(def: ShapeDefinition): string {
  const known = frozenKeys.get(def)
  if (known !== undefined) return known
  const key = buildKey(def)
  // A frozen definition (what the registry and the compiler hand out) keeps its key: requests for a known shape ask for it each time.
  if (isFrozenDefinition(def)) frozenKeys.set(def, key)
  return key
}

let frozenKeys = new WeakMap<ShapeDefinition, string>()

/**
 * Starts the keys of frozen definitions afresh. A WeakMap drops the entries of
 * dead definitions but keeps the table they grew (about 50 bytes a shape at its
 * peak count): after a sweep retired thousands of shapes, a new map is the way
 * to give it back; the live shapes' keys are built again when next asked for.
 */
export function forgetDefinitionKeys(): void {
  frozenKeys = new WeakMap()
}

/**
 * {@link definitionKey} without its cache: for a caller that keeps the key
 * itself (the registry restoring 100k shapes, whose definitions no one asks
 * the key of again), so the cache holds no entry for each.
 */
export function uncachedDefinitionKey(def: ShapeDefinition): string {
  return buildKey(def)
}

function buildKey(def: ShapeDefinition): string {
  const numbers: number[] = []
  for (const key in def.params) numbers.push(Number(key))
  if (numbers.length > 1) numbers.sort((a, b) => a - b)
  const params = numbers.map((n) => [n, def.params[String(n)] ?? ''])
  return JSON.stringify([
    DEFINITION_KEY_VERSION,
    def.schema,
    def.table,
    def.where ?? null,
    params,
    def.columns ?? null,
    def.replica,
    def.log,
  ])
}

/**
 * A short stable hash of a definition: the first 8 bytes of SHA-256 over the
 * UTF-8 {@link definitionKey}, read big-endian as an unsigned decimal integer
 * (at most 20 digits). Electric uses `:erlang.phash2`, which we cannot
 * reproduce from TypeScript; clients treat handles as opaque, so any stable
 * hash will do. Decimal keeps handles to `[0-9-]`. Stable across processes and
 * versions of Node; it changes only with DEFINITION_KEY_VERSION.
 */
export function definitionHash(def: ShapeDefinition): string {
  const digest = createHash('sha256').update(definitionKey(def), 'utf8').digest()
  return digest.readBigUInt64BE(0).toString(10)
}

export function definitionsEqual(a: ShapeDefinition, b: ShapeDefinition): boolean {
  return definitionKey(a) === definitionKey(b)
}

/**
 * Freezes a definition (and its arrays) so a registry's copy cannot be changed
 * under it. One frozen already (what the compiler hands out) is its own copy:
 * a second object per shape would be held for the shape's whole life.
 */
export function freezeDefinition(def: ShapeDefinition): ShapeDefinition {
  if (isFrozenDefinition(def)) return def
  return Object.freeze({
    schema: def.schema,
    table: def.table,
    where: def.where,
    params: hasKeys(def.params) ? Object.freeze({ ...def.params }) : NO_PARAMS,
    columns: def.columns === undefined ? undefined : Object.freeze([...def.columns]),
    replica: def.replica,
    log: def.log,
  })
}

/** Frozen as freezeDefinition leaves it (the compiler's and decodeShapeMeta's are): its own copy, which nothing can change. */
function isFrozenDefinition(def: ShapeDefinition): boolean {
  return Object.isFrozen(def) && Object.isFrozen(def.params) && (def.columns === undefined || Object.isFrozen(def.columns))
}

/** The params of every definition that has none (most): one frozen object, not one per shape. */
export const NO_PARAMS: ShapeDefinition['params'] = Object.freeze({})

export function hasKeys(o: object): boolean {
  for (const _ in o) return true
  return false
}

/** Code-point order, not UTF-16 unit order, so astral characters sort as Electric (and Postgres "C") sorts them. */
export function compareCodePoints(a: string, b: string): number {
  const ai = a[Symbol.iterator]()
  const bi = b[Symbol.iterator]()
  for (;;) {
    const x = ai.next()
    const y = bi.next()
    if (x.done === true) return y.done === true ? 0 : -1
    if (y.done === true) return 1
    const d = (x.value.codePointAt(0) ?? 0) - (y.value.codePointAt(0) ?? 0)
    if (d !== 0) return d
  }
}

function sortColumns(columns: readonly string[]): string[] {
  return [...new Set(columns)].sort(compareCodePoints)
}

/**
 * The `$n` placeholders of a canonical clause, skipping string literals
 * ('...' with '' escapes) and quoted identifiers ("..." with "" escapes),
 * where a `$1` is just text. The canonical printer emits only these two
 * quoting forms (no E'' or dollar quoting), which is what makes a scan safe.
 */
export function referencedParamNumbers(canonical: string): number[] {
  const found = new Set<number>()
  let i = 0
  while (i < canonical.length) {
    const c = canonical[i]
    if (c === "'" || c === '"') {
      // A doubled quote is an escape; the scan just re-enters the quoted run.
      const end = canonical.indexOf(c, i + 1)
      i = end === -1 ? canonical.length : end + 1
    } else if (c === '$') {
      const match = /^\d+/.exec(canonical.slice(i + 1))
      if (match !== null) {
        found.add(Number(match[0]))
        i += 1 + match[0].length
      } else i++
    } else i++
  }
  return [...found].sort((a, b) => a - b)
}

function referencedParams(canonical: string, params: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {}
  for (const n of referencedParamNumbers(canonical)) {
    const value = params[n - 1]
    // The compiler rejects a clause referencing a missing parameter, so this is a caller's bug.
    if (value === undefined) throw new TypeError(`normalizeDefinition: $${n} is referenced but has no value`)
    out[String(n)] = value
  }
  return out
}
