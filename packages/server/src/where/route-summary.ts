import type { RowValues } from '@sluice/protocol'
import type { IndexableConjunct } from './conjuncts.js'
import { type WhereClause, type WhereColumn, type WhereResult, type WhereVerdict, compileWhereSync } from './where-clause.js'
import { EvaluationFailure } from './where-error.js'

/**
 * What the shape router needs of a clause that is exactly one indexable
 * conjunct (`id = 5`, `owner = $1`, `tag IN ('a', 'b')`, `flag`): the kind,
 * the column, the key domain and the keys. A shape's meta records it when the
 * shape is made, so a restart can file the shape in the router's hash index
 * without parsing, binding and compiling its clause: with 100k shapes of
 * distinct clause texts that was most of the start-up's CPU and garbage.
 *
 * The domain and key texts are the compiler's (conjuncts.ts), so a release
 * that changes how either is written must raise {@link ROUTE_SUMMARY_VERSION}:
 * a summary of another version is ignored and its clause compiled. Restore
 * also compiles the first shape of each domain and checks its summary against
 * the compiled conjunct, so a mismatch the version missed falls back to
 * compiling every shape of that domain.
 */
export interface RouteSummary {
  readonly kind: IndexableConjunct['kind']
  readonly column: string
  readonly domain: string
  readonly keys: readonly string[]
}

export const ROUTE_SUMMARY_VERSION = 1

/** The clause's summary when the router files it under one conjunct whose hit is the verdict; undefined otherwise. */
export function routeSummaryOf(where: WhereClause | undefined): RouteSummary | undefined {
  const exact = where?.exact
  // No keys (`x IN ()`): the router evaluates such a clause instead (shape-index.ts chooseConjunct).
  if (exact === undefined || exact.keys.length === 0 || where?.subqueries !== undefined) return undefined
  return { kind: exact.kind, column: exact.column, domain: exact.domain, keys: exact.keys }
}

/** Whether a compiled conjunct is the one the summary describes. */
export function sameRoute(summary: RouteSummary, conjunct: IndexableConjunct | undefined): boolean {
  if (conjunct === undefined) return false
  if (conjunct.kind !== summary.kind || conjunct.column !== summary.column || conjunct.domain !== summary.domain) return false
  if (conjunct.keys.length !== summary.keys.length) return false
  for (let i = 0; i < conjunct.keys.length; i++) if (conjunct.keys[i] !== summary.keys[i]) return false
  return true
}

/**
 * A restored clause that the router can file from its summary alone, and that
 * compiles itself against `columns` the first time anything else is asked of
 * it: a row to judge, the columns it reads. `rowKeys` comes from `domainKeys`,
 * a compiled conjunct of the same table and domain (any conjunct of a domain
 * computes the same keys from a row), so filing this shape and looking up a
 * row never compile its clause at all.
 *
 * Its `source` is the definition's where text, which is the canonical text
 * already (shape-definition.ts), so `canonical` needs no compiling either.
 */
export class RestoredClause implements WhereClause {
  readonly exact: IndexableConjunct
  readonly subqueries = undefined
  #compiled: WhereClause | undefined = undefined

  constructor(
    private readonly text: ClauseText,
    summary: RouteSummary,
    domainKeys: IndexableConjunct,
    private readonly tableColumns: readonly WhereColumn[],
  ) {
    this.exact = new SummaryConjunct(summary, domainKeys)
  }

  get source(): string {
    return this.text.source
  }

  get params(): readonly string[] {
    return this.text.params
  }

  /** Asked for once, when the router files the shape: a list made then, not one kept per restored shape. */
  get conjuncts(): readonly IndexableConjunct[] {
    return [this.exact]
  }

  /** Whether the clause was compiled (something besides routing asked for it). */
  get isCompiled(): boolean {
    return this.#compiled !== undefined
  }

  get canonical(): string {
    return this.source
  }

  get columns(): readonly string[] {
    return this.clause().columns
  }

  evaluate(row: RowValues): WhereResult {
    try {
      return this.clause().evaluate(row)
    } catch (error) {
      return uncompiled(error)
    }
  }

  test(row: RowValues): WhereVerdict {
    try {
      return this.clause().test(row)
    } catch (error) {
      return uncompiled(error)
    }
  }

  matches(row: RowValues): boolean {
    return this.test(row) === true
  }

  private clause(): WhereClause {
    return (this.#compiled ??= compileWhereSync(this.text.source, { columns: this.tableColumns, params: this.text.params }))
  }
}

/**
 * A restored clause's text and parameters: read when it compiles or is
 * printed, so a source that decodes them from the shape's stored meta then
 * (a restart's, restore-shapes.ts) decodes nothing for a shape that is only
 * routed to.
 */
export interface ClauseText {
  readonly source: string
  readonly params: readonly string[]
}

/**
 * It compiled when the shape was made, against the table restore found
 * unchanged, so only a bug of ours lands here; as with any evaluator bug, the
 * row is reported as failed rather than replication taken down.
 */
function uncompiled(error: unknown): EvaluationFailure {
  return new EvaluationFailure('internal_error', `restored where clause failed to compile: ${error instanceof Error ? error.message : String(error)}`)
}

class SummaryConjunct implements IndexableConjunct {
  readonly kind: IndexableConjunct['kind']
  readonly column: string
  readonly domain: string
  readonly keys: readonly string[]

  constructor(
    summary: RouteSummary,
    private readonly domainKeys: IndexableConjunct,
  ) {
    this.kind = summary.kind
    this.column = summary.column
    this.domain = summary.domain
    this.keys = summary.keys
  }

  rowKeys(row: RowValues): readonly string[] {
    return this.domainKeys.rowKeys(row)
  }
}
