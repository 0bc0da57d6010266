import { readFileSync } from 'node:fs'

/** The floor, and the bound where no limit can be read: fits a 1024 soft limit with room for sockets. */
const FLOOR = 512
/** Past this, more descriptors buy little: the kernel's dentry cache makes a reopen cheap. */
const CEILING = 8192

/**
 * How many files a store keeps open by default: a quarter of the process's
 * descriptor limit (Node raises the soft limit to the hard one at start-up),
 * leaving the rest to sockets (a live client holds one each) and Postgres
 * connections; between 512 and 8192. With 100k logs of three files each the
 * LRU cannot hold them all, but every descriptor it can keep saves an
 * open/fstat/close on the next append to that log.
 */
export function defaultMaxOpenFiles(): number {
  let limit: number | undefined
  try {
    // Linux only; elsewhere the floor.
    const line = readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files'))
    const soft = line?.split(/\s{2,}/)[1]
    if (soft !== undefined && /^\d+$/.test(soft)) limit = Number(soft)
    else if (soft === 'unlimited') limit = Number.POSITIVE_INFINITY
  } catch {
    limit = undefined
  }
  if (limit === undefined) return FLOOR
  return Math.max(FLOOR, Math.min(CEILING, Math.floor(limit / 4)))
}
