import { EvaluationError } from '../where-error.js'

/**
 * Postgres arrays: any number of dimensions (up to 6), each with a lower bound
 * (1 unless the literal says `[0:2]=...`), elements flattened in row-major
 * order, NULL allowed anywhere. An empty array has no dimensions at all.
 */
export interface ArrayValue<T> {
  readonly dims: readonly number[]
  readonly lbounds: readonly number[]
  readonly items: readonly (T | null)[]
}

/** Postgres's MAXDIM. */
const MAX_DIMS = 6

export const EMPTY_ARRAY: ArrayValue<never> = Object.freeze({ dims: [], lbounds: [], items: [] })

function isArraySpace(c: string): boolean {
  return c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\v' || c === '\f'
}

function malformed(text: string, detail: string): EvaluationError {
  return new EvaluationError('invalid_text_representation', `malformed array literal: "${text}" (${detail})`)
}

/** One element as read: its text (escapes removed) or null for an unquoted NULL. */
type RawElement = string | null

/**
 * `array_in`: parses `{...}` with optional `[lb:ub]...=` dimensions, quotes,
 * backslash escapes and unquoted NULL, then reads each element with `parse`.
 */
export function parseArray<T>(
  text: string,
  parse: (element: string) => T,
  maxElements: number = Number.POSITIVE_INFINITY,
): ArrayValue<T> {
  let i = 0
  const n = text.length
  const skip = (): void => {
    while (i < n && isArraySpace(text.charAt(i))) i++
  }
  const explicitLower: number[] = []
  const explicitDims: number[] = []
  skip()
  while (text.charAt(i) === '[') {
    if (explicitDims.length >= MAX_DIMS) {
      throw new EvaluationError('array_subscript_error', `number of array dimensions exceeds the maximum allowed (${MAX_DIMS})`)
    }
    const m = /^\[([+-]?[0-9]+)(?::([+-]?[0-9]+))?\]/.exec(text.slice(i))
    if (m === null) throw malformed(text, 'bad array dimensions')
    const lower = m[2] === undefined ? 1 : Number(m[1])
    const upper = Number(m[2] ?? m[1])
    if (upper < lower) {
      throw new EvaluationError('array_subscript_error', 'upper bound cannot be less than lower bound')
    }
    explicitLower.push(lower)
    explicitDims.push(upper - lower + 1)
    i += m[0].length
    skip()
  }
  if (explicitDims.length > 0) {
    if (text.charAt(i) !== '=') throw malformed(text, 'Missing "=" after array dimensions.')
    i++
    skip()
  }
  if (text.charAt(i) !== '{') throw malformed(text, 'Array value must start with "{" or dimension information.')

  const elements: RawElement[] = []
  // Length of each sub-array seen per nesting level; all must agree (rectangular arrays only).
  const dims: (number | undefined)[] = []
  let depth = 0
  let maxDepth = -1
  const counts: number[] = []
  const finishLevel = (level: number, count: number): void => {
    const seen = dims[level]
    if (seen === undefined) dims[level] = count
    else if (seen !== count) throw malformed(text, 'Multidimensional arrays must have sub-arrays with matching dimensions.')
  }

  // Recursive descent over braces, iterative so hostile nesting cannot exhaust the stack.
  i++
  depth = 1
  counts.push(0)
  let expectElement = true
  let leafLevel: number | undefined
  while (depth > 0) {
    skip()
    if (i >= n) throw malformed(text, 'Unexpected end of input.')
    const c = text.charAt(i)
    if (c === '{') {
      if (!expectElement) throw malformed(text, 'Unexpected "{" character.')
      if (leafLevel !== undefined && depth >= leafLevel) throw malformed(text, 'Unexpected "{" character.')
      if (depth >= MAX_DIMS) {
        throw new EvaluationError('array_subscript_error', `number of array dimensions exceeds the maximum allowed (${MAX_DIMS})`)
      }
      counts[depth - 1] = (counts[depth - 1] ?? 0) + 1
      depth++
      counts[depth - 1] = 0
      i++
      expectElement = true
      continue
    }
    if (c === '}') {
      const count = counts[depth - 1] ?? 0
      if (expectElement && count > 0) throw malformed(text, 'Unexpected "}" character.')
      if (count === 0) {
        // '{}' is only allowed as the whole (empty) array.
        if (depth !== 1 || elements.length > 0) throw malformed(text, 'Unexpected "}" character.')
      } else finishLevel(depth - 1, count)
      if (count > 0 && leafLevel === undefined && elements.length > 0) leafLevel = depth
      maxDepth = Math.max(maxDepth, depth)
      depth--
      i++
      expectElement = false
      continue
    }
    if (c === ',') {
      if (expectElement) throw malformed(text, 'Unexpected "," character.')
      i++
      expectElement = true
      continue
    }
    if (!expectElement) throw malformed(text, 'Expected "," or "}".')
    // An element: only at the innermost level.
    if (leafLevel !== undefined && depth !== leafLevel) throw malformed(text, 'Unexpected array element.')
    if (leafLevel === undefined) leafLevel = depth
    const [element, next] = readElement(text, i)
    i = next
    elements.push(element)
    if (elements.length > maxElements) {
      throw new EvaluationError('array_subscript_error', `array has more than ${maxElements} elements`)
    }
    counts[depth - 1] = (counts[depth - 1] ?? 0) + 1
    expectElement = false
  }
  skip()
  if (i !== n) throw malformed(text, 'Junk after closing right brace.')

  if (elements.length === 0) {
    if (explicitDims.length > 0) throw malformed(text, 'Specified array dimensions do not match array contents.')
    return EMPTY_ARRAY
  }
  const shape = dims.slice(0, leafLevel).map((d) => d ?? 0)
  if (explicitDims.length > 0 && (explicitDims.length !== shape.length || explicitDims.some((d, k) => d !== shape[k]))) {
    throw malformed(text, 'Specified array dimensions do not match array contents.')
  }
  const lbounds = explicitDims.length > 0 ? explicitLower : shape.map(() => 1)
  return { dims: shape, lbounds, items: elements.map((e) => (e === null ? null : parse(e))) }
}

function readElement(text: string, start: number): [RawElement, number] {
  let i = start
  const n = text.length
  if (text.charAt(i) === '"') {
    i++
    let out = ''
    for (;;) {
      if (i >= n) throw malformed(text, 'Unexpected end of input.')
      const c = text.charAt(i)
      if (c === '\\') {
        if (i + 1 >= n) throw malformed(text, 'Unexpected end of input.')
        out += text.charAt(i + 1)
        i += 2
      } else if (c === '"') {
        i++
        break
      } else {
        out += c
        i++
      }
    }
    while (i < n && isArraySpace(text.charAt(i))) i++
    const after = text.charAt(i)
    if (after !== ',' && after !== '}') throw malformed(text, 'Incorrectly quoted array element.')
    return [out, i]
  }
  let out = ''
  // Length of `out` up to its last escaped character: trailing spaces before it are kept.
  let protectedLength = 0
  let escaped = false
  for (;;) {
    if (i >= n) throw malformed(text, 'Unexpected end of input.')
    const c = text.charAt(i)
    if (c === ',' || c === '}') break
    if (c === '{' || c === '"') throw malformed(text, `Unexpected "${c}" character.`)
    if (c === '\\') {
      if (i + 1 >= n) throw malformed(text, 'Unexpected end of input.')
      out += text.charAt(i + 1)
      protectedLength = out.length
      escaped = true
      i += 2
      continue
    }
    out += c
    i++
  }
  let end = out.length
  while (end > protectedLength && isArraySpace(out.charAt(end - 1))) end--
  out = out.slice(0, end)
  if (out === '' && !escaped) throw malformed(text, 'Unexpected "," character.')
  if (!escaped && out.toUpperCase() === 'NULL') return [null, i]
  return [out, i]
}

/** `array_out`, given the element type's output function. */
export function formatArray<T>(value: ArrayValue<T>, format: (element: T) => string): string {
  if (value.dims.length === 0) return '{}'
  let prefix = ''
  if (value.lbounds.some((lb) => lb !== 1)) {
    prefix = `${value.dims.map((d, k) => `[${value.lbounds[k] ?? 1}:${(value.lbounds[k] ?? 1) + d - 1}]`).join('')}=`
  }
  let index = 0
  const level = (k: number): string => {
    const size = value.dims[k] ?? 0
    const parts: string[] = []
    for (let j = 0; j < size; j++) {
      if (k === value.dims.length - 1) {
        const item = value.items[index++]
        parts.push(item === null || item === undefined ? 'NULL' : quoteElement(format(item)))
      } else parts.push(level(k + 1))
    }
    return `{${parts.join(',')}}`
  }
  return prefix + level(0)
}

function quoteElement(s: string): string {
  let quote = s === '' || s.toUpperCase() === 'NULL'
  let escape = false
  for (let i = 0; i < s.length; i++) {
    const c = s.charAt(i)
    if (c === '"' || c === '\\') {
      quote = true
      escape = true
    } else if (c === '{' || c === '}' || c === ',' || isArraySpace(c)) quote = true
  }
  if (!quote) return s
  return `"${escape ? s.replace(/["\\]/g, '\\$&') : s}"`
}

export function mapArray<T, U>(value: ArrayValue<T>, f: (element: T) => U | null): ArrayValue<U> {
  return { dims: value.dims, lbounds: value.lbounds, items: value.items.map((e) => (e === null ? null : f(e))) }
}

/** `array_eq`: same dimensions and bounds, elements equal pairwise, NULL equal to NULL. */
export function arrayEquals<T>(a: ArrayValue<T>, b: ArrayValue<T>, equals: (x: T, y: T) => boolean): boolean {
  if (a.dims.length !== b.dims.length || a.items.length !== b.items.length) return false
  for (let k = 0; k < a.dims.length; k++) {
    if (a.dims[k] !== b.dims[k] || a.lbounds[k] !== b.lbounds[k]) return false
  }
  for (let k = 0; k < a.items.length; k++) {
    const x = a.items[k] ?? null
    const y = b.items[k] ?? null
    if (x === null || y === null) {
      if (x !== y) return false
    } else if (!equals(x, y)) return false
  }
  return true
}

/** `array_cmp`: element by element (NULL sorts last), then by size, rank, dimensions and bounds. */
export function compareArrays<T>(a: ArrayValue<T>, b: ArrayValue<T>, compare: (x: T, y: T) => number): number {
  const n = Math.min(a.items.length, b.items.length)
  for (let k = 0; k < n; k++) {
    const x = a.items[k] ?? null
    const y = b.items[k] ?? null
    if (x === null) {
      if (y !== null) return 1
      continue
    }
    if (y === null) return -1
    const c = compare(x, y)
    if (c !== 0) return c < 0 ? -1 : 1
  }
  if (a.items.length !== b.items.length) return a.items.length < b.items.length ? -1 : 1
  if (a.dims.length !== b.dims.length) return a.dims.length < b.dims.length ? -1 : 1
  for (let k = 0; k < a.dims.length; k++) {
    const x = a.dims[k] ?? 0
    const y = b.dims[k] ?? 0
    if (x !== y) return x < y ? -1 : 1
  }
  for (let k = 0; k < a.lbounds.length; k++) {
    const x = a.lbounds[k] ?? 0
    const y = b.lbounds[k] ?? 0
    if (x !== y) return x < y ? -1 : 1
  }
  return 0
}

/** `@>`: every non-NULL... every element of `b` equals some element of `a` (a NULL in `b` never does). */
export function arrayContains<T>(a: ArrayValue<T>, b: ArrayValue<T>, key: (x: T) => string): boolean {
  if (b.items.length === 0) return true
  return keysContain(arrayKeySet(a, key), b, key)
}

/** `@>` with the left side's keys built already (a constant's, once for every row). */
export function keysContain<T>(keys: ReadonlySet<string>, b: ArrayValue<T>, key: (x: T) => string): boolean {
  for (const y of b.items) {
    if (y === null || !keys.has(key(y))) return false
  }
  return true
}

/** `&&`: some non-NULL element in both. */
export function arrayOverlaps<T>(a: ArrayValue<T>, b: ArrayValue<T>, key: (x: T) => string): boolean {
  if (a.items.length === 0 || b.items.length === 0) return false
  return overlapsKeys(a, arrayKeySet(b, key), key)
}

/** `&&` with the right side's keys built already (a constant's, once for every row). */
export function overlapsKeys<T>(a: ArrayValue<T>, keys: ReadonlySet<string>, key: (x: T) => string): boolean {
  for (const x of a.items) {
    if (x !== null && keys.has(key(x))) return true
  }
  return false
}

/** The keys of an array's non-NULL elements. */
export function arrayKeySet<T>(a: ArrayValue<T>, key: (x: T) => string): Set<string> {
  const keys = new Set<string>()
  for (const x of a.items) if (x !== null) keys.add(key(x))
  return keys
}
