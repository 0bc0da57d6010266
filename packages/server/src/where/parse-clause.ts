import { loadModule, parseSync, scanSync } from 'libpg-query'
import type { WhereLimits } from './limits.js'
import { WhereClauseError } from './where-error.js'

/**
 * The clause goes to Postgres's own parser (libpg_query, compiled to WASM) as
 * `SELECT 1 WHERE <clause>`, and only a statement of exactly that shape is
 * accepted: one SELECT, no FROM/GROUP BY/ORDER BY/LIMIT/UNION/locking, no `;`.
 * What comes back is the raw parse tree of the WHERE expression; nothing of the
 * text is ever passed on, so the clause cannot reach Postgres as raw SQL.
 */

export const STATEMENT_PREFIX = 'SELECT 1 WHERE '

/** A node of libpg_query's JSON parse tree: `{ "A_Expr": { ... } }`. */
export type RawNode = Readonly<Record<string, unknown>>

/** The WASM module is a process-wide singleton inside libpg-query; this only remembers it is ready. */
let loaded = false

/** Loads the WASM parser; {@link parseWhereClause} needs it done once per process. */
export async function loadWhereParser(): Promise<void> {
  if (!loaded) {
    await loadModule()
    loaded = true
  }
}

const ALLOWED_SELECT_KEYS: ReadonlySet<string> = new Set(['targetList', 'whereClause', 'limitOption', 'op'])

/**
 * Upper bound on parse-tree depth checked on the token stream before parsing:
 * libpg_query recurses natively per nesting level and overflows the stack some
 * thousands of levels deep, which must never be reached.
 */
const MAX_NESTING_TOKENS = 1000

/** A UTF-16 code unit of a surrogate pair standing alone (with the `u` flag a whole pair is one code point, not a match). */
export const LONE_SURROGATE = /\p{Cs}/u

/** Tokens that can add a level of nesting; AND/OR chains are flattened by the grammar and do not. */
const FLAT_KEYWORDS: ReadonlySet<string> = new Set(['AND', 'OR', 'TRUE', 'FALSE', 'NULL', 'AS', 'ESCAPE', 'SYMMETRIC'])
const NON_NESTING_TOKENS: ReadonlySet<string> = new Set([
  'IDENT',
  'ICONST',
  'FCONST',
  'SCONST',
  'USCONST',
  'BCONST',
  'XCONST',
  'PARAM',
  'ASCII_44', // ,
  'ASCII_41', // )
])

function countNestingTokens(clause: string): number {
  let tokens: ReturnType<typeof scanSync>['tokens']
  try {
    tokens = scanSync(clause).tokens
  } catch {
    // A lexical error (an unterminated string, say): the parser reports it properly, and without a tree
    // to build it cannot recurse.
    return 0
  }
  // Parentheses count by their depth, not their number: groups side by side (`(a = 1) OR (a = 2) …`,
  // as canonical texts print every comparison) nest no deeper than one.
  let count = 0
  let depth = 0
  let deepest = 0
  for (const token of tokens) {
    if (token.text === '(') {
      if (++depth > deepest) deepest = depth
      continue
    }
    if (token.text === ')') {
      depth--
      continue
    }
    if (NON_NESTING_TOKENS.has(token.tokenName) || token.text === ']') continue
    const upper = token.text.toUpperCase()
    if (FLAT_KEYWORDS.has(upper)) continue
    // Unreserved and column-name keywords are mostly type names and identifiers; BETWEEN is one of them.
    if ((token.keywordKind === 1 || token.keywordKind === 2) && upper !== 'BETWEEN') continue
    count++
  }
  return count + deepest
}

/**
 * Trees of recently parsed clauses, frozen, by limits and text. Shapes that
 * differ only in their parameters (`user_id = $1`, 100k of them) share one
 * text: restoring them at start-up parsed it 100k times (a WASM parse and a
 * scan each, several seconds). Bounded: clients can send endless distinct texts.
 */
const parsed = new Map<string, RawNode>()
const PARSED_KEPT = 256

/** Parses the clause and returns the WHERE expression's raw tree (frozen: shared), or throws a {@link WhereClauseError}. */
export function parseWhereClause(clause: string, limits: WhereLimits): RawNode {
  const key = `${limits.maxLength},${limits.maxDepth},${limits.maxNodes},${limits.maxListItems},${limits.maxArrayElements},${limits.maxParams}\0${clause}`
  const known = parsed.get(key)
  if (known !== undefined) {
    // Most recently used last: eviction takes the first.
    parsed.delete(key)
    parsed.set(key, known)
    return known
  }
  const tree = deepFreeze(parseUncached(clause, limits))
  if (parsed.size >= PARSED_KEPT) parsed.delete(parsed.keys().next().value!)
  parsed.set(key, tree)
  return tree
}

/** Forgets the trees kept (after a sweep retired thousands of shapes, mostly theirs). */
export function forgetParsedClauses(): void {
  parsed.clear()
}

/** Trees kept, for tests. */
export function parsedClausesKept(): number {
  return parsed.size
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const child of Object.values(value)) deepFreeze(child)
  }
  return value
}

function parseUncached(clause: string, limits: WhereLimits): RawNode {
  if (!loaded) throw new Error('the where-clause parser is not loaded: await loadWhereParser() first')
  if (clause.length > limits.maxLength) {
    throw new WhereClauseError(
      'limit_exceeded',
      `The where clause is too long (${clause.length} characters; the limit is ${limits.maxLength})`,
    )
  }
  const nul = clause.indexOf('\0')
  if (nul >= 0) {
    // libpg_query reads a C string: it would parse the text before the NUL and silently drop the rest.
    throw new WhereClauseError('syntax_error', `At location ${STATEMENT_PREFIX.length + nul}: the where clause contains a NUL character, which Postgres does not accept`, {
      position: STATEMENT_PREFIX.length + nul,
    })
  }
  const lone = clause.search(LONE_SURROGATE)
  if (lone >= 0) {
    // Not text Postgres could receive: sent as UTF-8 it would become U+FFFD, so the snapshot and the
    // evaluator would read two different clauses.
    throw new WhereClauseError('syntax_error', `At location ${STATEMENT_PREFIX.length + lone}: the where clause contains an unpaired UTF-16 surrogate, which is not a character`, {
      position: STATEMENT_PREFIX.length + lone,
    })
  }
  const statement = STATEMENT_PREFIX + clause
  let result: { stmts?: readonly { stmt?: RawNode; stmt_len?: number }[] }
  try {
    // Every token is at least one character long, so a statement no longer
    // than the limit cannot exceed it: the scan (a second pass over the text,
    // as long as the parse itself) is for long clauses only.
    const nesting = statement.length > MAX_NESTING_TOKENS ? countNestingTokens(statement) : 0
    if (nesting > MAX_NESTING_TOKENS) {
      throw new WhereClauseError(
        'limit_exceeded',
        `The where clause has too many operators (${nesting}; the limit is ${MAX_NESTING_TOKENS}): use IN (...) for long lists`,
      )
    }
    result = parseSync(statement) as typeof result
  } catch (error) {
    if (error instanceof WhereClauseError) throw error
    const details = (error as { sqlDetails?: { message: string; cursorPosition: number } }).sqlDetails
    if (details !== undefined) {
      throw new WhereClauseError('syntax_error', `At location ${details.cursorPosition}: ${details.message}`, {
        position: details.cursorPosition,
        cause: error,
      })
    }
    if (error instanceof RangeError) {
      throw new WhereClauseError('limit_exceeded', 'The where clause is nested too deeply', { cause: error })
    }
    throw new WhereClauseError('syntax_error', `Invalid where clause: ${(error as Error).message}`, { cause: error })
  }
  const statements = result.stmts ?? []
  const first = statements[0]
  if (statements.length !== 1 || first === undefined) {
    throw new WhereClauseError('not_an_expression', 'The where clause must be a single expression: found more than one statement')
  }
  if ((first.stmt_len ?? 0) !== 0) {
    throw new WhereClauseError('not_an_expression', 'The where clause must be a single expression: ";" is not allowed')
  }
  const select = first.stmt?.['SelectStmt'] as Readonly<Record<string, unknown>> | undefined
  if (select === undefined) throw new WhereClauseError('not_an_expression', 'The where clause must be a single expression')
  const extra = Object.keys(select).filter((key) => !ALLOWED_SELECT_KEYS.has(key))
  if (select['op'] !== 'SETOP_NONE' || select['limitOption'] !== 'LIMIT_OPTION_DEFAULT' || extra.length > 0) {
    throw new WhereClauseError(
      'not_an_expression',
      'The where clause must be a single expression, without FROM, GROUP BY, HAVING, ORDER BY, LIMIT, UNION, WINDOW or locking clauses',
    )
  }
  const targets = select['targetList'] as readonly unknown[] | undefined
  const where = select['whereClause'] as RawNode | undefined
  if (targets?.length !== 1 || where === undefined) {
    throw new WhereClauseError('not_an_expression', 'The where clause must be a single expression')
  }
  checkShape(where, limits)
  return where
}

/** Depth and node count of the tree, measured without recursion. */
function checkShape(root: RawNode, limits: WhereLimits): void {
  const stack: [unknown, number][] = [[root, 1]]
  let nodes = 0
  while (stack.length > 0) {
    const [value, depth] = stack.pop() as [unknown, number]
    if (value === null || typeof value !== 'object') continue
    if (Array.isArray(value)) {
      for (const item of value) stack.push([item, depth])
      continue
    }
    const entries = Object.entries(value as Record<string, unknown>)
    // A node is an object with a single capitalised key; its fields are one level further down.
    const isNode = entries.length === 1 && /^[A-Z]/.test(entries[0]?.[0] ?? '')
    const level = isNode ? depth + 1 : depth
    if (isNode) {
      nodes++
      if (nodes > limits.maxNodes) {
        throw new WhereClauseError(
          'limit_exceeded',
          `The where clause is too large (more than ${limits.maxNodes} expression nodes)`,
        )
      }
      // A safety net before binding (which counts expression levels exactly): wrappers such as
      // String and TypeName nodes add levels here, hence the slack.
      if (level > limits.maxDepth * 3) {
        throw new WhereClauseError(
          'limit_exceeded',
          `The where clause is nested too deeply (the limit is ${limits.maxDepth} levels)`,
        )
      }
    }
    for (const [, child] of entries) stack.push([child, level])
  }
}
