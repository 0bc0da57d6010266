/**
 * Random tables, random subquery shapes and a random write workload, for the
 * subquery oracle (subquery-oracle.pg.test.ts) and the subquery crash test
 * (pipeline/subquery-crash.pg.test.ts); and `SubqueryFollower`, a client that
 * follows one shape over HTTP as a client library does (tags, move-in,
 * move-out, 409 then refetch) and compares its rows with Postgres's own
 * `SELECT … WHERE <clause>`.
 *
 * Every table has the same column kinds, so any table can be the outer or an
 * inner one (also both at once): an int key (`id`, or `(id, part)`), join
 * columns of two types (`i*` int4, `t*` text) holding a few values and NULL,
 * so rows move in and out often, a `flag` bool and an int `n` for row
 * predicates. A clause is a small random AND/OR/NOT tree of `col [NOT] IN
 * (SELECT …)` (one column or a row of two, the inner clause with its own
 * predicates, `$n` parameters and now and then a nested subquery) and row
 * predicates. The workload inserts, deletes, changes join columns, flags and
 * keys, several rows at a time or one, one to four statements a transaction.
 */
import { buildRowKey } from '@sluice/protocol'
import { SeededRandom as Rng } from '@sluice/test-utils'
import { type Res, call, messages, shapeUrl } from './http-harness.js'
import { TagTracker, type WireMessage } from './subqueries-tracker.js'

export { Rng }

export interface TableSpec {
  readonly name: string
  readonly pk: readonly string[]
  readonly ints: readonly string[]
  readonly texts: readonly string[]
}

export interface SubquerySchema {
  readonly tables: readonly TableSpec[]
  /** CREATE TABLE statements. */
  readonly sql: string
}

const TEXTS = ['a', 'b', 'c', 'd', 'e']
const INTS = 6

/** Tables `<prefix>1…`, each with one or two int and text join columns; a third have a composite key. */
export function randomSchema(rng: Rng, prefix: string, count: number): SubquerySchema {
  const tables: TableSpec[] = []
  const statements: string[] = []
  for (let t = 1; t <= count; t++) {
    const name = `${prefix}${t}`
    const pk = rng.chance(0.3) ? ['id', 'part'] : ['id']
    const ints = rng.chance(0.5) ? ['i1', 'i2'] : ['i1']
    const texts = rng.chance(0.5) ? ['t1', 't2'] : ['t1']
    tables.push({ name, pk, ints, texts })
    const columns = [
      'id int NOT NULL',
      ...(pk.length === 2 ? ['part int NOT NULL'] : []),
      ...ints.map((c) => `${c} int`),
      ...texts.map((c) => `${c} text`),
      'flag bool',
      'n int',
      `PRIMARY KEY (${pk.join(', ')})`,
    ]
    statements.push(`CREATE TABLE ${name} (${columns.join(', ')})`)
  }
  return { tables, sql: statements.join(';\n') }
}

function intValue(rng: Rng): string {
  return rng.chance(0.1) ? 'NULL' : String(rng.int(0, INTS - 1))
}

function textValue(rng: Rng): string {
  return rng.chance(0.1) ? 'NULL' : `'${rng.pick(TEXTS)}'`
}

function flagValue(rng: Rng): string {
  return rng.pick(['true', 'false', 'NULL', 'true', 'false'])
}

function rowValues(rng: Rng, table: TableSpec, id: number): string {
  return [
    String(id),
    ...(table.pk.length === 2 ? [String(rng.int(0, 1))] : []),
    ...table.ints.map(() => intValue(rng)),
    ...table.texts.map(() => textValue(rng)),
    flagValue(rng),
    rng.chance(0.1) ? 'NULL' : String(rng.int(0, 9)),
  ].join(', ')
}

/** `rows` rows per table, ids 1..rows. */
export function seedRowsSql(rng: Rng, schema: SubquerySchema, rows: number): string {
  return schema.tables.map((t) => `INSERT INTO ${t.name} VALUES ${Array.from({ length: rows }, (_, i) => `(${rowValues(rng, t, i + 1)})`).join(', ')} ON CONFLICT DO NOTHING`).join(';\n')
}

/** A shape to request: its table, clause, params and query options. */
export interface SubqueryShapeSpec {
  readonly table: TableSpec
  readonly where: string
  /** `$1`… in order. */
  readonly params: readonly string[]
  /** Selected columns; undefined for all. */
  readonly columns: readonly string[] | undefined
  readonly replica: 'default' | 'full'
}

export function describeShape(spec: SubqueryShapeSpec): string {
  const params = spec.params.length === 0 ? '' : ` params ${JSON.stringify(spec.params)}`
  const columns = spec.columns === undefined ? '' : ` columns ${spec.columns.join(',')}`
  return `${spec.table.name} WHERE ${spec.where}${params}${columns} replica=${spec.replica}`
}

class ClauseBuilder {
  readonly params: string[] = []
  constructor(
    private readonly rng: Rng,
    private readonly schema: SubquerySchema,
  ) {}

  param(value: string): string {
    this.params.push(value)
    return `$${this.params.length}`
  }

  /** A random AND/OR/NOT tree over `table`'s rows with `atoms` atoms or fewer. */
  tree(table: TableSpec, atoms: number, nested: boolean): string {
    const rng = this.rng
    if (atoms <= 1 || rng.chance(0.35)) {
      const atom = rng.chance(0.7) ? this.sublink(table, nested) : this.predicate(table)
      return rng.chance(0.12) ? `NOT (${atom})` : atom
    }
    const left = rng.int(1, atoms - 1)
    const joined = `${this.tree(table, left, nested)} ${rng.chance(0.5) ? 'AND' : 'OR'} ${this.tree(table, atoms - left, nested)}`
    return rng.chance(0.15) ? `NOT (${joined})` : `(${joined})`
  }

  predicate(table: TableSpec): string {
    const rng = this.rng
    return rng.pick([
      () => 'flag',
      () => 'NOT flag',
      () => `n > ${this.param(String(rng.int(0, 8)))}`,
      () => `n <= ${rng.int(1, 7)}`,
      () => `${rng.pick(table.texts)} = ${rng.chance(0.5) ? `'${rng.pick(TEXTS)}'` : this.param(rng.pick(TEXTS))}`,
      () => `${rng.pick([...table.ints, ...table.texts])} IS NULL`,
      () => `n % 2 = ${rng.int(0, 1)}`,
    ])()
  }

  sublink(table: TableSpec, nested: boolean): string {
    const rng = this.rng
    const inner = rng.pick(this.schema.tables)
    const pairs = (kind: 'ints' | 'texts'): [string, string] => [rng.pick(table[kind]), rng.pick(inner[kind])]
    const row = rng.chance(0.2)
    const chosen: [string, string][] = row ? [pairs('ints'), pairs('texts')] : [pairs(rng.chance(0.5) ? 'ints' : 'texts')]
    if (row && rng.chance(0.5)) chosen.reverse()
    const left = chosen.length === 1 ? chosen[0]![0] : `(${chosen.map(([l]) => l).join(', ')})`
    const select = chosen.map(([, r]) => r).join(', ')
    const conditions: string[] = []
    if (rng.chance(0.75)) conditions.push(this.predicate(inner))
    if (rng.chance(0.2)) conditions.push(this.predicate(inner))
    if (nested && rng.chance(0.15)) conditions.push(this.sublink(inner, false))
    const where = conditions.length === 0 ? '' : ` WHERE ${conditions.join(rng.chance(0.7) ? ' AND ' : ' OR ')}`
    return `${left} ${rng.chance(0.25) ? 'NOT IN' : 'IN'} (SELECT ${select} FROM ${inner.name}${where})`
  }
}

/** A random subquery shape on a random table (the outer table may also be an inner one). */
export function randomSubqueryShape(rng: Rng, schema: SubquerySchema, options: { nested?: boolean } = {}): SubqueryShapeSpec {
  const table = rng.pick(schema.tables)
  const builder = new ClauseBuilder(rng, schema)
  let where = builder.tree(table, rng.int(1, 4), options.nested ?? true)
  // At least one subquery: a clause of row predicates only is a plain shape.
  if (!where.includes('(SELECT')) where = `${builder.sublink(table, options.nested ?? true)} ${rng.chance(0.5) ? 'AND' : 'OR'} ${where}`
  const all = [...table.pk, ...table.ints, ...table.texts, 'flag', 'n']
  const columns = rng.chance(0.3) ? all.filter((c) => table.pk.includes(c) || rng.chance(0.5)) : undefined
  return { table, where, params: builder.params, columns, replica: rng.chance(0.3) ? 'full' : 'default' }
}

/** One statement of the workload. `nextId` hands out ids never used. */
export function randomStatement(rng: Rng, schema: SubquerySchema, nextId: () => number, maxId: number): string {
  const table = rng.pick(schema.tables)
  const id = rng.int(1, maxId)
  const where = rng.chance(0.75) ? `id = ${id}` : `id % ${rng.int(4, 9)} = ${rng.int(0, 3)}`
  const joinColumn = (): string => {
    const column = rng.pick([...table.ints, ...table.texts])
    return `${column} = ${column.startsWith('i') ? intValue(rng) : textValue(rng)}`
  }
  return rng.pick([
    () => `INSERT INTO ${table.name} VALUES (${rowValues(rng, table, nextId())})`,
    () => `INSERT INTO ${table.name} VALUES (${rowValues(rng, table, id)}) ON CONFLICT DO NOTHING`,
    () => `UPDATE ${table.name} SET ${joinColumn()} WHERE ${where}`,
    () => `UPDATE ${table.name} SET ${joinColumn()} WHERE ${where}`,
    () => {
      const [a, b] = rng.some([...table.ints, ...table.texts], 2, 2) as [string, string]
      const value = (column: string): string => (column.startsWith('i') ? intValue(rng) : textValue(rng))
      return `UPDATE ${table.name} SET ${a} = ${value(a)}, ${b} = ${value(b)} WHERE ${where}`
    },
    () => `UPDATE ${table.name} SET flag = ${flagValue(rng)}, n = ${rng.int(0, 9)} WHERE ${where}`,
    () => `UPDATE ${table.name} SET flag = NOT flag WHERE ${where}`,
    () => `DELETE FROM ${table.name} WHERE ${rng.chance(0.85) ? `id = ${id}` : where}`,
    // A key change: the row leaves under its old key and comes back under the new one.
    () => `UPDATE ${table.name} SET id = ${nextId()} WHERE id = ${id}`,
    () => (table.pk.length === 2 ? `UPDATE ${table.name} SET part = 1 - part WHERE id = ${id}` : `UPDATE ${table.name} SET n = NULL WHERE id = ${id}`),
  ])()
}

/** One to four statements as one transaction (its statements joined, ready for a simple query). */
export function randomTransaction(rng: Rng, schema: SubquerySchema, nextId: () => number, maxId: number): string {
  const statements = Array.from({ length: rng.int(1, 4) }, () => randomStatement(rng, schema, nextId, maxId))
  return `BEGIN; ${statements.join('; ')}; COMMIT`
}

// ---- a client following one shape -------------------------------------------------

type Row = Record<string, string | null>

/** Runs SQL with parameters (a pool's or a client's query). */
export type Query = (text: string, values?: readonly unknown[]) => Promise<{ rows: Record<string, unknown>[] }>

export interface FollowerStats {
  requests: number
  refetches: number
  moveIns: number
  moveOuts: number
  moveInRows: number
  changes: number
}

/**
 * One shape followed over HTTP from `-1` to up-to-date, as a client does:
 * messages applied to a tag tracker, a 409 answered by dropping everything
 * and starting again at `-1`. `port` may change between calls (a restarted
 * server).
 */
export class SubqueryFollower {
  readonly tracker = new TagTracker()
  handle = ''
  offset = '-1'
  readonly stats: FollowerStats = { requests: 0, refetches: 0, moveIns: 0, moveOuts: 0, moveInRows: 0, changes: 0 }
  /** Updates of rows the client does not hold, deletes of rows it does not hold: the server thinks the client has rows it has not. */
  orphans = 0
  /** The last messages, for a failure's report. */
  readonly recent: string[] = []

  constructor(readonly spec: SubqueryShapeSpec) {}

  private query(): Record<string, string> {
    const q: Record<string, string> = { table: this.spec.table.name, where: this.spec.where, offset: this.offset }
    this.spec.params.forEach((value, i) => (q[`params[${i + 1}]`] = value))
    if (this.spec.columns !== undefined) q['columns'] = this.spec.columns.join(',')
    if (this.spec.replica === 'full') q['replica'] = 'full'
    if (this.handle !== '') q['handle'] = this.handle
    return q
  }

  /** Requests until up-to-date. A 409 is followed to the new shape. Throws on anything but 200 and 409. */
  async sync(port: number, maxRequests = 200): Promise<void> {
    for (let i = 0; i < maxRequests; i++) {
      const res = await call(port, shapeUrl(this.query()))
      this.stats.requests++
      if (res.status === 409) {
        this.refetch(res)
        continue
      }
      if (res.status !== 200) throw new Error(`${describeShape(this.spec)}: status ${res.status}: ${res.text}`)
      this.handle = res.header('electric-handle')!
      this.offset = res.header('electric-offset')!
      this.apply(messages(res) as WireMessage[])
      if (res.header('electric-up-to-date') !== undefined) return
    }
    throw new Error(`${describeShape(this.spec)}: not up-to-date after ${maxRequests} requests`)
  }

  /** What a client does on 409: forget the shape, its rows and its tags, and start again. */
  refetch(res?: Res): void {
    this.stats.refetches++
    this.note(`409 ${res?.text ?? '(restart)'}`)
    this.tracker.apply([{ headers: { control: 'must-refetch' } }])
    this.handle = ''
    this.offset = '-1'
  }

  private apply(got: readonly WireMessage[]): void {
    for (const m of got) {
      this.note(JSON.stringify(m))
      const h = m.headers
      if (h['event'] === 'move-in') this.stats.moveIns++
      else if (h['event'] === 'move-out') this.stats.moveOuts++
      else if (m.key !== undefined) {
        if (h['is_move_in'] === true) this.stats.moveInRows++
        else this.stats.changes++
        if ((h['operation'] === 'update' || h['operation'] === 'delete') && !this.tracker.rows.has(m.key)) this.orphans++
      }
      this.tracker.apply([m])
    }
  }

  private note(line: string): void {
    this.recent.push(line.length > 400 ? `${line.slice(0, 400)}…` : line)
    if (this.recent.length > 60) this.recent.splice(0, this.recent.length - 60)
  }

  /** Postgres's rows for the clause, keyed and printed as the wire prints them. */
  async expected(query: Query): Promise<Map<string, Row>> {
    const { table } = this.spec
    const { rows } = await query(`SELECT ${this.spec.columns?.join(', ') ?? '*'} FROM ${table.name} WHERE ${this.spec.where}`, this.spec.params)
    const out = new Map<string, Row>()
    for (const raw of rows) {
      const row = printed(raw)
      // The key needs the primary key, which `columns` always keeps.
      out.set(buildRowKey({ schema: 'public', name: table.name }, row, table.pk), row)
    }
    return out
  }

  /** The client's rows. */
  actual(): Map<string, Row> {
    return new Map([...this.tracker.values()].map(([k, v]) => [k, v as Row]))
  }

  /** Undefined when the client holds exactly Postgres's rows, else what differs (and the last messages). */
  async difference(query: Query): Promise<string | undefined> {
    const expected = await this.expected(query)
    const actual = this.actual()
    const problems: string[] = []
    for (const [key, row] of expected) {
      const got = actual.get(key)
      if (got === undefined) problems.push(`missing ${key} ${JSON.stringify(row)}`)
      else if (JSON.stringify(sortKeys(got)) !== JSON.stringify(sortKeys(row))) problems.push(`differs ${key}: client ${JSON.stringify(sortKeys(got))} vs pg ${JSON.stringify(sortKeys(row))}`)
    }
    for (const [key, row] of actual) if (!expected.has(key)) problems.push(`extra ${key} ${JSON.stringify(row)}`)
    if (this.tracker.duplicateInserts > 0) problems.push(`${this.tracker.duplicateInserts} inserts of rows the client held`)
    if (this.orphans > 0) problems.push(`${this.orphans} updates or deletes of rows the client did not hold`)
    if (problems.length === 0) return undefined
    return `${describeShape(this.spec)} (handle ${this.handle}): ${problems.slice(0, 10).join('; ')}\nlast messages:\n  ${this.recent.join('\n  ')}`
  }
}

function printed(raw: Record<string, unknown>): Row {
  // Postgres's text of each value, as the wire carries it (only int, text and bool columns here).
  return Object.fromEntries(Object.entries(raw).map(([k, v]) => [k, v === null ? null : typeof v === 'boolean' ? (v ? 't' : 'f') : String(v)]))
}

function sortKeys(row: Row): Row {
  return Object.fromEntries(Object.entries(row).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
}
