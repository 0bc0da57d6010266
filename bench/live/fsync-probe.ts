/**
 * The physical floor of durable-before-sent, measured in a process of its
 * own: how long one small append and its fdatasync take on the disk that
 * holds the server's data, as a journal group commit of one small change
 * does. Each sample appends `bytes` to a file in `dir` and fdatasyncs it
 * (synchronously: nothing else runs in this process); samples follow each
 * other after `gapMs`, so the disk is not kept busy by the probe itself.
 *
 * Commands (JSON lines, `../http/json-lines.ts`): `probe {dir, samples,
 * bytes, gapMs}` -> `{p50Ms, p99Ms, meanMs, samples}`.
 */
import { closeSync, fdatasyncSync, openSync, rmSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { serveCommands } from '../http/json-lines.js'
import { quantile } from '../pipeline/stats.js'

async function probe(args: Record<string, unknown>): Promise<Record<string, number>> {
  const path = join(String(args.dir), `fsync-probe-${process.pid}.dat`)
  const samples = Number(args.samples)
  const gapMs = Number(args.gapMs)
  const line = Buffer.alloc(Number(args.bytes), 0x61)
  const times: number[] = []
  const fd = openSync(path, 'a')
  try {
    for (let i = 0; i < samples; i++) {
      const t0 = process.hrtime.bigint()
      writeSync(fd, line)
      fdatasyncSync(fd)
      times.push(Number(process.hrtime.bigint() - t0) / 1e6)
      if (gapMs > 0) await sleep(gapMs)
    }
  } finally {
    closeSync(fd)
    rmSync(path, { force: true })
  }
  return { p50Ms: quantile(times, 0.5), p99Ms: quantile(times, 0.99), meanMs: times.reduce((a, b) => a + b, 0) / times.length, samples }
}

serveCommands({ probe })
