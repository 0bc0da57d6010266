/**
 * bench:storage: the storage engine against SQLite, LMDB and a raw file, side
 * by side in one run, on the workloads of Electric's storage write-up.
 *
 * Measures: the cost of appending pre-encoded change lines (1, 20 and 1000 rows
 * per transaction, buffered and durable) and of reading whole chunks back into
 * memory from a mid-chunk offset, by one reader and by 200 at once.
 * Does not measure: HTTP, JSON encoding, replication, cold-cache disk reads
 * (every read hits the page cache), many shapes at once, or crash recovery.
 *
 * Usage: `pnpm --filter @sluice/bench run bench:storage`. QUICK=1: a smoke run
 * of under a minute (written to results/storage.quick.*); ONLY=append,durable,
 * read,fanout: a subset (results/storage.partial.*); BENCH_DIR: where the data
 * files go (default: the OS temp dir).
 */
import { createHash } from 'node:crypto'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { LogEntryInput } from '@sluice/storage'
import type { BenchLog, EngineName } from './engines.js'
import { ENGINES as ALL_ENGINES, openBenchLog } from './engines.js'
import type { ReadLogPlan } from './layout.js'
import { planReadLog, planTransactions } from './layout.js'
import { ReadBuffer } from './materialise.js'
import type { Budget, Contender } from './measure.js'
import { ByteCounter, runRounds } from './measure.js'
import type { Machine, Measurement, TargetCheck, WorkloadInfo } from './report.js'
import { machineInfo, markdownTable, tableRows, targetChecks, verdict } from './report.js'
import type { RowPool } from './rows.js'
import { TxSource, rowPool, storedBytes } from './rows.js'

const QUICK = process.env.QUICK === '1'
/** BENCH_FRESH=1: materialise reads with readSpans into fresh buffers instead of each reader's reusable one. */
const FRESH = process.env.BENCH_FRESH === '1'
const ONLY = new Set((process.env.ONLY ?? 'append,durable,read,fanout').split(',').map((s) => s.trim()))

const MiB = 1024 * 1024

/** BENCH_ENGINES=ours,raw runs a subset of the engines (partial results). */
const ENGINES: readonly EngineName[] = process.env.BENCH_ENGINES
  ? ALL_ENGINES.filter((e) => process.env.BENCH_ENGINES!.split(',').includes(e))
  : ALL_ENGINES

/** At most this long before each workload, wait for outside CPU load to settle (none in QUICK runs). */
const QUIET_WAIT_MS = Number(process.env.BENCH_QUIET_WAIT_MS ?? (QUICK ? 0 : 60_000))

/** Everything a run's size depends on; QUICK shrinks it to a smoke test. */
interface Settings {
  /** Chunk size of the append and single-reader workloads. */
  readonly chunkBytes: number
  /** Chunk size of the 200-reader workloads (the report's method section says why it differs). */
  readonly fanoutChunkBytes: number
  readonly appendRows: readonly number[]
  readonly durableRows: number
  readonly readChunks: readonly number[]
  readonly readers: number
  /** Closed chunks in each read log, and distinct mid-chunk start offsets. */
  readonly readLogChunks: number
  readonly fanoutLogChunks: number
  readonly starts: number
  readonly append: Budget
  readonly durable: Budget
  readonly read: Budget
  readonly fanout: Budget
}

const SETTINGS: Settings = QUICK
  ? {
      chunkBytes: 1 * MiB,
      fanoutChunkBytes: 32 * 1024,
      appendRows: [1, 20, 1000],
      durableRows: 20,
      readChunks: [5, 10],
      readers: 200,
      readLogChunks: 14,
      fanoutLogChunks: 24,
      starts: 8,
      append: { rounds: 2, time: 200, iterations: 16, warmupTime: 50, warmupIterations: 16 },
      durable: { rounds: 2, time: 200, iterations: 8, warmupTime: 20, warmupIterations: 2 },
      read: { rounds: 2, time: 150, iterations: 1, warmupTime: 0, warmupIterations: 1 },
      fanout: { rounds: 1, time: 0, iterations: 1, warmupTime: 0, warmupIterations: 0 },
    }
  : {
      chunkBytes: 10 * MiB,
      fanoutChunkBytes: 256 * 1024,
      appendRows: [1, 20, 1000],
      durableRows: 20,
      readChunks: [5, 10],
      readers: 200,
      readLogChunks: 14,
      fanoutLogChunks: 40,
      starts: 16,
      append: { rounds: 3, time: 1500, iterations: 32, warmupTime: 250, warmupIterations: 16 },
      durable: { rounds: 3, time: 1500, iterations: 16, warmupTime: 50, warmupIterations: 4 },
      read: { rounds: 3, time: 2000, iterations: 2, warmupTime: 0, warmupIterations: 2 },
      fanout: { rounds: 3, time: 2400, iterations: 1, warmupTime: 0, warmupIterations: 0 },
    }

const here = dirname(fileURLToPath(import.meta.url))
const resultsDir = join(here, '..', 'results')

/** The byte count a read from each planned start must return, for reads of `n` chunks. */
function expectedBytes(plan: ReadLogPlan, n: number): number[] {
  return plan.starts.map((s) => s.bytesFor.get(n)!)
}

function checked(engine: EngineName, got: number, want: number): number {
  if (got !== want) throw new Error(`${engine} read ${got} bytes, expected ${want}`)
  return got
}

/** Appends of `rows`-row transactions, each engine to a fresh log; `durable`: each append synced before the next. */
async function appendWorkload(pool: RowPool, root: string, rows: number, durable: boolean, results: Measurement[]): Promise<void> {
  const workload = `${durable ? 'durable-' : ''}append-${rows}`
  console.log(`\n${workload}: one transaction of ${rows} row${rows > 1 ? 's' : ''} per op, ${durable ? 'durable before the op returns' : 'no fsync'}`)
  const logs: BenchLog[] = []
  const dirs: string[] = []
  try {
    const contenders: Contender[] = []
    for (const engine of ENGINES) {
      const dir = join(root, `${workload}-${engine}`)
      dirs.push(dir)
      const log = await openBenchLog(engine, { dir, chunkBytes: SETTINGS.chunkBytes, durable, forReads: false })
      logs.push(log)
      const source = new TxSource(pool)
      const counter = new ByteCounter()
      let next: LogEntryInput[] = []
      contenders.push({
        workload,
        engine,
        counter,
        beforeEach: () => {
          next = source.transaction(rows)
          counter.add(storedBytes(next))
        },
        fn: durable ? () => log.appendDurable(next) : () => log.append(next),
      })
    }
    results.push(...(await runRounds(contenders, durable ? SETTINGS.durable : SETTINGS.append, QUIET_WAIT_MS)))
  } finally {
    for (const log of logs) await log.close()
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
  }
}

/** Builds the same read log in every engine and checks that they all return the same bytes for a read of each length. */
async function buildReadLogs(pool: RowPool, root: string, name: string, plan: ReadLogPlan): Promise<Map<EngineName, BenchLog>> {
  console.log(
    `\nbuilding ${name}: ${plan.closedChunks} chunks of ${plan.chunkBytes / 1024} KiB ` +
      `(${(plan.totalBytes / MiB).toFixed(0)} MiB, ${plan.transactions} transactions of ${plan.rowsPerTx} rows) in every engine`,
  )
  const logs = new Map<EngineName, BenchLog>()
  for (const engine of ENGINES) {
    const started = performance.now()
    const log = await openBenchLog(engine, {
      dir: join(root, `${name}-${engine}`),
      chunkBytes: plan.chunkBytes,
      durable: false,
      forReads: true,
      freshBuffers: FRESH,
    })
    logs.set(engine, log)
    for (const tx of planTransactions(pool, plan)) log.append(tx)
    await log.publish(plan.lastLsn)
    console.log(`  ${engine.padEnd(6)} ${((performance.now() - started) / 1000).toFixed(1)} s`)
  }
  const start = plan.starts[0]!
  for (const [n, expected] of start.bytesFor) {
    const digests = new Set<string>()
    for (const [engine, log] of logs) {
      const hash = createHash('sha256')
      const got = log.readChunks(start.after, n, new ReadBuffer(), (b) => hash.update(b))
      if (got !== expected) throw new Error(`${name}: ${engine} read ${got} bytes over ${n} chunks, expected ${expected}`)
      digests.add(hash.digest('hex'))
    }
    if (digests.size > 1) throw new Error(`${name}: engines disagree on the bytes of a ${n}-chunk read`)
  }
  return logs
}

async function withReadLogs(
  pool: RowPool,
  root: string,
  name: string,
  plan: ReadLogPlan,
  body: (logs: Map<EngineName, BenchLog>) => Promise<void>,
): Promise<void> {
  const logs = await buildReadLogs(pool, root, name, plan)
  try {
    await body(logs)
  } finally {
    for (const log of logs.values()) await log.close()
    rmSync(join(root, name), { recursive: true, force: true })
    for (const engine of ENGINES) rmSync(join(root, `${name}-${engine}`), { recursive: true, force: true })
  }
}

/** One reader: the rest of a chunk from a mid-chunk offset plus n whole chunks, synchronous reads. */
async function readWorkloads(pool: RowPool, root: string, results: Measurement[]): Promise<void> {
  const plan = planReadLog(pool, {
    chunkBytes: SETTINGS.chunkBytes,
    chunks: SETTINGS.readLogChunks,
    rowsPerTx: 1000,
    startCount: SETTINGS.starts,
    reads: SETTINGS.readChunks,
    seed: 7,
  })
  await withReadLogs(pool, root, 'read-log', plan, async (logs) => {
    for (const n of SETTINGS.readChunks) {
      const workload = `read-${n}`
      console.log(`\n${workload}: one reader, the rest of a chunk from a mid-chunk offset plus ${n} whole chunks, synchronous reads`)
      const want = expectedBytes(plan, n)
      const contenders = [...logs].map(([engine, log]): Contender => {
        const counter = new ByteCounter()
        const into = new ReadBuffer()
        let i = 0
        return {
          workload,
          engine,
          counter,
          prime: () => {
            for (const [k, start] of plan.starts.entries()) checked(engine, log.readChunks(start.after, n, into), want[k]!)
          },
          fn: () => {
            const k = i++ % want.length
            counter.add(checked(engine, log.readChunks(plan.starts[k]!.after, n, into), want[k]!))
          },
        }
      })
      results.push(...(await runRounds(contenders, SETTINGS.read, QUIET_WAIT_MS)))
    }
  })
}

/** 200 readers of the same log, all at once or one after another, with the same asynchronous reads. */
async function fanoutWorkloads(pool: RowPool, root: string, results: Measurement[]): Promise<void> {
  const plan = planReadLog(pool, {
    chunkBytes: SETTINGS.fanoutChunkBytes,
    chunks: SETTINGS.fanoutLogChunks,
    rowsPerTx: 20,
    startCount: SETTINGS.starts,
    reads: SETTINGS.readChunks,
    seed: 11,
  })
  const readers = SETTINGS.readers
  const starts = plan.starts
  // One reusable buffer per reader (a concurrent reader cannot share one), kept across ops and modes.
  const buffers = Array.from({ length: readers }, () => new ReadBuffer())
  await withReadLogs(pool, root, 'fanout-log', plan, async (logs) => {
    for (const n of SETTINGS.readChunks) {
      const want = expectedBytes(plan, n)
      const read = async (log: BenchLog, r: number): Promise<number> =>
        checked(log.engine, await log.readChunksAsync(starts[r % starts.length]!.after, n, buffers[r]!), want[r % starts.length]!)
      console.log(`\nfanout-${n}: ${readers} readers of ${n} chunks (plus the rest of the first), concurrent and sequential, asynchronous reads; one op = all ${readers}`)
      // Both modes of every engine interleave in the same rounds: their ratio is the figure that matters.
      const contenders: Contender[] = []
      for (const [engine, log] of logs) {
        for (const mode of ['concurrent', 'sequential'] as const) {
          const counter = new ByteCounter()
          contenders.push({
            workload: `fanout-${n}-${mode}`,
            engine,
            counter,
            prime: async () => {
              for (let r = 0; r < readers; r++) await read(log, r)
            },
            fn:
              mode === 'concurrent'
                ? async () => {
                    const got = await Promise.all(Array.from({ length: readers }, (_, r) => read(log, r)))
                    counter.add(got.reduce((a, b) => a + b, 0))
                  }
                : async () => {
                    let bytes = 0
                    for (let r = 0; r < readers; r++) bytes += await read(log, r)
                    counter.add(bytes)
                  },
          })
        }
      }
      results.push(...(await runRounds(contenders, SETTINGS.fanout, QUIET_WAIT_MS)))
    }
  })
}

function workloadInfos(): WorkloadInfo[] {
  const w: WorkloadInfo[] = []
  for (const rows of SETTINGS.appendRows) w.push({ id: `append-${rows}`, title: `append ${rows} row${rows > 1 ? 's' : ''}/tx`, op: 'one transaction' })
  w.push({ id: `durable-append-${SETTINGS.durableRows}`, title: `durable append ${SETTINGS.durableRows} rows/tx`, op: 'one durable transaction' })
  for (const n of SETTINGS.readChunks) w.push({ id: `read-${n}`, title: `read ${n} chunks, 1 reader`, op: `one read of ${n} chunks` })
  for (const n of SETTINGS.readChunks) {
    w.push({ id: `fanout-${n}-concurrent`, title: `read ${n} chunks, ${SETTINGS.readers} concurrent`, op: `${SETTINGS.readers} reads` })
    w.push({ id: `fanout-${n}-sequential`, title: `read ${n} chunks, ${SETTINGS.readers} sequential`, op: `${SETTINGS.readers} reads` })
  }
  return w
}

async function main(): Promise<void> {
  const started = performance.now()
  const base = process.env.BENCH_DIR ?? tmpdir()
  mkdirSync(base, { recursive: true })
  const root = mkdtempSync(join(base, 'sluice-bench-storage-'))
  const machine = machineInfo(root)
  const pool = rowPool()
  const loadBefore = loadavg()[0]!
  console.log(`storage bench${QUICK ? ' (QUICK: smoke-test sizes, not results)' : ''}`)
  console.log(`${machine.nproc} x ${machine.cpu}, ${machine.memoryGiB} GiB, node ${machine.node}, data in ${root} (${machine.filesystem})`)
  console.log(`rows: ${pool.rows.length} distinct change lines, mean ${pool.meanBytes.toFixed(1)} bytes of JSON (+1 separator); load average ${loadBefore.toFixed(2)}`)

  const results: Measurement[] = []
  try {
    if (ONLY.has('append')) for (const rows of SETTINGS.appendRows) await appendWorkload(pool, root, rows, false, results)
    if (ONLY.has('durable')) await appendWorkload(pool, root, SETTINGS.durableRows, true, results)
    if (ONLY.has('read')) await readWorkloads(pool, root, results)
    if (ONLY.has('fanout')) await fanoutWorkloads(pool, root, results)
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
  const load = { before: loadBefore, after: loadavg()[0]! }

  const workloads = workloadInfos()
  const rows = tableRows(workloads, results)
  const checks = targetChecks(results, SETTINGS.appendRows, SETTINGS.readChunks)
  const seconds = (performance.now() - started) / 1000

  console.log('\nresults (ops/s and MB/s from the mean latency; "ours vs it" = ours throughput / its throughput)')
  console.table(rows)
  console.log('\ntargets')
  for (const c of checks) console.log(`  ${verdict(c.met).padEnd(7)} ${c.target}: ${c.figure}`)

  mkdirSync(resultsDir, { recursive: true })
  // Smoke and partial runs never overwrite the full results.
  const stem = QUICK ? 'storage.quick' : process.env.ONLY || process.env.BENCH_ENGINES ? 'storage.partial' : 'storage'
  const json = {
    benchmark: 'storage',
    quick: QUICK,
    machine,
    loadAverage1m: load,
    settings: SETTINGS,
    rows: { distinct: pool.rows.length, meanJsonBytes: pool.meanBytes },
    durationSeconds: Math.round(seconds),
    workloads,
    results,
    targets: checks,
  }
  writeFileSync(join(resultsDir, `${stem}.json`), `${JSON.stringify(json, null, 2)}\n`)
  writeFileSync(join(resultsDir, `${stem}.md`), renderMarkdown(machine, load, pool, markdownTable(rows), checks, seconds, readDiskMiB(results)))
  console.log(`\nwrote results/${stem}.json and results/${stem}.md (${seconds.toFixed(0)} s)`)
}

/** MiB read from disk during the timed read tasks, by engine; undefined when unknown. */
function readDiskMiB(results: readonly Measurement[]): Map<EngineName, number> | undefined {
  const reads = results.filter((m) => m.workload.startsWith('read-') || m.workload.startsWith('fanout-'))
  if (reads.length === 0 || reads.some((m) => m.diskReadMiB === null)) return undefined
  const by = new Map<EngineName, number>()
  for (const m of reads) by.set(m.engine, (by.get(m.engine) ?? 0) + m.diskReadMiB!)
  return by
}

function budgetText(b: Budget): string {
  return `${b.rounds} round${b.rounds > 1 ? 's' : ''}, ${b.time} ms of timed ops per engine (at least ${b.iterations} per round)`
}

function renderMarkdown(
  machine: Machine,
  load: { before: number; after: number },
  pool: RowPool,
  table: string,
  checks: readonly TargetCheck[],
  seconds: number,
  diskMiB: Map<EngineName, number> | undefined,
): string {
  const s = SETTINGS
  const size = (b: number) => (b >= MiB ? `${b / MiB} MiB` : `${b / 1024} KiB`)
  return `# Storage micro-benchmark${QUICK ? ' (QUICK smoke run: not results)' : ''}

Produced by \`pnpm --filter @sluice/bench run bench:storage\` (\`bench/storage/run.ts\`) on ${machine.date.slice(0, 10)}; the run took ${seconds.toFixed(0)} s.

**Measures:** the time to append pre-encoded change lines to one shape log (1, 20 and 1000 rows per transaction, buffered and durable) and to read whole chunks back into memory from a mid-chunk offset, by one reader and by ${s.readers} at once, for our file engine, SQLite, LMDB and a raw file, in one process and one run.
**Does not measure:** HTTP or sendfile, JSON encoding, replication, reads that miss the page cache (disk reads during the timed reads, machine-wide: ${diskMiB === undefined ? 'unknown' : [...diskMiB].map(([e, v]) => `${e} ${v.toFixed(0)} MiB`).join(', ')}), many shapes at once, recovery, or any other machine: the figures hold for this machine and this run only.

## Machine

| | |
|---|---|
| CPU | ${machine.nproc} x ${machine.cpu} |
| memory | ${machine.memoryGiB} GiB |
| node | ${machine.node} |
| OS | ${machine.os} |
| data directory | ${machine.filesystem} |
| date | ${machine.date} |
| 1-minute load average | ${load.before.toFixed(2)} before, ${load.after.toFixed(2)} after (the machine is shared; other work may have run alongside) |

## Method

- **Engines.** *ours*: \`openFileLogStore\` from \`@sluice/storage\`. *SQLite*: better-sqlite3, WAL mode, one table keyed \`(shape, tx, op)\` WITHOUT ROWID, prepared statements, one SQLite transaction per append; a read is one primary-key range query whose rows SQLite concatenates (\`peers/sqlite-store.ts\`). *LMDB*: lmdb-js, 20-byte binary keys \`shape|tx|op\`, one \`transactionSync\` of \`putSync\`s per append, a read is one \`getRange\` (\`peers/lmdb-store.ts\`). Both peers implement the whole \`ShapeLogStore\` contract (chunks closing at the same byte threshold, snapshot offsets \`0_n\`, reads to the end of the chunk, replays skipped, entries visible only after advance + flush) and are tested read for read against \`MemoryLogStore\` (\`peers.test.ts\`). *raw*: the same bytes with one \`fs.writeSync\` per transaction into a plain file, and \`pread\` of the same byte ranges located with a perfect in-memory index: the ceiling, with no file format, index or watermark to keep.
- **Rows.** ${pool.rows.length} distinct change lines shaped like the server's (\`{"key":…,"value":{…},"headers":{"operation":…,"relation":["public","items"],"lsn":…,"op_position":…,"txids":[…]}}\`), mean ${pool.meanBytes.toFixed(0)} bytes of JSON plus the one-byte separator every engine stores. Encoded before timing; each op's transaction is built outside the timed call.
- **Appends.** ${s.appendRows.join(', ')} rows per transaction (Electric's small, medium and large transactions), each engine appending to a fresh log. **No engine syncs in these:** ours appends with its background group commit switched off (no flush at all); SQLite runs \`synchronous=NORMAL\` in WAL mode, which does not fsync per commit (its automatic checkpoints every 1000 WAL pages do sync, and are part of its cost); LMDB runs with \`noSync\`; raw never calls fsync.
- **Durable appends.** ${s.durableRows} rows per transaction, each durable before the op returns: ours appends, \`advance\`s and \`flush\`es (its group commit with one log dirty: fdatasync of the log's files, then the watermark: write, fsync, rename, directory fsync); SQLite commits under \`synchronous=FULL\` (one WAL fsync); LMDB commits with sync (\`noSync: false, overlappingSync: false\`); raw writes then \`fdatasync\`s. The peers' flush then only publishes (they persist no separate watermark in this mode, which spares them a second sync per op).
- **Chunk size.** ${size(s.chunkBytes)} for the appends and single-reader reads: the size Electric's write-up gives for its chunks ("every 10MB of JSON", "if the 10MiB chunk is complete") and our default. The ${s.readers}-reader workloads use ${size(s.fanoutChunkBytes)} chunks: at ${size(s.chunkBytes)} one op would copy ${((s.readers * 10.5 * s.chunkBytes) / 2 ** 30).toFixed(0)} GiB and the peers would take many minutes per op here. Electric's own figures (10 chunks in 2.1 ms by one reader, 200 readers in 0.21 s) cannot have moved 10 MiB chunks either, so its micro-benchmark must have used smaller ones, but the write-up does not say which.
- **Reads.** Each read log is built the same way in every engine (${s.readLogChunks} chunks from 1000-row transactions for one reader; ${s.fanoutLogChunks} chunks from 20-row transactions for ${s.readers} readers), published with advance + flush, primed (each engine reads from every start offset once, untimed, right before a workload's first round) and checked: all engines return the same bytes (SHA-256) for a read of each length, and every timed read checks its byte count. One read starts after an entry 20-80% into a chunk (${s.starts} such offsets, used in turn), reads to that chunk's end, then follows \`nextOffset\` through ${s.readChunks.join(' or ')} more whole chunks, materialising each range into one buffer as a server does per request: ${FRESH ? 'a fresh buffer per range (\`readSpans\`/\`readSpansAsync\`; BENCH_FRESH=1)' : 'each reader copies into its own reusable buffer (the server\'s "pread into a pooled buffer"); fresh buffers per range (\`readSpans\`, BENCH_FRESH=1) made the figures depend on V8\'s garbage collection more than on the engines (see \`storage/materialise.ts\`)'}. A range an engine already returns as one in-memory buffer (SQLite's) is used as is.
  - *One reader*, synchronous: ours \`pread\` of its file span, raw \`pread\`; the peers' reads are synchronous anyway (SQLite returns one BLOB per range, LMDB one value per entry, copied together).
  - *${s.readers} readers*: one op is ${s.readers} reads, all started at once (concurrent) or one after another (sequential), by the same async code, each reader with its own buffer. Ours and raw: \`fs.read\` with a callback on the file span, on libuv's 4-thread pool. better-sqlite3 and lmdb-js offer no asynchronous range read, so a peer reader runs a synchronous query per chunk and yields between chunks: its "concurrent" readers interleave on the one JS thread and cannot overlap.
- **Timing.** tinybench 6.2.3 with the \`hrtime\` clock. Each workload runs in interleaved rounds: every engine (for the ${s.readers}-reader workloads, every engine in both modes) gets a short tinybench task per round, in an order that rotates each round, and the samples are pooled (warm-up in the first round only; GC forced before each task). Budgets: appends ${budgetText(s.append)}; durable ${budgetText(s.durable)}; single reads ${budgetText(s.read)}; ${s.readers}-reader ops ${budgetText(s.fanout)}. ops/s = 1000 / mean latency; MB/s = mean bytes per op x ops/s (10^6 bytes); "ours vs it" = ours ops/s / its ops/s (above 1: ours is faster); *mean ±95%* is the 95% interval of the mean latency (normal approximation), relative to it. The targets are judged on these mean-based figures. Before each workload the runner waits up to ${QUIET_WAIT_MS / 1000} s for the machine's CPU pressure (Linux PSI, last 10 s) to fall below 10%; the *CPU pressure* column is the share of the workload's wall time in which some task on the machine waited for a CPU (2 cores here: the ${s.readers}-reader workloads raise it themselves, with libuv's 4 threads).

## Results

${table}

## Target checks

| target | figure | verdict |
|---|---|---|
${checks.map((c) => `| ${c.target} | ${c.figure} | ${verdict(c.met)} |`).join('\n')}

## Caveats: where the comparison leans

- **raw is a ceiling, not a rival.** It keeps a perfect index in memory and writes one file; ours also encodes a fixed-width index record per entry (staged in memory and written to \`entries.idx\` once per flush, with chunk records), validates every offset, and copies the separate change lines into one buffer before its one write per append; raw writes a buffer concatenated before timing. "% of raw MB/s" counts only the JSON bytes both store.
- **Buffered appends never sync, for any engine.** In production our engine's group commit (every 10 ms by default) syncs in the background, off the append path; SQLite's automatic WAL checkpoints do sync inside its appends, because that is what \`synchronous=NORMAL\` does (they could be deferred with \`wal_autocheckpoint\`, which was not done).
- **Durable appends favour the peers slightly.** LMDB's synced commit is two syncs (data, then meta page) by design; in that mode neither peer writes a watermark, while ours runs its whole group commit (fdatasync of the log's files, then write, fsync, rename and directory fsync of the watermark) for every single append, its worst case: it is built to share one sync among many appends and shapes.
- **The peers got their fastest reasonable read path.** SQLite concatenates a range inside SQLite (\`group_concat\` over the primary-key range; one BLOB per row was about 4x slower through better-sqlite3). LMDB keys are one per entry, as the brief asked (\`shape|tx|op\`), and keys are not decoded on reads; lmdb-js still pays a native call and a copy per entry, which dominates its reads. One LMDB value per transaction or per chunk would read far faster, but would no longer be a \`(shape, tx, op)\`-keyed store.
- **${s.readers} concurrent readers:** the peers' bindings are synchronous, so their readers interleave rather than overlap; ours and raw overlap on libuv's 4 threads, on 2 cores, which also raises the CPU pressure they report.
- **Reads are page-cache reads** into reusable buffers, with ${size(s.fanoutChunkBytes)} chunks for the ${s.readers}-reader workloads (see Method); a cold cache, sendfile, or fresh buffers per range (BENCH_FRESH=1) would all move the figures.
- **The machine is shared.** Other test suites ran on these 2 cores during the run (see the load average and the *CPU pressure* column). Between full runs on this machine the same figure moved by up to about 2x for single workloads; ratios between engines measured in the same interleaved rounds moved less. Treat one run as one sample.
`
}

await main()
