import { mkdtempSync, rmSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { onProcessExit } from './exit-hooks.js'

/** A real directory under the OS temp dir, removed by `remove()` or at process exit. */
export interface TempDir {
  readonly path: string
  remove(): Promise<void>
  removeSync(): void
}

function templateFor(prefix: string): string {
  // One recognisable namespace makes leftovers of crashed runs easy to find.
  const safe = prefix.replace(/[^A-Za-z0-9._-]/g, '_')
  return join(tmpdir(), `sluice-${safe}-`)
}

function track(path: string): TempDir {
  let removed = false
  const unregister = onProcessExit(() => rmSync(path, { recursive: true, force: true }))
  return {
    path,
    async remove() {
      if (removed) return
      removed = true
      unregister()
      await rm(path, { recursive: true, force: true, maxRetries: 3 })
    },
    removeSync() {
      if (removed) return
      removed = true
      unregister()
      rmSync(path, { recursive: true, force: true, maxRetries: 3 })
    },
  }
}

/** Creates a fresh temp directory (`/tmp/sluice-<prefix>-XXXXXX`). */
export async function tempDir(prefix = 'tmp'): Promise<TempDir> {
  return track(await mkdtemp(templateFor(prefix)))
}

/** Synchronous `tempDir`, for setup code that cannot await. */
export function makeTempDirSync(prefix = 'tmp'): TempDir {
  return track(mkdtempSync(templateFor(prefix)))
}
