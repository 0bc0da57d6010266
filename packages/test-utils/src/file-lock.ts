import { open, readFile, rm } from 'node:fs/promises'
import { setTimeout as sleep } from 'node:timers/promises'

/** How often a waiter looks at the lock again; provisioning steps take seconds, so this is cheap. */
const POLL_MS = 200

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: the process exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/**
 * Runs `fn` while holding an exclusive lock file (created with O_EXCL, holding
 * our pid), so several processes (vitest workers, parallel test files) never
 * run the same one-time set-up at once. A lock whose pid is dead was left by a
 * killed process and is taken over. (Two waiters taking over the same dead
 * lock at once can both get in; that needs a holder killed mid-set-up and two
 * waiters, and the set-ups it guards are themselves safe to repeat.)
 */
export async function withFileLock<T>(path: string, fn: () => Promise<T>, options: { timeoutMs?: number } = {}): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? 10 * 60_000)
  for (;;) {
    try {
      const handle = await open(path, 'wx')
      await handle.writeFile(String(process.pid))
      await handle.close()
      break
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
    }
    const holder = Number((await readFile(path, 'utf8').catch(() => '')).trim())
    // An empty file is a holder between open and write: give it a moment rather than stealing.
    if (Number.isInteger(holder) && holder > 0 && !alive(holder)) {
      await rm(path, { force: true })
      continue
    }
    if (Date.now() > deadline) throw new Error(`withFileLock: ${path} is still held by pid ${holder || '?'}`)
    await sleep(POLL_MS)
  }
  try {
    return await fn()
  } finally {
    await rm(path, { force: true })
  }
}
