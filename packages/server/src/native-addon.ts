import type { Sendfile } from '@sluice/sendfile'

/**
 * The `@sluice/sendfile` addon for its extras (the batched stat at the
 * store's open, the writer lock, memory returns), or undefined where the
 * optional package is missing or its addon did not load: each caller then
 * falls back to its pure-JavaScript way.
 */
export async function loadNativeAddon(): Promise<Sendfile | undefined> {
  try {
    const { loadSendfile } = await import('@sluice/sendfile')
    const loaded = loadSendfile()
    return loaded.available ? loaded.sendfile : undefined
  } catch {
    // The optional package is missing.
    return undefined
  }
}
