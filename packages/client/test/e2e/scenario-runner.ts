import type { PostgresCluster } from '@sluice/test-utils'
import { Shape, ShapeStream } from '../../src/index.js'
import { FAST_BACKOFF } from '../harness.js'
import { type FollowedCollection, followCollection } from './electric-collection.js'

/**
 * Runs a sync scenario end to end: tables made in a real Postgres, a shape
 * followed by each client (`@sluice/client`'s Shape and TanStack DB's
 * Electric collection from npm, in each sync mode) from a real Sluice server,
 * then steps of SQL;
 * after the setup and after every step, each client's rows must equal what
 * Postgres answers to `SELECT * FROM <table> WHERE <where>`. At the end a
 * fresh set of clients syncs the shape from scratch and must agree too.
 *
 * Table names in a scenario are written `{name}` and become `<prefix>_name`,
 * so every scenario gets its own tables in one database.
 */

/** One transaction, or several committed one after another before the clients are checked. */
export type Step = string | readonly string[]

export interface Scenario {
  readonly name: string
  /** DDL and the first rows. */
  readonly setup: string
  /** The shape's table, `{name}` (quoted in the SQL if the name needs it). */
  readonly table: string
  readonly where?: string
  readonly params?: readonly string[]
  readonly steps: readonly Step[]
}

/**
 * `sluice` long-polls, `sluice-sse` follows live changes over server-sent events; `tanstack` is the
 * collection in its default `eager` mode (TanStack's own suite also runs the other two).
 */
export type ClientName = 'sluice' | 'sluice-sse' | 'tanstack' | 'tanstack-progressive' | 'tanstack-on-demand'

export const ALL_CLIENTS: readonly ClientName[] = ['sluice', 'sluice-sse', 'tanstack', 'tanstack-progressive', 'tanstack-on-demand']

export interface ScenarioTarget {
  readonly cluster: PostgresCluster
  /** `…/v1/shape` of the server under test. */
  readonly shapeUrl: string
}

export interface RunOptions {
  /** Default: all of them. */
  readonly clients?: readonly ClientName[]
  /** How long a client may take to show a step: only ends a hung run, the times are reported. */
  readonly deadlineMs?: number
}

export interface StepReport {
  readonly step: number
  /** Per client, ms from reading Postgres's rows after the step's last commit until the client's rows equalled them (polled every 5 ms). */
  readonly ms: Readonly<Partial<Record<ClientName, number>>>
}

export interface ScenarioReport {
  readonly name: string
  readonly steps: readonly StepReport[]
}

type Rows = Map<string, Record<string, string | null>>

interface Client {
  readonly name: ClientName
  rows(): Rows
  close(): Promise<void>
}

let scenarios = 0

export async function runScenario(target: ScenarioTarget, scenario: Scenario, options: RunOptions = {}): Promise<ScenarioReport> {
  const names = options.clients ?? ALL_CLIENTS
  const deadlineMs = options.deadlineMs ?? 15_000
  const prefix = `sc${++scenarios}_${process.pid}`
  const render = (sql: string): string => sql.replace(/\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, name: string) => `${prefix}_${name}`)
  const table = render(scenario.table)
  const where = scenario.where === undefined ? undefined : render(scenario.where)
  await target.cluster.query(render(scenario.setup))
  const expected = (): Promise<Rows> => selectRows(target.cluster, table, where, scenario.params)
  const reports: StepReport[] = []
  let clients = await Promise.all(names.map((name) => openClient(name, target.shapeUrl, table, where, scenario.params)))
  try {
    reports.push({ step: 0, ms: await converge(clients, expected, deadlineMs, `${scenario.name}: initial sync`) })
    for (const [index, step] of scenario.steps.entries()) {
      for (const sql of typeof step === 'string' ? [step] : step) await target.cluster.query(`BEGIN; ${render(sql)}; COMMIT`)
      reports.push({ step: index + 1, ms: await converge(clients, expected, deadlineMs, `${scenario.name}: step ${index + 1}`) })
    }
    await closeAll(clients)
    clients = await Promise.all(names.map((name) => openClient(name, target.shapeUrl, table, where, scenario.params)))
    await converge(clients, expected, deadlineMs, `${scenario.name}: a fresh sync after the last step`)
  } finally {
    await closeAll(clients)
  }
  return { name: scenario.name, steps: reports }
}

async function openClient(name: ClientName, url: string, table: string, where: string | undefined, params: readonly string[] | undefined): Promise<Client> {
  if (name !== 'sluice' && name !== 'sluice-sse') {
    const syncMode = name === 'tanstack' ? 'eager' : name === 'tanstack-progressive' ? 'progressive' : 'on-demand'
    const followed: FollowedCollection = await followCollection({
      url,
      table,
      syncMode,
      ...(where === undefined ? {} : { where }),
      ...(params === undefined ? {} : { params }),
    })
    return {
      name,
      rows: () => {
        if (followed.errors.length > 0) throw new Error(`TanStack collection failed: ${String(followed.errors[0])}`)
        return normaliseAll(followed.rows())
      },
      close: () => followed.close(),
    }
  }
  const stream = new ShapeStream({
    url,
    params: { table, ...(where === undefined ? {} : { where }), ...(params === undefined ? {} : { params }) },
    backoff: FAST_BACKOFF,
    liveSse: name === 'sluice-sse',
  })
  const shape = new Shape(stream)
  await shape.ready()
  return {
    name,
    rows: () => {
      const out: Rows = new Map()
      for (const row of shape.value.values()) out.set(String(row['id']), normalise(row))
      return out
    },
    close: () => shape.stop(),
  }
}

async function closeAll(clients: readonly Client[]): Promise<void> {
  await Promise.all(clients.map((client) => client.close()))
}

/** Waits until every client's rows equal Postgres; returns how long each took. */
async function converge(clients: readonly Client[], expected: () => Promise<Rows>, deadlineMs: number, what: string): Promise<Partial<Record<ClientName, number>>> {
  const want = await expected()
  const started = performance.now()
  const ms: Partial<Record<ClientName, number>> = {}
  let pending = [...clients]
  for (;;) {
    pending = pending.filter((client) => {
      if (!sameRows(client.rows(), want)) return true
      ms[client.name] = Math.round(performance.now() - started)
      return false
    })
    if (pending.length === 0) return ms
    if (performance.now() - started > deadlineMs) {
      const client = pending[0]!
      throw new Error(`${what}: ${client.name}'s rows differ from Postgres after ${deadlineMs} ms\n  client:   ${show(client.rows())}\n  postgres: ${show(want)}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

/** The shape's rows in Postgres, keyed by `id`, each column as the text of its JSON form (exact for int8). */
async function selectRows(cluster: PostgresCluster, table: string, where: string | undefined, params: readonly string[] | undefined): Promise<Rows> {
  const sql = `SELECT (SELECT json_object_agg(key, value) FROM jsonb_each_text(to_jsonb(t))) AS r FROM ${table} t WHERE ${where ?? 'true'}`
  const { rows } = await cluster.query<{ r: Record<string, unknown> }>(sql, params === undefined || params.length === 0 ? undefined : [...params])
  const out: Rows = new Map()
  for (const { r } of rows) out.set(String(r['id']), normalise(r))
  return out
}

/** One text form for what either client's parsers and Postgres's JSON make of a value. */
function normalise(row: Readonly<Record<string, unknown>>): Record<string, string | null> {
  const out: Record<string, string | null> = {}
  for (const [name, value] of Object.entries(row)) {
    out[name] = value === null || value === undefined ? null : typeof value === 'object' ? JSON.stringify(value) : String(value)
  }
  return out
}

function normaliseAll(rows: ReadonlyMap<string, Record<string, unknown>>): Rows {
  const out: Rows = new Map()
  for (const [key, row] of rows) out.set(key, normalise(row))
  return out
}

function sameRows(a: Rows, b: Rows): boolean {
  if (a.size !== b.size) return false
  for (const [key, row] of a) {
    const other = b.get(key)
    if (other === undefined) return false
    const names = Object.keys(row)
    if (names.length !== Object.keys(other).length || names.some((name) => row[name] !== other[name])) return false
  }
  return true
}

function show(rows: Rows): string {
  return JSON.stringify([...rows.values()].sort((a, b) => String(a['id']).localeCompare(String(b['id']), 'en', { numeric: true })))
}
