import type { StatFiles } from '@sluice/storage'

/**
 * The batched stat of the `@sluice/sendfile` addon, for the store's open
 * after a clean stop (three files a log checked against the heads file), or
 * undefined where the addon did not load (the store then stats file by file).
 */
export async function nativeStatFiles(): Promise<StatFiles | undefined> {
  try {
    const { loadSendfile } = await import('@sluice/sendfile')
    const loaded = loadSendfile()
    return loaded.available ? loaded.sendfile.statFiles : undefined
  } catch {
    // The optional package is missing.
    return undefined
  }
}
