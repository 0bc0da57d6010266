/**
 * Postgres for the pipeline benchmark: the cluster's settings, slots, the WAL
 * workload, the decoding ceiling (pg_recvlogical) and the insert load (pgbench).
 */
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { DEFAULT_PUBLICATION_NAME } from '@sluice/server'
import type { PostgresCluster, PostgresSettings } from '@sluice/test-utils'
import { startPostgres } from '@sluice/test-utils'
import { type CommandResult, runTimed, withCpus } from './proc.js'
import { ITEMS, OVERLAP, SCHEMA_SQL, parseLsnText } from './workload.js'

export const PUBLICATION = DEFAULT_PUBLICATION_NAME

/**
 * On top of the throwaway-cluster defaults (wal_level=logical, fsync=off,
 * full_page_writes=off, synchronous_commit=on). Postgres's own fsync is off so
 * the insert load is bounded by CPU, not by this VM's disk: the hardest input
 * for a sync engine sharing the machine. Sluice's storage syncs as in production.
 * No checkpoint or autovacuum should land in a measurement.
 */
export const BENCH_PG_SETTINGS: PostgresSettings = {
  wal_level: 'logical',
  fsync: false,
  synchronous_commit: true,
  full_page_writes: false,
  shared_buffers: '512MB',
  wal_buffers: '16MB',
  max_wal_size: '16GB',
  min_wal_size: '1GB',
  checkpoint_timeout: '1h',
  autovacuum: false,
  max_replication_slots: 96,
  max_wal_senders: 32,
  max_connections: 200,
  logical_decoding_work_mem: '64MB',
  wal_sender_timeout: '5min',
}

/**
 * A throwaway cluster, or with `persistentDir` one kept between runs (see
 * BENCH_FIXTURE in run.ts): its tables are emptied instead of made, before any
 * slot of this run exists, so no shape sees the rows go.
 */
export async function startBenchPostgres(persistentDir?: string): Promise<PostgresCluster> {
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS, ...(persistentDir === undefined ? {} : { persistentDir }) })
  const { rows } = await cluster.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [ITEMS])
  if (rows[0]!.t === null) for (const sql of SCHEMA_SQL) await cluster.query(sql)
  else await cluster.query(`TRUNCATE ${ITEMS}, ${OVERLAP}`)
  return cluster
}

export async function createSlot(cluster: PostgresCluster, name: string): Promise<bigint> {
  // Alone in its query: it refuses to run inside a multi-statement one.
  const { rows } = await cluster.query<{ lsn: string }>("SELECT lsn::text AS lsn FROM pg_create_logical_replication_slot($1, 'pgoutput')", [name])
  return parseLsnText(rows[0]!.lsn)
}

/** Drops a slot, waiting for its last user to let go (a walsender takes a moment to exit). */
export async function dropSlot(cluster: PostgresCluster, name: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const { rows } = await cluster.query<{ pid: number | null }>('SELECT active_pid AS pid FROM pg_replication_slots WHERE slot_name = $1', [name])
    if (rows.length === 0) return
    try {
      if (rows[0]!.pid !== null) {
        if (attempt > 20) await cluster.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid])
        throw new Error('active')
      }
      await cluster.query('SELECT pg_drop_replication_slot($1)', [name])
      return
    } catch (error) {
      if (attempt > 100) throw error
      await new Promise((r) => setTimeout(r, 100))
    }
  }
}

export interface GeneratedWorkload {
  readonly table: string
  readonly changes: number
  readonly perTx: number
  readonly transactions: number
  /** A position inside the final (marker) transaction: every workload commit is below it, the marker's commit above. */
  readonly endLsn: bigint
  /** WAL bytes from the first slot's position to endLsn. */
  readonly walBytes: number
  readonly ms: number
}

/**
 * Writes the WAL workload: `changes` row changes in transactions of `perTx`
 * (server-side, by `bench_workload`), then one marker transaction whose insert
 * position is the end the replays wait for.
 */
export async function generateWorkload(
  cluster: PostgresCluster,
  options: { table: string; startId: number; changes: number; perTx: number; markerId: number; startLsn: bigint },
): Promise<GeneratedWorkload> {
  const client = await cluster.connect()
  try {
    const t0 = performance.now()
    await client.query('CALL bench_workload($1, $2, $3, $4)', [options.table, options.startId, options.changes, options.perTx])
    const ms = performance.now() - t0
    await client.query('BEGIN')
    if (options.table === ITEMS) await client.query('SELECT bench_insert($1)', [options.markerId])
    else await client.query("INSERT INTO bench_overlap (id, owner, title, payload) VALUES ($1, 'x', 'marker', 'marker')", [options.markerId])
    const { rows } = await client.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn')
    await client.query('COMMIT')
    const endLsn = parseLsnText(rows[0]!.lsn)
    return {
      table: options.table,
      changes: options.changes,
      perTx: options.perTx,
      transactions: Math.ceil(options.changes / options.perTx),
      endLsn,
      walBytes: Number(endLsn - options.startLsn),
      ms,
    }
  } finally {
    await client.end()
  }
}

/** The current WAL position. */
export async function currentLsn(cluster: PostgresCluster): Promise<bigint> {
  const { rows } = await cluster.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')
  return parseLsnText(rows[0]!.lsn)
}

/**
 * Postgres decoding the same WAL with nothing behind it: pg_recvlogical on
 * its own slot, pgoutput with the options the pipeline uses (protocol 2,
 * streaming on, our publication), output to /dev/null, stopping at `endLsn`.
 */
export async function recvlogical(cluster: PostgresCluster, slot: string, endLsn: bigint, protoVersion: number): Promise<CommandResult> {
  const args = [
    '-h', '127.0.0.1', '-p', String(cluster.port), '-U', cluster.user, '-d', cluster.database,
    `--slot=${slot}`, '--start', `--endpos=${formatLsn(endLsn)}`, '--no-loop',
    '-o', `proto_version=${protoVersion}`, '-o', `publication_names=${PUBLICATION}`,
    ...(protoVersion >= 2 ? ['-o', 'streaming=on'] : []),
    '-f', '/dev/null',
  ]
  const result = await runTimed(join(cluster.binDir, 'pg_recvlogical'), args)
  if (result.code !== 0) throw new Error(`pg_recvlogical exited with ${result.code}: ${result.stderr}`)
  return result
}

/**
 * pg_recvlogical streaming from `slot` to /dev/null until stopped, confirming
 * what it received every `statusSeconds` (-F 0: no fsync of /dev/null, progress
 * still reported): the decoder alone, for the keep-up control. `cpus`: a
 * `taskset -c` list to run it on.
 */
export function streamRecvlogical(
  cluster: PostgresCluster,
  slot: string,
  protoVersion: number,
  statusSeconds: number,
  cpus?: string,
): { readonly pid: number; stop(): Promise<CommandResult> } {
  const args = [
    '-h', '127.0.0.1', '-p', String(cluster.port), '-U', cluster.user, '-d', cluster.database,
    `--slot=${slot}`, '--start', '--no-loop', '-F', '0', '-s', String(statusSeconds),
    '-o', `proto_version=${protoVersion}`, '-o', `publication_names=${PUBLICATION}`,
    ...(protoVersion >= 2 ? ['-o', 'streaming=on'] : []),
    '-f', '/dev/null',
  ]
  const child = spawn(...withCpus(join(cluster.binDir, 'pg_recvlogical'), args, cpus), { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (c: Buffer) => {
    stderr += c.toString('utf8')
  })
  const t0 = performance.now()
  const exited = new Promise<CommandResult>((resolve, reject) => {
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, ms: performance.now() - t0, stdout: '', stderr }))
  })
  return {
    pid: child.pid!,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT')
      return exited
    },
  }
}

function formatLsn(lsn: bigint): string {
  return `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`
}

export interface PgbenchResult {
  readonly tps: number
  readonly transactions: number
  readonly seconds: number
  readonly clients: number
  readonly output: string
}

/** Single-row inserts into bench_items (each lands in one of the `k100k` shapes), in a tight loop. */
export const PGBENCH_SCRIPT = 'SELECT bench_insert(nextval(\'bench_load_seq\'));\n'

export async function preparePgbench(cluster: PostgresCluster, dir: string): Promise<string> {
  await cluster.query('CREATE SEQUENCE IF NOT EXISTS bench_load_seq START 1000000000')
  const file = join(dir, 'insert.sql')
  await writeFile(file, PGBENCH_SCRIPT)
  return file
}

/** `cpus`: a `taskset -c` list to run pgbench (all its threads) on. */
export async function pgbench(
  cluster: PostgresCluster,
  script: string,
  options: { clients: number; threads: number; seconds: number; cpus?: string | undefined },
): Promise<PgbenchResult> {
  const args = [
    '-h', '127.0.0.1', '-p', String(cluster.port), '-U', cluster.user,
    '-n', '-M', 'prepared', '-c', String(options.clients), '-j', String(options.threads), '-T', String(options.seconds),
    '-f', script, cluster.database,
  ]
  const result = await runTimed(...withCpus(join(cluster.binDir, 'pgbench'), args, options.cpus))
  if (result.code !== 0) throw new Error(`pgbench exited with ${result.code}: ${result.stderr}${result.stdout}`)
  const tps = Number(/tps = ([\d.]+) \(without initial connection time\)/.exec(result.stdout)?.[1] ?? /tps = ([\d.]+)/.exec(result.stdout)?.[1])
  const transactions = Number(/number of transactions actually processed: (\d+)/.exec(result.stdout)?.[1])
  return { tps, transactions, seconds: options.seconds, clients: options.clients, output: result.stdout }
}

/** The walsender serving a slot, while one does. */
export async function walsenderPid(cluster: PostgresCluster, slot: string): Promise<number | undefined> {
  const { rows } = await cluster.query<{ pid: number | null }>('SELECT active_pid AS pid FROM pg_replication_slots WHERE slot_name = $1', [slot])
  return rows[0]?.pid ?? undefined
}

/** The postmaster: every other Postgres process is its child (the first line of postmaster.pid). */
export function postmasterPid(cluster: PostgresCluster): number {
  return Number(readFileSync(join(cluster.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0])
}
