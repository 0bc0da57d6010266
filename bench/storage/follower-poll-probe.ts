/**
 * What a read-only follower's poll costs when the writer checkpoints: a writer
 * and a follower in this process, N logs, every one held open by the follower
 * (as a replica's start-up scan leaves them), then flushes that each write one
 * log, with small journal segments so that most flushes close a segment and
 * its checkpoint deletes one. Prints, per flush, the poll's time and its
 * stat/open calls, and whether a checkpoint deleted a segment since the last.
 * A probe of the storage engine, not a benchmark of Sluice.
 *
 *   cd bench && node --import tsx --conditions=sluice-source storage/follower-poll-probe.ts 20000 8
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type FsPort, type ShapeLog, nodeFs, openFileLogStore, openReadOnlyLogStore } from '@sluice/storage'

const logs = Number(process.argv[2] ?? 20_000)
const flushes = Number(process.argv[3] ?? 8)
const enc = new TextEncoder()
const dir = mkdtempSync(join(tmpdir(), 'sluice-follower-poll-'))
try {
  const writer = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, journalSegmentBytes: 4096 })
  const opened: ShapeLog[] = []
  for (let i = 0; i < logs; i++) opened.push(await writer.createShape(`s${i}`).finish(enc.encode('{"headers":{"control":"snapshot-end"}}')))
  let calls = 0
  const counted: FsPort = {
    ...nodeFs,
    statSync: (path) => {
      calls++
      return nodeFs.statSync(path)
    },
    fstatSync: (fd) => {
      calls++
      return nodeFs.fstatSync(fd)
    },
    openSync: (path, flags, mode) => {
      calls++
      return nodeFs.openSync(path, flags, mode)
    },
  }
  const follower = openReadOnlyLogStore({ dir, pollIntervalMs: 0, fs: counted })
  for (let i = 0; i < logs; i++) follower.get(`s${i}`)!.head()
  follower.poll()
  const segments = (): Set<string> => new Set(readdirSync(join(dir, 'journal')).filter((n) => n.endsWith('.jnl')))
  let before = segments()
  const times: number[] = []
  for (let f = 0; f < flushes; f++) {
    const tx = BigInt(10 + f)
    opened[f % logs]!.appendTransaction([{ offset: { tx, op: 0n }, json: enc.encode(`{"v":${f},"pad":"${'x'.repeat(2000)}"}`) }])
    writer.advance(tx)
    await writer.flush()
    // The checkpoint runs after the flush that closed its segment: give it its moment.
    await new Promise((resolve) => setTimeout(resolve, 200))
    const now = segments()
    const checkpointed = [...before].some((n) => !now.has(n))
    before = now
    calls = 0
    const t0 = performance.now()
    follower.poll()
    const ms = performance.now() - t0
    times.push(ms)
    console.log(`flush ${f + 1}: poll ${ms.toFixed(1)} ms, ${calls} stat/fstat/open calls${checkpointed ? ' (a checkpoint deleted a segment since the last poll)' : ''}`)
  }
  const sorted = [...times].sort((a, b) => a - b)
  console.log(`${logs} logs held: poll median ${sorted[Math.floor(sorted.length / 2)]!.toFixed(1)} ms, max ${sorted.at(-1)!.toFixed(1)} ms`)
  await follower.close()
  await writer.close()
} finally {
  rmSync(dir, { recursive: true, force: true })
}
