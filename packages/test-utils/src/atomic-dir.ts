import { existsSync } from 'node:fs'
import { chmod, chown, mkdtemp, readdir, rename, rm, stat } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import type { OsUser } from './os-user.js'

/** Leftovers of builders that were killed mid-way; old enough that nobody is still building them. */
const STALE_MS = 15 * 60_000

async function removeStaleAttempts(finalDir: string): Promise<void> {
  const parent = dirname(finalDir)
  const prefix = `${basename(finalDir)}.tmp-`
  for (const name of await readdir(parent).catch(() => [])) {
    if (!name.startsWith(prefix)) continue
    const path = join(parent, name)
    const info = await stat(path).catch(() => undefined)
    if (info !== undefined && Date.now() - info.mtimeMs > STALE_MS) await rm(path, { recursive: true, force: true })
  }
}

/**
 * Returns `finalDir`, building it first when it is missing or incomplete. The
 * build happens in a sibling temp dir that is renamed into place, so any number
 * of processes may race: the first rename wins, the others discard their copy,
 * and nobody ever sees a half-built directory.
 */
export async function ensureDirAtomically(
  finalDir: string,
  isComplete: (dir: string) => boolean,
  build: (tmpDir: string) => Promise<void>,
  owner?: OsUser,
): Promise<string> {
  if (isComplete(finalDir)) return finalDir
  if (existsSync(finalDir)) {
    // Damaged from outside (a /tmp cleaner, a manual rm): move it away first so the rename below can land.
    const trash = `${finalDir}.broken-${process.pid}-${Date.now()}`
    await rename(finalDir, trash).catch(() => {})
    await rm(trash, { recursive: true, force: true })
  }
  await removeStaleAttempts(finalDir)
  const tmp = await mkdtemp(`${finalDir}.tmp-`)
  try {
    await chmod(tmp, 0o755)
    if (owner !== undefined) await chown(tmp, owner.uid, owner.gid)
    await build(tmp)
    try {
      await rename(tmp, finalDir)
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      const lostRace = (code === 'ENOTEMPTY' || code === 'EEXIST') && isComplete(finalDir)
      if (!lostRace) throw error
    }
  } finally {
    await rm(tmp, { recursive: true, force: true })
  }
  return finalDir
}
