/**
 * One writer per store directory, decided by the `LOCK` file.
 *
 * With a kernel lock (`lockFile`: flock(2) through the server's native addon)
 * the writer is whoever holds an exclusive lock on LOCK; the kernel drops it
 * when the holder exits, however it exits, so a killed writer's successor gets
 * in as soon as the dead process's files are closed. The file is never
 * removed: a waiter holding the old file open while a newcomer created and
 * locked a new one would make two writers. Its content (the holder's pid and host) is
 * only for people and error messages.
 *
 * Without one (no native addon), LOCK is the lock: it appears, with the
 * writer's pid and host name already in it, by link(2) of a file written
 * first (exclusive, and never seen empty), and a LOCK naming a process of this
 * host that no longer runs is taken over. A takeover claims the stale LOCK by
 * renaming it away, then checks that what it claimed is the one it judged
 * stale: two starters that both found a killed writer's LOCK (a restarted
 * writer and its standby) would otherwise each remove it, the second removing
 * the first one's new LOCK, and both would write. A starter that claimed
 * another's fresh LOCK links it back. (A third starter that created LOCK in
 * the instant between that claim and the link back would still make two
 * writers; the kernel lock has no such window.) A LOCK that names no process
 * was never whole (a power cut lost its unsynced content) and is taken over
 * the same way. That can wrongly refuse while a killed writer is
 * still being torn down (its pid still exists), which waiting (`waitMs`) rides
 * out. A LOCK naming another host is never taken over: a pid means nothing
 * here, and a writer and a standby on two machines sharing the storage would
 * otherwise both write (the message says to remove LOCK if that host is gone).
 * The two kinds must not share a directory: every writer of one store uses the
 * same build.
 */
import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import { StorageError, fromSystemError } from '../errors.js'
import type { FsPort } from '../fs-port.js'
import { writeFully } from '../fs-port.js'

export interface StoreLockOptions {
  /** Takes an exclusive, non-blocking flock(2) on the open file: true if taken, false if another holds it. */
  readonly lockFile?: ((fd: number) => boolean) | undefined
  /** How long to wait for a writer that holds the lock to let go (Infinity: a standby waiting its turn). Default 0. */
  readonly waitMs?: number | undefined
  /** Called once, when the first attempt finds the lock held (with what LOCK says about its holder). */
  readonly onWait?: ((holder: string) => void) | undefined
  /**
   * Work to do between two attempts while the lock is held by another (a
   * standby keeping its prepared logs current, `FileLogStore.promote`): the
   * next attempt waits for it.
   */
  readonly whileWaiting?: (() => Promise<void>) | undefined
  /** How often the lock is tried again while held (default LOCK_RETRY_MS): how soon a waiter sees the holder gone. */
  readonly retryMs?: number | undefined
}

/** How often a waiting writer tries the lock again by default: it takes over within this of the writer's exit. */
export const LOCK_RETRY_MS = 100

/** The store's writer lock: resolves with its release, or rejects with `store_locked` once `waitMs` ran out. */
export async function acquireStoreLock(fs: FsPort, root: string, options: StoreLockOptions = {}): Promise<() => void> {
  const waitMs = options.waitMs ?? 0
  const deadline = Date.now() + waitMs
  let told = false
  for (;;) {
    const attempt = options.lockFile === undefined ? tryPidLock(fs, root) : tryKernelLock(fs, root, options.lockFile)
    if (typeof attempt === 'function') return attempt
    if (attempt.ownProcess || Date.now() >= deadline) {
      throw new StorageError('store_locked', `${root} is held for writing by ${attempt.holder}`)
    }
    if (!told) {
      told = true
      options.onWait?.(attempt.holder)
    }
    await options.whileWaiting?.()
    await sleep(Math.min(options.retryMs ?? LOCK_RETRY_MS, Math.max(1, deadline - Date.now())))
  }
}

/** Who holds the lock, when an attempt failed; `ownProcess` when it is this very process (waiting cannot help). */
interface Held {
  readonly holder: string
  readonly ownProcess: boolean
  /** The pid LOCK names, if it names one. */
  readonly pid?: number
  /** LOCK names another host: whether its process runs cannot be told from here. */
  readonly elsewhere?: boolean
  /** LOCK could not be read. */
  readonly unreadable?: boolean
  /** LOCK names this process's pid but not this process: its holder is gone. */
  readonly earlier?: boolean
}

function lockPath(root: string): string {
  return `${root}/LOCK`
}

/**
 * This process among those that had its pid on this host: a container
 * restarted after a kill runs as the same pid (1, say) under the same host
 * name, and its LOCK, left by the process before it, must not pass for its own.
 */
const PROCESS_TOKEN = randomBytes(8).toString('hex')

/** What a writer puts in LOCK: its pid, its host and its process token, a line each (older builds wrote the pid alone, or the pid and host). */
function lockContent(): Buffer {
  return Buffer.from(`${process.pid}\n${hostname()}\n${PROCESS_TOKEN}\n`)
}

/** What LOCK says of its holder; `pidFile` for the O_EXCL lock, where LOCK itself is the lock (and the remedy is to remove it). */
function describeHolder(fs: FsPort, root: string, pidFile: boolean): Held {
  let text = ''
  try {
    text = fs.readFileSync(lockPath(root)).toString('utf8')
  } catch (err) {
    // Gone: the next attempt creates it. Unreadable (no descriptor to spare, another user's file): whoever
    // holds it cannot be told, so it is held, never taken over on a guess.
    const code = (err as NodeJS.ErrnoException).code
    if (code !== 'ENOENT') return { holder: `a process this one cannot name (${lockPath(root)}: ${code ?? String(err)})`, ownProcess: false, unreadable: true }
  }
  const { pid, host: hostName, token } = parseLock(text)
  if (pid === undefined) {
    // For a pid file, written whole before it appears (or, without link(2), in the instant after): a LOCK
    // that names nobody is damaged, and is not taken over on a guess.
    const remedy = pidFile ? ` (${lockPath(root)} names no process; if no writer of this store runs, remove it)` : ''
    return { holder: `another process${remedy}`, ownProcess: false }
  }
  if (hostName !== '' && hostName !== hostname()) {
    const remedy = pidFile ? ` (a lock file this host cannot check; if that process no longer runs, remove ${lockPath(root)})` : ''
    return {
      holder: `process ${pid} on host ${hostName}${remedy}`,
      ownProcess: false,
      pid,
      elsewhere: true,
    }
  }
  if (pid === process.pid) {
    if (token === PROCESS_TOKEN) return { holder: 'this process (the store is already open for writing here)', ownProcess: true }
    // Our pid, another process's token: one that ran before this one with the same pid (a restarted container).
    return { holder: `process ${pid}, an earlier process with this one's pid`, ownProcess: false, pid, earlier: true }
  }
  return { holder: `process ${pid}`, ownProcess: false, pid }
}

/** What LOCK's text names: its pid (undefined when none), its host and its process token ('' for an older build's LOCK). */
function parseLock(text: string): { pid: number | undefined; host: string; token: string } {
  const [pidText = '', host = '', token = ''] = text.split('\n')
  return { pid: /^\d+$/.test(pidText.trim()) ? Number(pidText.trim()) : undefined, host: host.trim(), token: token.trim() }
}

function tryKernelLock(fs: FsPort, root: string, lockFile: (fd: number) => boolean): (() => void) | Held {
  let fd: number
  try {
    // Created if missing, never truncated before the lock is ours: it may name the live holder.
    fd = fs.openSync(lockPath(root), 'a+', 0o644)
  } catch (err) {
    throw fromSystemError(err, `open ${lockPath(root)}`)
  }
  let locked: boolean
  try {
    locked = lockFile(fd)
  } catch (err) {
    fs.closeSync(fd)
    throw fromSystemError(err, `lock ${lockPath(root)}`)
  }
  if (!locked) {
    fs.closeSync(fd)
    return describeHolder(fs, root, false)
  }
  try {
    // An O_APPEND descriptor writes at the end whatever the position: empty it first.
    fs.ftruncateSync(fd, 0)
    const content = lockContent()
    writeFully(fs, fd, content, content.length, 0)
  } catch (err) {
    fs.closeSync(fd)
    throw fromSystemError(err, `write ${lockPath(root)}`)
  }
  let held = true
  return () => {
    if (!held) return
    held = false
    try {
      // Closing the last descriptor is what releases a flock.
      fs.closeSync(fd)
    } catch {
      // Nothing to do: the descriptor is gone either way.
    }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

function tryPidLock(fs: FsPort, root: string): (() => void) | Held {
  const path = lockPath(root)
  for (let attempt = 0; attempt < 3; attempt++) {
    if (createPidFile(fs, root)) {
      return () => {
        try {
          fs.unlinkSync(path)
        } catch {
          // Already gone: nothing to release.
        }
      }
    }
    const held = describeHolder(fs, root, true)
    if (held.ownProcess || held.elsewhere === true || held.unreadable === true) return held
    if (held.pid === undefined ? !unnamedIsStale(fs, root) : held.earlier !== true && alive(held.pid)) return held
    // Its holder is dead: claimed and removed only if it still is that holder's (else another starter's).
    if (!removeStale(fs, root, held.pid)) return describeHolder(fs, root, true)
  }
  return describeHolder(fs, root, true)
}

/** Store directories found to have no hard links (link(2) refused): their LOCK is made with O_EXCL. */
const noLinks = new Set<string>()

/** link(2), where this filesystem port and the store's filesystem have it. */
function linkOf(fs: FsPort, root: string): ((from: string, to: string) => void) | undefined {
  const link = fs.linkSync
  return link === undefined || noLinks.has(root) ? undefined : (from, to) => link.call(fs, from, to)
}

/**
 * Whether a LOCK that names no process is left over rather than being written:
 * one made by link(2) was whole when it appeared, so an empty one is what a
 * power cut left of a LOCK never synced (or damage); one made with O_EXCL
 * (no link) is empty for an instant after its creation, so only an old one is.
 */
function unnamedIsStale(fs: FsPort, root: string): boolean {
  if (linkOf(fs, root) !== undefined) return true
  try {
    return Date.now() - fs.statSync(lockPath(root)).mtimeMs > UNNAMED_LOCK_GRACE_MS
  } catch {
    return true // gone: the next attempt creates it
  }
}

/** How long a LOCK made with O_EXCL may name no process before it is taken for a dead starter's. */
const UNNAMED_LOCK_GRACE_MS = 10_000

/** Creates LOCK with this process's pid and host in it; false if it exists. */
function createPidFile(fs: FsPort, root: string): boolean {
  const path = lockPath(root)
  const content = lockContent()
  const link = linkOf(fs, root)
  if (link === undefined) {
    let fd: number
    try {
      fd = fs.openSync(path, 'wx', 0o644)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false
      throw fromSystemError(err, `lock ${root}`)
    }
    try {
      writeFully(fs, fd, content, content.length, 0)
    } finally {
      fs.closeSync(fd)
    }
    return true
  }
  const draft = `${path}.new-${process.pid}-${randomBytes(4).toString('hex')}`
  try {
    const fd = fs.openSync(draft, 'wx', 0o644)
    try {
      writeFully(fs, fd, content, content.length, 0)
    } finally {
      fs.closeSync(fd)
    }
    link(draft, path)
    return true
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'EEXIST') return false
    if (code === 'EPERM' || code === 'EOPNOTSUPP' || code === 'ENOTSUP' || code === 'ENOSYS') {
      // A filesystem without hard links (vfat, some network and FUSE mounts): O_EXCL from now on.
      noLinks.add(root)
      return createPidFile(fs, root)
    }
    throw fromSystemError(err, `lock ${root}`)
  } finally {
    try {
      fs.unlinkSync(draft)
    } catch {
      // Never made, or already gone.
    }
  }
}

/**
 * Removes a LOCK naming `pid` (dead; undefined: naming none): renames it to a name of this process's,
 * then reads what it took. True when that was the stale LOCK (removed) or LOCK
 * was gone already; false when it was another starter's new one, which is put
 * back.
 */
function removeStale(fs: FsPort, root: string, pid: number | undefined): boolean {
  const path = lockPath(root)
  const claimed = `${path}.stale-${process.pid}-${randomBytes(4).toString('hex')}`
  try {
    fs.renameSync(path, claimed)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return true
    throw fromSystemError(err, `unlock ${root}`)
  }
  let text: string | undefined
  try {
    text = fs.readFileSync(claimed).toString('utf8')
  } catch {
    // Unreadable: not known to be the stale one, so put back below.
  }
  const claimedLock = text === undefined ? undefined : parseLock(text)
  const stale =
    claimedLock !== undefined && claimedLock.pid === pid && (pid === undefined || claimedLock.host === '' || claimedLock.host === hostname())
  try {
    if (stale) return true
    // Another starter's LOCK, made since we looked: back where it was. Where link(2) is missing, rename, which
    // would replace a LOCK made in between (link refuses to).
    try {
      const link = linkOf(fs, root)
      if (link === undefined) fs.renameSync(claimed, path)
      else link(claimed, path)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw fromSystemError(err, `relock ${root}`)
    }
    return false
  } finally {
    try {
      fs.unlinkSync(claimed)
    } catch {
      // Renamed back: nothing left under the claimed name.
    }
  }
}
