/**
 * The subquery benchmark's live clients, in a process of its own: one
 * long-poll loop per shape path, as a client follows a shape (offset=-1 to
 * up-to-date, then live=true with handle, offset and cursor; 409 starts over;
 * 503 waits its retry-after). The first arrival of each row key is kept per
 * shape, in epoch milliseconds (the writer's clock).
 *
 * Commands: `follow {baseUrl, paths}` -> once every shape is up-to-date;
 * `arrived {shape, keys}` -> when the last of `keys` arrived in shape number
 * `shape`, or null; `stop {}` -> counters.
 */
import http from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { serveCommands } from '../http/json-lines.js'
import { getWhole, header, retryAfterMs } from '../overlap/http-get.js'

const now = (): number => performance.timeOrigin + performance.now()
const agent = new http.Agent({ keepAlive: true, maxSockets: 1024 })
let stopping = false
let arrivals: Map<string, number>[] = []
const counts = { requests: 0, conflicts: 0, errors: 0 }

async function loop(base: URL, path: string, seen: Map<string, number>, upToDate: () => void): Promise<void> {
  let handle: string | undefined
  let offset = '-1'
  let cursor = ''
  let live = false
  while (!stopping) {
    let url = `${path}&offset=${offset}`
    if (handle !== undefined) url += `&handle=${encodeURIComponent(handle)}`
    if (live) url += `&live=true&cursor=${encodeURIComponent(cursor)}`
    let r
    try {
      r = await getWhole(base, url, agent)
    } catch {
      counts.errors++
      await sleep(100)
      continue
    }
    counts.requests++
    const at = now()
    if (r.status === 409) {
      counts.conflicts++
      handle = undefined
      offset = '-1'
      live = false
      continue
    }
    if (r.status === 503 || r.status === 429) {
      await sleep(retryAfterMs(r, 1000))
      continue
    }
    if (r.status !== 200 && r.status !== 204) throw new Error(`${url}: ${r.status} ${r.body.toString('utf8').slice(0, 200)}`)
    handle = header(r, 'electric-handle') ?? handle
    offset = header(r, 'electric-offset') ?? offset
    cursor = header(r, 'electric-cursor') ?? cursor
    if (r.body.length > 0) {
      const messages = JSON.parse(r.body.toString('utf8')) as Array<{ key?: string; headers?: { operation?: string } }>
      for (const m of messages) if (m.key !== undefined && m.headers?.operation !== 'delete' && !seen.has(m.key)) seen.set(m.key, at)
    }
    if (header(r, 'electric-up-to-date') !== undefined && !live) {
      live = true
      upToDate()
    }
  }
}

async function follow(args: Record<string, unknown>): Promise<void> {
  const base = new URL(String(args.baseUrl))
  const paths = args.paths as string[]
  arrivals = paths.map(() => new Map())
  await Promise.all(
    paths.map(
      (path, i) =>
        new Promise<void>((resolve, reject) => {
          loop(base, path, arrivals[i]!, resolve).catch(reject)
        }),
    ),
  )
}

function arrived(args: Record<string, unknown>): number | null {
  const seen = arrivals[Number(args.shape)]!
  let last = 0
  for (const key of args.keys as string[]) {
    const at = seen.get(key)
    if (at === undefined) return null
    last = Math.max(last, at)
  }
  return last
}

function stop(): Record<string, number> {
  stopping = true
  return counts
}

serveCommands({ follow, arrived, stop })
