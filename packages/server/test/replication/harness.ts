import { spawn, spawnSync } from 'node:child_process'
import { type AddressInfo, type Socket, connect, createServer } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { PostgresCluster } from '@sluice/test-utils'
import pg from 'pg'
import {
  BufferingSink,
  type ChangeSink,
  DISPLAY_SETTINGS,
  type LogicalMessage,
  MemoryStreamBuffer,
  PublicationManager,
  ReplicationClient,
  type ReplicationClientOptions,
  SlotManager,
  type StreamAbort,
  type StreamCommit,
  type Transaction,
  startupOptions,
  wholeTransactions,
} from '../../src/replication/index.js'

/** Polls `check` until it returns something other than undefined/false. */
export async function waitFor<T>(check: () => T | undefined | false | Promise<T | undefined | false>, what: string, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined && value !== false) return value
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(20)
  }
}

/**
 * A sink that rebuilds every transaction in memory (MemoryStreamBuffer) and
 * also records the raw streaming callbacks, so tests can check both what
 * arrived and how.
 */
export class CollectingSink implements ChangeSink {
  readonly transactions: Transaction[] = []
  readonly streamedBatches: Array<{ xid: number; count: number }> = []
  readonly streamCommits: StreamCommit[] = []
  readonly streamAborts: StreamAbort[] = []
  readonly messages: LogicalMessage[] = []
  private readonly buffer = new BufferingSink(
    new MemoryStreamBuffer(),
    wholeTransactions((tx) => void this.transactions.push(tx)),
  )

  onTransaction(tx: Transaction): void {
    this.transactions.push(tx)
  }
  onStreamedChanges(xid: number, changes: Parameters<ChangeSink['onStreamedChanges']>[1]): void {
    this.streamedBatches.push({ xid, count: changes.length })
    void this.buffer.onStreamedChanges(xid, changes)
  }
  onStreamCommit(commit: StreamCommit): Promise<void> | void {
    this.streamCommits.push(commit)
    return this.buffer.onStreamCommit(commit)
  }
  onStreamAbort(abort: StreamAbort): void {
    this.streamAborts.push(abort)
    void this.buffer.onStreamAbort(abort)
  }

  onLogicalMessage(message: LogicalMessage): void {
    this.messages.push(message)
  }

  /** Transactions that touched `table`. */
  on(table: string): Transaction[] {
    return this.transactions.filter((tx) => tx.changes.some((c) => (c.kind === 'truncate' ? c.relations.some((r) => r.table === table) : c.relation.table === table)))
  }

  waitForCount(table: string, count: number, timeoutMs?: number): Promise<Transaction[]> {
    return waitFor(() => {
      const txs = this.on(table)
      return txs.length >= count ? txs : undefined
    }, `${count} transaction(s) on ${table}`, timeoutMs)
  }
}

let slotCounter = 0

/** A unique slot/publication pair per test, so tests never see each other's changes. */
export async function setUpReplication(cluster: PostgresCluster, tables: ReadonlyArray<readonly [string, string]>): Promise<{ slot: SlotManager; publication: PublicationManager }> {
  const suffix = `${process.pid}_${++slotCounter}`
  const publication = new PublicationManager(queryable(cluster), { name: `sluice_pub_${suffix}` })
  await publication.ensure()
  for (const [schema, table] of tables) await publication.addTable(schema, table)
  const slot = new SlotManager(queryable(cluster), { name: `sluice_slot_${suffix}` })
  await slot.ensure()
  return { slot, publication }
}

/** The cluster's pool as a Queryable. */
export function queryable(cluster: PostgresCluster): { query(text: string, values?: unknown[]): Promise<{ rows: Array<Record<string, unknown>> }> } {
  return { query: (text, values) => cluster.query(text, values) }
}

export function startClient(
  cluster: PostgresCluster,
  names: { slot: SlotManager; publication: PublicationManager },
  options: Partial<ReplicationClientOptions> & { durableLsn: () => bigint },
): { client: ReplicationClient; sink: CollectingSink } {
  const sink = new CollectingSink()
  const client = new ReplicationClient({
    connection: cluster.url,
    slotName: names.slot.name,
    publicationNames: [names.publication.name],
    sink,
    backoff: { initialMs: 50, maxMs: 500, multiplier: 2 },
    ...options,
  })
  return { client, sink }
}

/**
 * A normal (non-replication) session with the display settings of
 * docs/protocol.md §3.5 whose results stay raw text: what each type's output
 * function printed, the same function pgoutput calls.
 */
export async function displaySession(cluster: PostgresCluster): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: cluster.url,
    options: startupOptions(DISPLAY_SETTINGS),
    types: { getTypeParser: () => (value: string) => value },
  })
  client.on('error', () => {})
  await client.connect()
  return client
}

/**
 * Stops the test cluster in place with pg_ctl (as the cluster's OS user when we
 * are root): test-utils has no restart. 'immediate' is a crash (no shutdown
 * checkpoint, walsenders killed); 'fast' is a clean shutdown, which waits for
 * every walsender to have its WAL confirmed.
 */
export async function stopPostgres(cluster: PostgresCluster, mode: 'fast' | 'immediate'): Promise<void> {
  await run(join(cluster.binDir, 'pg_ctl'), ['stop', '-D', cluster.dataDir, '-m', mode, '-w', '-t', '120', '-s'])
}

/** Starts the cluster stopped by `stopPostgres` again, on the same port. */
export async function startPostgresAgain(cluster: PostgresCluster): Promise<void> {
  await run(join(cluster.binDir, 'pg_ctl'), ['start', '-D', cluster.dataDir, '-l', cluster.logFile, '-w', '-t', '60', '-s', '-o', `-p ${cluster.port}`])
}

function run(command: string, args: string[]): Promise<void> {
  const asPostgres = process.getuid?.() === 0 ? postgresIds() : undefined
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], cwd: '/', ...(asPostgres ?? {}) })
    let output = ''
    child.stdout.on('data', (d: Buffer) => (output += d.toString()))
    child.stderr.on('data', (d: Buffer) => (output += d.toString()))
    child.on('error', reject)
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${command} ${args.join(' ')} exited ${code}: ${output}`))))
  })
}

function postgresIds(): { uid: number; gid: number } {
  const out = spawnSyncText('id', ['-u', 'postgres']).trim()
  const gid = spawnSyncText('id', ['-g', 'postgres']).trim()
  return { uid: Number(out), gid: Number(gid) }
}

function spawnSyncText(command: string, args: string[]): string {
  const result = spawnSync(command, args, { encoding: 'utf8' })
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} failed: ${result.stderr}`)
  return result.stdout
}

export interface TcpProxy {
  readonly port: number
  /** Destroys every open connection (both sides): a dropped network link. */
  dropAll(): void
  /** Stops forwarding on the open connections without closing them: a silent, dead link. */
  freeze(): void
  /** Sends `bytes` to every client as if Postgres had (between two of its messages, when it is quiet). */
  injectToClients(bytes: Uint8Array): void
  close(): Promise<void>
}

/**
 * A TCP proxy in front of Postgres, to break the replication connection in
 * ways a restart does not: abruptly, or silently. New connections always
 * forward; a side that closes closes its peer even while frozen.
 */
export async function startProxy(targetPort: number): Promise<TcpProxy> {
  const pairs = new Set<{ client: Socket; server: Socket; frozen: boolean }>()
  const server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1')
    const pair = { client, server: upstream, frozen: false }
    pairs.add(pair)
    const forward = (from: Socket, to: Socket) =>
      from.on('data', (chunk: Buffer) => {
        if (!pair.frozen) to.write(chunk)
      })
    forward(client, upstream)
    forward(upstream, client)
    const close = () => {
      pairs.delete(pair)
      client.destroy()
      upstream.destroy()
    }
    for (const socket of [client, upstream]) {
      socket.on('error', close)
      socket.on('close', close)
    }
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    port,
    dropAll: () => {
      for (const pair of pairs) {
        pair.client.destroy()
        pair.server.destroy()
      }
    },
    freeze: () => {
      for (const pair of pairs) pair.frozen = true
    },
    injectToClients: (bytes) => {
      for (const pair of pairs) pair.client.write(bytes)
    },
    close: async () => {
      for (const pair of pairs) {
        pair.client.destroy()
        pair.server.destroy()
      }
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
