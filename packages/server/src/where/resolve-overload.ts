import type { ArgSpec, Signature } from './catalog.js'
import { canCoerceImplicitly, canCoerceToSpec, specCategory, specKey, specPreferred } from './catalog.js'
import type { SqlType } from './sql-type.js'
import { category, displayName, isPreferred, isUnknown, TEXT } from './sql-type.js'

/**
 * Postgres's overload resolution (`oper_select_candidate`, `func_select_candidate`
 * and `select_common_type` in parse_oper.c / parse_func.c / parse_coerce.c),
 * step for step, so that `int8col = 1.5`, `length('x')` or `x IN (1, 2.5)`
 * get the operator, function and argument coercions Postgres would choose.
 */

export type Resolution =
  | { readonly kind: 'found'; readonly signature: Signature; readonly args: readonly SqlType[] }
  | { readonly kind: 'none' }
  | { readonly kind: 'ambiguous' }
  /** The chosen polymorphic candidate cannot be made concrete (e.g. both inputs unknown). */
  | { readonly kind: 'polymorphic'; readonly message: string }

/** Exact match, as `binary_oper_exact` / the exact step of `func_get_detail` look it up. */
function exactMatch(candidates: readonly Signature[], inputs: readonly SqlType[]): Signature | undefined {
  return candidates.find((c) => c.args.every((a, i) => typeof a !== 'string' && a.key === inputs[i]?.key))
}

/** Binds polymorphic declared types to the inputs' actual types, or explains why it cannot. */
function concreteArgs(signature: Signature, inputs: readonly SqlType[]): SqlType[] | string {
  let arrayType: SqlType | undefined
  let enumType: SqlType | undefined
  signature.args.forEach((spec, i) => {
    const input = inputs[i]
    if (input === undefined || isUnknown(input)) return
    if (spec === 'anyarray') arrayType ??= input
    if (spec === 'anyenum') enumType ??= input
  })
  const out: SqlType[] = []
  for (const spec of signature.args) {
    if (spec === 'anyarray') {
      if (arrayType === undefined) return 'could not determine polymorphic type because input has type unknown'
      out.push(arrayType)
    } else if (spec === 'anyenum') {
      if (enumType === undefined) return 'could not determine polymorphic type because input has type unknown'
      out.push(enumType)
    } else out.push(spec)
  }
  return out
}

/** `func_match_argtypes` with `check_generic_type_consistency`: every input coercible, polymorphic args alike. */
function coercible(signature: Signature, inputs: readonly SqlType[]): boolean {
  let arrayKey: string | undefined
  let enumKey: string | undefined
  for (let i = 0; i < inputs.length; i++) {
    const input = inputs[i]
    const spec = signature.args[i]
    if (input === undefined || spec === undefined || !canCoerceToSpec(input, spec)) return false
    if (isUnknown(input)) continue
    if (spec === 'anyarray') {
      if (arrayKey !== undefined && arrayKey !== input.key) return false
      arrayKey = input.key
    } else if (spec === 'anyenum') {
      if (enumKey !== undefined && enumKey !== input.key) return false
      enumKey = input.key
    }
  }
  return true
}

function found(signature: Signature, inputs: readonly SqlType[]): Resolution {
  const args = concreteArgs(signature, inputs)
  if (typeof args === 'string') return { kind: 'polymorphic', message: args }
  return { kind: 'found', signature, args }
}

export function resolveOperator(candidates: readonly Signature[], inputs: readonly SqlType[]): Resolution {
  // binary_oper_exact: an unknown side is first assumed to have the other side's type.
  let probe = inputs
  if (inputs.length === 2) {
    const [l, r] = inputs as [SqlType, SqlType]
    if (isUnknown(l) && !isUnknown(r)) probe = [r, r]
    else if (isUnknown(r) && !isUnknown(l)) probe = [l, l]
  }
  const exact = exactMatch(candidates, probe)
  if (exact !== undefined) return found(exact, probe === inputs ? inputs : probe)
  return resolveAmong(candidates, inputs)
}

export function resolveFunction(candidates: readonly Signature[], inputs: readonly SqlType[]): Resolution {
  const exact = exactMatch(candidates, inputs)
  if (exact !== undefined) return found(exact, inputs)
  return resolveAmong(candidates, inputs)
}

function resolveAmong(all: readonly Signature[], inputs: readonly SqlType[]): Resolution {
  const candidates = all.filter((c) => coercible(c, inputs))
  if (candidates.length === 0) return { kind: 'none' }
  if (candidates.length === 1) return found(candidates[0] as Signature, inputs)
  const chosen = selectCandidate(candidates, inputs)
  return chosen === undefined ? { kind: 'ambiguous' } : found(chosen, inputs)
}

/** Keeps the candidates scoring highest; PG's list surgery in func_select_candidate. */
function best(candidates: readonly Signature[], score: (c: Signature) => number): Signature[] {
  let top = -1
  let kept: Signature[] = []
  for (const c of candidates) {
    const s = score(c)
    if (s > top) {
      top = s
      kept = [c]
    } else if (s === top) kept.push(c)
  }
  return kept
}

function selectCandidate(initial: readonly Signature[], inputs: readonly SqlType[]): Signature | undefined {
  const nargs = inputs.length
  const unknownAt = inputs.map(isUnknown)
  const nunknowns = unknownAt.filter(Boolean).length

  // 1. Most exact matches on the known inputs.
  let candidates = best(initial, (c) =>
    c.args.reduce((n, spec, i) => n + (!unknownAt[i] && specKey(spec) === inputs[i]?.key ? 1 : 0), 0),
  )
  if (candidates.length === 1) return candidates[0]

  // 2. Most positions taking the input exactly or a preferred type of the input's category.
  const inputCategory = inputs.map((input) => category(input))
  candidates = best(candidates, (c) =>
    c.args.reduce((n, spec, i) => {
      if (unknownAt[i]) return n
      const exact = specKey(spec) === inputs[i]?.key
      const preferred = specPreferred(spec) && specCategory(spec) === inputCategory[i]
      return n + (exact || preferred ? 1 : 0)
    }, 0),
  )
  if (candidates.length === 1) return candidates[0]

  if (nunknowns === 0) return undefined

  // 3. Give unknown inputs a category: string if any candidate takes one there, else the one all agree on.
  const slotCategory: (string | undefined)[] = []
  const slotPreferred: boolean[] = []
  let resolved = true
  for (let i = 0; i < nargs; i++) {
    if (!unknownAt[i]) continue
    let slot: string | undefined
    let preferred = false
    let conflict = false
    for (const c of candidates) {
      const spec = c.args[i] as ArgSpec
      const cat = specCategory(spec)
      const pref = specPreferred(spec)
      if (slot === undefined) {
        slot = cat
        preferred = pref
      } else if (cat === slot) preferred ||= pref
      else if (cat === 'S') {
        slot = cat
        preferred = pref
      } else conflict = true
    }
    if (conflict && slot !== 'S') {
      resolved = false
      break
    }
    slotCategory[i] = slot
    slotPreferred[i] = preferred
  }
  if (resolved) {
    const kept = candidates.filter((c) =>
      c.args.every((spec, i) => {
        if (!unknownAt[i]) return true
        if (specCategory(spec) !== slotCategory[i]) return false
        return !(slotPreferred[i] === true && !specPreferred(spec))
      }),
    )
    if (kept.length > 0) candidates = kept
    if (kept.length === 1) return kept[0]
  }

  // 4. Last gasp: unknowns take the type of the known inputs when those all agree.
  if (nunknowns < nargs) {
    const known = inputs.filter((input) => !isUnknown(input))
    const first = known[0]
    if (first !== undefined && known.every((k) => k.key === first.key)) {
      const assumed = inputs.map(() => first)
      const matches = candidates.filter((c) => coercible(c, assumed))
      if (matches.length === 1) return matches[0]
    }
  }
  return undefined
}

/**
 * `select_common_type`: the type a list of expressions (IN list, ARRAY[...],
 * COALESCE) is unified to; all-unknown lists become text. Returns a message
 * when categories clash.
 */
export function selectCommonType(types: readonly SqlType[], context: string): SqlType | { readonly error: string } {
  const known = types.filter((t) => !isUnknown(t))
  let chosen = known[0]
  if (chosen === undefined) return TEXT
  for (const next of known.slice(1)) {
    if (next.key === chosen.key) continue
    if (category(next) !== category(chosen)) {
      return { error: `${context} types ${displayName(chosen)} and ${displayName(next)} cannot be matched` }
    }
    if (!isPreferred(chosen) && canCoerceImplicitly(chosen, next) && !canCoerceImplicitly(next, chosen)) chosen = next
  }
  return chosen
}

/** `verify_common_type`: every input must coerce implicitly to the chosen type. */
export function verifyCommonType(common: SqlType, types: readonly SqlType[]): boolean {
  return types.every((t) => canCoerceImplicitly(t, common))
}
