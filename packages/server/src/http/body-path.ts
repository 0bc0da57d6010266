import type { Sendfile } from '@sluice/sendfile'

/**
 * How large response bodies leave the server (docs/architecture.md §3):
 * `sendfile` when the optional `@sluice/sendfile` addon loaded and is enabled,
 * else `pread` (into a buffer, then one write). Small bodies always take the
 * pread path; see `HttpOptions.sendfileMinBytes`.
 */
export type BodyPathName = 'sendfile' | 'pread'

export type BodyPath =
  | { readonly name: 'sendfile'; readonly sendfile: Sendfile }
  | { readonly name: 'pread'; readonly sendfile?: undefined; /** Why not sendfile (for the start-up log). */ readonly reason: string }

export const PREAD_PATH: BodyPath = Object.freeze({ name: 'pread', reason: 'not requested' })

/**
 * Loads the addon when `enabled`. Never throws: the package may be missing (an
 * optional dependency whose install was skipped) or its build may have failed
 * (no compiler), and the server then serves every body with pread.
 */
export async function resolveBodyPath(enabled: boolean): Promise<BodyPath> {
  if (!enabled) return { name: 'pread', reason: 'turned off (--no-sendfile)' }
  let load: typeof import('@sluice/sendfile').loadSendfile
  try {
    ;({ loadSendfile: load } = await import('@sluice/sendfile'))
  } catch (error) {
    return { name: 'pread', reason: `the @sluice/sendfile package did not load (${error instanceof Error ? error.message.split('\n')[0] : String(error)})` }
  }
  const loaded = load()
  return loaded.available ? { name: 'sendfile', sendfile: loaded.sendfile } : { name: 'pread', reason: loaded.reason }
}
