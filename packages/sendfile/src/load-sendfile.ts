import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { Sendfile } from './sendfile.js'
import type { NativeAddon } from './native.js'

/** Where `scripts/build-addon.mjs` (the install step) leaves the addon, from `src/` and from `dist/` alike. */
export const ADDON_PATH = fileURLToPath(new URL('../build/Release/sluice_sendfile.node', import.meta.url))

/** The addon, or why it cannot be used (the caller then serves with pread). */
export type SendfileLoad =
  | { readonly available: true; readonly sendfile: Sendfile }
  | { readonly available: false; readonly reason: string }

const loaded = new Map<string, SendfileLoad>()

/**
 * Loads the addon once per path. Never throws: a missing build (no compiler at
 * install), another OS or an ABI mismatch is reported as `available: false`.
 */
export function loadSendfile(path: string = ADDON_PATH): SendfileLoad {
  let result = loaded.get(path)
  if (result === undefined) {
    result = tryLoad(path)
    loaded.set(path, result)
  }
  return result
}

function tryLoad(path: string): SendfileLoad {
  if (process.platform !== 'linux') return { available: false, reason: `sendfile(2) is used on Linux only, this is ${process.platform}` }
  try {
    const native = createRequire(import.meta.url)(path) as NativeAddon
    if (typeof native.Sender !== 'function' || typeof native.stats !== 'function') {
      return { available: false, reason: `${path} is not the sendfile addon` }
    }
    return { available: true, sendfile: new Sendfile(native) }
  } catch (error) {
    const message = error instanceof Error ? error.message.split('\n')[0] : String(error)
    return { available: false, reason: `the addon did not load (${message})` }
  }
}
