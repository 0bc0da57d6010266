/**
 * Shape handles: `<hash>-<unix microseconds>` (docs/protocol.md §2), e.g.
 * `4121856423567898134-1763837400123456`.
 *
 * Handles are never reused, even across restarts: a client that saw a handle
 * expire treats any later response carrying it as a stale CDN hit. So the
 * microsecond part is unique on its own, not just per hash: the issuer keeps
 * the last value it issued and never issues one at or below it, whatever the
 * clock says (a frozen clock, two handles in one microsecond, NTP stepping
 * back). A restarted process is given the highest value ever issued (the
 * floor, from the restored registry) and starts above it.
 *
 * Handles double as storage shape ids, which must match
 * /^[A-Za-z0-9_-]{1,128}$/; ours use only digits and one `-`, at most
 * 20 + 1 + 16 = 37 characters.
 */

export const MAX_HASH_DIGITS = 20
export const MAX_MICROS_DIGITS = 16
export const MAX_HANDLE_LENGTH = MAX_HASH_DIGITS + 1 + MAX_MICROS_DIGITS

const U64_MAX_DIGITS = '18446744073709551615'

export interface ParsedHandle {
  readonly hash: string
  readonly micros: number
}

/** Parses a handle we could have issued; undefined for anything else (never throws on client input). */
export function parseHandle(text: string): ParsedHandle | undefined {
  const micros = handleMicros(text)
  return micros === undefined ? undefined : { hash: text.slice(0, text.indexOf('-')), micros }
}

export function isValidHandle(text: string): boolean {
  return handleMicros(text) !== undefined
}

/**
 * The microseconds of a handle we could have issued, undefined for any other
 * text: `<hash>-<micros>`, each part decimal digits without a leading zero
 * (but a lone 0, so each value has one spelling), the hash at most 2^64 - 1,
 * the microseconds a safe integer. By hand, with no match array or substrings:
 * a restart reads the microseconds of every restored handle.
 */
export function handleMicros(text: string): number | undefined {
  const length = text.length
  if (length > MAX_HANDLE_LENGTH) return undefined
  const dash = text.indexOf('-')
  if (!digitsWithoutLeadingZero(text, 0, dash, MAX_HASH_DIGITS) || !digitsWithoutLeadingZero(text, dash + 1, length, MAX_MICROS_DIGITS)) return undefined
  // Same-length digit strings compare as numbers: only a 20-digit hash can pass 2^64 - 1 (no BigInt per handle).
  if (dash === MAX_HASH_DIGITS && text.slice(0, dash) > U64_MAX_DIGITS) return undefined
  let micros = 0
  for (let i = dash + 1; i < length; i++) micros = micros * 10 + (text.charCodeAt(i) - 48)
  return Number.isSafeInteger(micros) ? micros : undefined
}

/** Whether text[from, to) is 1 to `max` ASCII digits, without a leading zero unless it is `0` alone. */
function digitsWithoutLeadingZero(text: string, from: number, to: number, max: number): boolean {
  const n = to - from
  if (n < 1 || n > max) return false
  if (n > 1 && text.charCodeAt(from) === 48) return false
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i)
    if (c < 48 || c > 57) return false
  }
  return true
}

export function formatHandle(hash: string, micros: number): string {
  const handle = `${hash}-${micros}`
  if (parseHandle(handle) === undefined) throw new RangeError(`not a valid handle: ${handle}`)
  return handle
}

/** Wall-clock time in microseconds; a port so tests can freeze it or run it backwards. */
export type MicrosClock = () => number

export const systemMicrosClock: MicrosClock = () => Date.now() * 1000

export interface HandleIssuerOptions {
  readonly clock?: MicrosClock
  /** The highest microsecond value ever issued (by any earlier process); new ones are above it. */
  readonly floor?: number
}

export class HandleIssuer {
  readonly #clock: MicrosClock
  #last: number

  constructor(options: HandleIssuerOptions = {}) {
    this.#clock = options.clock ?? systemMicrosClock
    this.#last = options.floor ?? -1
  }

  /** The highest microsecond value issued or known to have been issued; persist it to survive restarts. */
  get floor(): number {
    return this.#last
  }

  /** Raises the floor (e.g. on restoring a handle from storage); never lowers it. */
  observe(micros: number): void {
    if (micros > this.#last) this.#last = micros
  }

  issue(hash: string): string {
    const now = Math.floor(this.#clock())
    const micros = now > this.#last ? now : this.#last + 1
    const handle = formatHandle(hash, micros)
    this.#last = micros
    return handle
  }
}
