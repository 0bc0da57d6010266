import { constants } from 'node:os'
import { getSystemErrorMap } from 'node:util'

/** The error shape node:fs throws: an `Error` with `code`, a negative `errno`, `syscall`, maybe `path`/`dest`. */
export interface SystemError extends Error {
  code: string
  errno: number
  syscall: string
  path?: string
  dest?: string
}

const injected = new WeakSet<object>()

/** True for errors made by `systemError` (so a test can tell an injected fault from a real one). */
export function isInjectedFault(error: unknown): boolean {
  return typeof error === 'object' && error !== null && injected.has(error)
}

/** The positive errno for `code` on this platform, or undefined for a code the OS does not know. */
export function errnoOf(code: string): number | undefined {
  return (constants.errno as Record<string, number | undefined>)[code]
}

/**
 * Builds an error indistinguishable in shape from one node:fs throws, e.g.
 * `ENOSPC: no space left on device, write`. Unknown codes are refused so a typo
 * in a test does not silently produce an error real code would never see.
 */
export function systemError(code: string, syscall: string, path?: string, dest?: string): SystemError {
  const errno = errnoOf(code)
  if (errno === undefined) throw new TypeError(`systemError: ${code} is not an errno code on ${process.platform}`)
  const description = getSystemErrorMap().get(-errno)?.[1] ?? 'unknown error'
  let message = `${code}: ${description}, ${syscall}`
  if (path !== undefined) message += ` '${path}'`
  if (dest !== undefined) message += ` -> '${dest}'`
  const error = new Error(message) as SystemError
  error.errno = -errno
  error.code = code
  error.syscall = syscall
  if (path !== undefined) error.path = path
  if (dest !== undefined) error.dest = dest
  injected.add(error)
  return error
}
