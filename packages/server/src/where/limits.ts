/**
 * Bounds on what a where clause may cost us. A clause arrives from any client
 * and is then evaluated on every change to its table for as long as the shape
 * lives, so each limit caps work per change or memory per shape, never
 * expressiveness a real application needs.
 */
export interface WhereLimits {
  /** Characters of clause text. 32 KiB holds thousands of ids in an IN list yet keeps a URL-borne clause cheap to parse. */
  readonly maxLength: number
  /** Expression nesting depth. Real filters nest a handful of levels; 64 keeps every recursive pass far from the JS stack limit. */
  readonly maxDepth: number
  /** Parse-tree nodes in total: bounds binding and evaluation time per change. */
  readonly maxNodes: number
  /** Items in one IN list or ARRAY[...]. Matching is hashed by the router, but each item is still parsed and kept per shape. */
  readonly maxListItems: number
  /** Elements of one array constant ('{...}' literal or parameter). */
  readonly maxArrayElements: number
  /** `$n` parameters. */
  readonly maxParams: number
}

export const DEFAULT_WHERE_LIMITS: WhereLimits = Object.freeze({
  maxLength: 32 * 1024,
  maxDepth: 64,
  maxNodes: 20_000,
  maxListItems: 5_000,
  maxArrayElements: 10_000,
  maxParams: 1_000,
})
