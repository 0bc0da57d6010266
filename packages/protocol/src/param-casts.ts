import type { ParamErrors } from './errors.js'
import { parseColumnList } from './identifiers.js'
import { ParamMessage } from './param-names.js'

/**
 * Ecto-style casts of query and body values, the way Electric casts them: a
 * blank value (empty or whitespace only) counts as absent, a value of the wrong
 * type is "is invalid", and each cast reports rather than throws so that the
 * parser can collect every field's error at once (stage 1 of params.ts). Also
 * the error map those errors gather in, and the null-prototype records that
 * hold request fields (so `__proto__` or `constructor` are just keys).
 */

/** An integer as Elixir reads one (`01` and `+1` are 1). */
export const INTEGER = /^[+-]?[0-9]+$/

export type Cast<T> =
  | { readonly kind: 'absent' }
  | { readonly kind: 'ok'; readonly value: T }
  | { readonly kind: 'invalid'; readonly message: string }

const ABSENT: Cast<never> = { kind: 'absent' }
const INVALID: Cast<never> = { kind: 'invalid', message: ParamMessage.invalid }
const okCast = <T>(value: T): Cast<T> => ({ kind: 'ok', value })
const invalidCast = (message: string): Cast<never> => ({ kind: 'invalid', message })

export function isBlank(value: unknown): boolean {
  return value === undefined || value === null || (typeof value === 'string' && value.trim() === '')
}

export function castString(value: unknown): Cast<string> {
  if (isBlank(value)) return ABSENT
  return typeof value === 'string' ? okCast(value) : INVALID
}

export function castBoolean(value: unknown): Cast<boolean> {
  if (isBlank(value)) return ABSENT
  if (value === true || value === 'true' || value === '1') return okCast(true)
  if (value === false || value === 'false' || value === '0') return okCast(false)
  return INVALID
}

export function castEnum<const T extends string>(values: readonly T[]): (value: unknown) => Cast<T> {
  return (value) => {
    if (isBlank(value)) return ABSENT
    return typeof value === 'string' && (values as readonly string[]).includes(value) ? okCast(value as T) : INVALID
  }
}

export function castInteger(value: unknown): Cast<number> {
  if (isBlank(value)) return ABSENT
  if (typeof value === 'number') return Number.isSafeInteger(value) ? okCast(value) : INVALID
  if (typeof value === 'string' && INTEGER.test(value)) {
    const parsed = Number(value)
    return Number.isSafeInteger(parsed) ? okCast(parsed) : INVALID
  }
  return INVALID
}

export function castColumns(value: unknown): Cast<readonly string[]> {
  if (isBlank(value)) return ABSENT
  if (typeof value === 'string') {
    const parsed = parseColumnList(value)
    return parsed.ok ? okCast(parsed.value) : invalidCast(parsed.error)
  }
  // `columns[]=a&columns[]=b`: names taken verbatim, as Electric does.
  if (Array.isArray(value) && value.length > 0) {
    if (!value.every((column): column is string => typeof column === 'string')) return INVALID
    return value.includes('') ? invalidCast(ParamMessage.zeroLengthColumn) : okCast(value)
  }
  return INVALID
}

export function castStringMap(value: unknown): Cast<Readonly<Record<string, string>>> {
  if (isBlank(value)) return ABSENT
  if (!isPlainObject(value)) return INVALID
  const out = emptyRecord()
  for (const [key, entry] of Object.entries(value)) {
    if (typeof entry !== 'string') return INVALID
    out[key] = entry
  }
  return okCast(out)
}

/** `subset__params`: a JSON object string, or a bracketed map; scalar values become text. */
export function castSubsetParams(value: unknown): Cast<Readonly<Record<string, string>>> {
  if (isBlank(value)) return ABSENT
  let decoded: unknown = value
  if (typeof value === 'string') {
    try {
      decoded = JSON.parse(value)
    } catch {
      return invalidCast(ParamMessage.subsetParamsNotJson)
    }
    if (!isPlainObject(decoded)) return invalidCast(ParamMessage.subsetParamsNotObject)
  }
  if (!isPlainObject(decoded)) return INVALID
  const out = emptyRecord()
  for (const [key, entry] of Object.entries(decoded)) {
    if (typeof entry === 'string') out[key] = entry
    else if (typeof entry === 'number' || typeof entry === 'boolean') out[key] = String(entry)
    else if (entry === null) out[key] = ''
    else return INVALID
  }
  return okCast(out)
}

export class ErrorMap {
  private readonly fields = new Map<string, string[] | ParamErrors>()

  get empty(): boolean {
    return this.fields.size === 0
  }

  has(field: string): boolean {
    return this.fields.has(field)
  }

  add(field: string, message: string): this {
    const existing = this.fields.get(field)
    if (Array.isArray(existing)) existing.push(message)
    else this.fields.set(field, [message])
    return this
  }

  nest(field: string, errors: ParamErrors): this {
    this.fields.set(field, errors)
    return this
  }

  toObject(): ParamErrors {
    return Object.fromEntries(this.fields)
  }

  result(): { readonly ok: false; readonly errors: ParamErrors } {
    return { ok: false, errors: this.toObject() }
  }
}

export function copyInto<T>(target: Record<string, T>, source: Readonly<Record<string, T>>): Record<string, T> {
  for (const [key, value] of Object.entries(source)) target[key] = value
  return target
}

export function emptyRecord<T = string>(): Record<string, T> {
  return Object.create(null) as Record<string, T>
}

export function has(fields: Readonly<Record<string, unknown>>, key: string): boolean {
  return Object.hasOwn(fields, key)
}

export function isPlainObject(value: unknown): value is Readonly<Record<string, unknown>> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
