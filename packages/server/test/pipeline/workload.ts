/**
 * A random concurrent write workload and a random shape generator, shared by
 * the consistency oracle (oracle.pg.test.ts) and the crash test (crash.pg.test.ts).
 *
 * Tables (created by `SCHEMA_SQL`, seeded by `seedSql`):
 *   o_items  int8 key; int4, text, numeric, bool, timestamptz, jsonb, text[] and a text body
 *   o_pairs  composite key (text, int4), values with '/' and quotes in the key
 *   o_tally  a few hot rows that many transactions update
 *
 * Writers are separate connections running random transactions: inserts,
 * updates that move rows across shape boundaries, key changes, deletes,
 * multi-statement transactions, rolled-back transactions, rolled-back
 * savepoints, insert-then-delete in one transaction, and occasional large
 * transactions (hundreds of rows, well past a 64 kB logical_decoding_work_mem,
 * so Postgres streams them; medium ones pass a small maxTransactionBytes, so
 * the assembler spills them). Everything is driven by a seeded PRNG; with
 * concurrent writers the interleaving is Postgres's, so a seed reproduces the
 * mix of transactions and shapes, not the exact schedule.
 */
import { SeededRandom as Rng } from '@sluice/test-utils'
import pg from 'pg'

// ---- PRNG -------------------------------------------------------------------

/** The workloads' one seeded generator, with its helpers (int, chance, pick, some, fork). */
export { Rng }

export function seedFromEnv(name: string): number {
  const text = process.env[name]
  if (text !== undefined && text !== '') return Number(text) >>> 0
  return Math.floor(Math.random() * 2 ** 31)
}

// ---- schema and values ------------------------------------------------------

export const TABLES = ['o_items', 'o_pairs', 'o_tally'] as const
export type TableName = (typeof TABLES)[number]

export const BOOL_COLUMNS = ['flag']

export const SCHEMA_SQL = `
  CREATE TABLE o_items (
    id int8 PRIMARY KEY, grp int4 NOT NULL, owner text, score numeric, flag bool,
    ts timestamptz, doc jsonb, tags text[], note text
  );
  CREATE TABLE o_pairs (
    region text, n int4, v int8, label text, tags text[], flag bool, score numeric,
    PRIMARY KEY (region, n)
  );
  CREATE TABLE o_tally (id int4 PRIMARY KEY, k int4 NOT NULL, hits int8 NOT NULL DEFAULT 0, label text);
`

const OWNERS = ['ann', 'bob', 'cid', 'dan', 'eve', "o'neil", 'a/b']
const TAGS = ['a', 'b', 'c', 'd', 'e', 'x y']
const REGIONS = ['eu', 'us', 'ap/south', 'sa', "o'x", 'us//2']
const LABELS = ['red', 'green', 'blue', 't1', 't10', 't2']
export const GROUPS = 12

export const lit = (s: string): string => `'${s.replaceAll("'", "''")}'`

function arrayLiteral(items: readonly string[]): string {
  return `{${items.map((t) => (/^[a-z0-9]+$/.test(t) ? t : `"${t.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`)).join(',')}}`
}

class Values {
  constructor(private readonly rng: Rng) {}
  grp(): number {
    return this.rng.int(0, GROUPS - 1)
  }
  owner(): string {
    return this.rng.chance(0.12) ? 'NULL' : lit(this.rng.pick(OWNERS))
  }
  score(): string {
    if (this.rng.chance(0.08)) return 'NULL'
    const cents = this.rng.int(-500, 3000)
    const text = (cents / 100).toFixed(this.rng.pick([0, 1, 2, 3]))
    return `${text}::numeric`
  }
  flag(): string {
    return this.rng.pick(['true', 'false', 'false', 'true', 'NULL'])
  }
  ts(): string {
    if (this.rng.chance(0.08)) return 'NULL'
    const day = this.rng.int(1, 9)
    const h = this.rng.int(0, 23)
    const us = this.rng.chance(0.3) ? `.${String(this.rng.int(0, 999999)).padStart(6, '0')}` : ''
    return lit(`2024-01-0${day} ${String(h).padStart(2, '0')}:${String(this.rng.int(0, 59)).padStart(2, '0')}:00${us}+00`)
  }
  doc(): string {
    if (this.rng.chance(0.08)) return 'NULL'
    const k = this.rng.int(0, 5)
    const shape = this.rng.int(0, 2)
    const json =
      shape === 0
        ? { k }
        : shape === 1
          ? { k, tag: this.rng.pick(TAGS), nested: { ok: this.rng.chance(0.5) } }
          : { k, list: this.rng.some([1, 2, 3, 4], 0, 3) }
    return `${lit(JSON.stringify(json))}::jsonb`
  }
  tags(): string {
    if (this.rng.chance(0.08)) return 'NULL'
    return `${lit(arrayLiteral(this.rng.some(TAGS, 0, 3)))}::text[]`
  }
  note(long = false): string {
    if (this.rng.chance(0.1) && !long) return 'NULL'
    const n = long ? this.rng.int(150, 400) : this.rng.int(0, 40)
    let s = ''
    while (s.length < n) s += this.rng.pick(['lorem ', 'ipsum ', 'dolor ', '"q" ', "it's ", 'x/y ', 'ünï ', '\\ '])
    return lit(s.slice(0, n))
  }
  region(): string {
    return lit(this.rng.pick(REGIONS))
  }
  label(): string {
    return this.rng.chance(0.15) ? 'NULL' : lit(this.rng.pick(LABELS))
  }
}

/** Rows to start from: `items` o_items rows, a fifth as many pairs, 40 tally rows. */
export function seedSql(rng: Rng, items: number): string {
  const v = new Values(rng)
  const rows: string[] = []
  for (let id = 1; id <= items; id++) {
    rows.push(`(${id}, ${v.grp()}, ${v.owner()}, ${v.score()}, ${v.flag()}, ${v.ts()}, ${v.doc()}, ${v.tags()}, ${v.note()})`)
  }
  const pairs: string[] = []
  const pairCount = Math.max(10, Math.floor(items / 5))
  for (let n = 1; n <= pairCount; n++) pairs.push(`(${v.region()}, ${n}, ${rng.int(0, 1000)}, ${v.label()}, ${v.tags()}, ${v.flag()}, ${v.score()})`)
  const tally: string[] = []
  for (let id = 1; id <= 40; id++) tally.push(`(${id}, ${rng.int(0, 9)}, ${rng.int(0, 5)}, ${v.label()})`)
  return [
    `INSERT INTO o_items VALUES ${rows.join(',\n')};`,
    `INSERT INTO o_pairs VALUES ${pairs.join(',\n')} ON CONFLICT DO NOTHING;`,
    `INSERT INTO o_tally VALUES ${tally.join(',\n')};`,
  ].join('\n')
}

// ---- shapes -----------------------------------------------------------------

export interface ShapeSpec {
  readonly table: TableName
  readonly where?: string
  readonly params?: readonly string[]
  readonly columns?: readonly string[]
  readonly replica?: 'default' | 'full'
}

export function describeSpec(spec: ShapeSpec): string {
  const parts = [spec.table, spec.where ?? '(all)']
  if (spec.params !== undefined && spec.params.length > 0) parts.push(`params=${JSON.stringify(spec.params)}`)
  if (spec.columns !== undefined) parts.push(`columns=${spec.columns.join(',')}`)
  if (spec.replica === 'full') parts.push('replica=full')
  return parts.join(' | ')
}

/** The options of `shapeParams` (harness.ts) for a spec. */
export function specOptions(spec: ShapeSpec) {
  return {
    ...(spec.where === undefined ? {} : { where: spec.where }),
    ...(spec.params === undefined ? {} : { params: spec.params }),
    ...(spec.columns === undefined ? {} : { columns: spec.columns }),
    ...(spec.replica === undefined ? {} : { replica: spec.replica }),
  }
}

/** The rows a spec selects, as `compareLog` (harness.ts) takes them, without the schema. */
export function specQuery(spec: ShapeSpec) {
  return {
    table: spec.table,
    ...(spec.where === undefined ? {} : { where: spec.where }),
    ...(spec.params === undefined ? {} : { params: spec.params }),
    ...(spec.columns === undefined ? {} : { columns: spec.columns }),
  }
}

type Clause = { where: string; params?: string[] }

/** Random where clauses of every indexable and evaluated kind the brief lists, with and without params. */
export function randomShape(rng: Rng): ShapeSpec {
  const table = rng.pick<TableName>(['o_items', 'o_items', 'o_items', 'o_pairs', 'o_pairs', 'o_tally'])
  const g = (): number => rng.int(0, GROUPS - 1)
  let clause: Clause | undefined
  if (table === 'o_items') {
    const makers: Array<() => Clause | undefined> = [
      () => ({ where: `grp = ${g()}` }),
      () => ({ where: 'grp = $1', params: [String(g())] }),
      () => ({ where: `grp IN (${g()}, ${g()}, ${g()})` }),
      () => {
        const a = g()
        return { where: `grp BETWEEN ${a} AND ${a + rng.int(0, 3)}` }
      },
      () => ({ where: `grp >= $1 AND grp < $2`, params: [String(rng.int(0, 5)), String(rng.int(5, 12))] }),
      () => ({ where: `owner = ${lit(rng.pick(OWNERS))} OR grp = ${g()}` }),
      () => ({ where: `owner IN (${rng.some(OWNERS, 1, 3).map(lit).join(', ')})` }),
      () => ({ where: `owner LIKE ${lit(rng.pick(['a%', '%n', '%o%', "o'%", 'a/%', '_o_']))}` }),
      () => ({ where: `owner IS NULL` }),
      () => ({ where: `owner IS NOT NULL AND flag` }),
      () => ({ where: `flag IS NULL OR NOT flag` }),
      () => ({ where: `${lit(rng.pick(TAGS))} = ANY(tags)` }),
      () => ({ where: `$1 = ANY(tags)`, params: [rng.pick(TAGS)] }),
      () => ({ where: `tags @> ${lit(arrayLiteral(rng.some(TAGS, 1, 2)))}` }),
      () => ({ where: `tags && ${lit(arrayLiteral(rng.some(TAGS, 1, 2)))}` }),
      () => ({ where: `score > ${rng.int(-5, 30)}.${rng.int(0, 9)}` }),
      () => ({ where: `score <= $1`, params: [String(rng.int(0, 20))] }),
      () => ({ where: `ts >= ${lit(`2024-01-0${rng.int(1, 9)} 00:00:00+00`)}` }),
      () => ({ where: `ts < $1`, params: [`2024-01-0${rng.int(2, 9)} 12:00:00+00`] }),
      // jsonb containment is refused by design (a 400); equality and IS NULL are supported.
      () => ({ where: `doc = ${lit(JSON.stringify({ k: rng.int(0, 5) }))} OR doc IS NULL` }),
      () => ({ where: `id % 7 = ${rng.int(0, 6)}` }),
      () => ({ where: `(grp = ${g()} OR owner = ${lit(rng.pick(OWNERS))}) AND score > 0` }),
      () => ({ where: `NOT (grp < ${rng.int(3, 9)}) AND note IS NOT NULL` }),
      () => ({ where: `grp = ${g()} AND ${lit(rng.pick(TAGS))} = ANY(tags)` }),
      () => undefined,
    ]
    clause = rng.pick(makers)()
  } else if (table === 'o_pairs') {
    const makers: Array<() => Clause | undefined> = [
      () => ({ where: `region = ${lit(rng.pick(REGIONS))}` }),
      () => ({ where: `region = $1`, params: [rng.pick(REGIONS)] }),
      () => ({ where: `region IN (${rng.some(REGIONS, 1, 3).map(lit).join(', ')})` }),
      () => ({ where: `n < ${rng.int(20, 200)}` }),
      () => ({ where: `region LIKE ${lit(rng.pick(['u%', '%/%', 'e_']))} AND n % 2 = 0` }),
      () => ({ where: `label IS NULL OR label = ${lit(rng.pick(LABELS))}` }),
      () => ({ where: `${lit(rng.pick(TAGS))} = ANY(tags)` }),
      () => ({ where: `v > $1`, params: [String(rng.int(100, 900))] }),
      () => ({ where: `flag OR score < 0` }),
      () => undefined,
    ]
    clause = rng.pick(makers)()
  } else {
    const makers: Array<() => Clause | undefined> = [
      () => ({ where: `k = ${rng.int(0, 9)}` }),
      () => ({ where: `k < $1`, params: [String(rng.int(1, 9))] }),
      () => ({ where: `label LIKE 't1%'` }),
      () => ({ where: `hits % 3 = ${rng.int(0, 2)}` }),
      () => undefined,
    ]
    clause = rng.pick(makers)()
  }
  const columnChoices: Record<TableName, Array<readonly string[] | undefined>> = {
    o_items: [undefined, undefined, undefined, ['id', 'grp', 'owner'], ['id', 'score', 'tags', 'flag'], ['doc', 'id', 'note', 'ts']],
    o_pairs: [undefined, undefined, ['n', 'region', 'v'], ['label', 'n', 'region', 'tags']],
    o_tally: [undefined, undefined, ['id', 'hits']],
  }
  const columns = rng.pick(columnChoices[table])
  return {
    table,
    ...(clause === undefined ? {} : { where: clause.where }),
    ...(clause?.params === undefined ? {} : { params: clause.params }),
    ...(columns === undefined ? {} : { columns }),
    ...(rng.chance(0.3) ? { replica: 'full' as const } : {}),
  }
}

// ---- transactions -------------------------------------------------------------

interface Stmt {
  readonly sql: string
  /** Rolled back by a later ROLLBACK TO SAVEPOINT. */
  readonly discarded?: boolean
  /** A data-changing statement (its row count counts). */
  readonly dml?: boolean
}

interface Txn {
  readonly kind: string
  readonly stmts: Stmt[]
  readonly commit: boolean
  readonly large?: boolean
}

export interface WorkloadStats {
  committed: number
  rolledBack: number
  /** Ended by a conflict (deadlock, lock timeout, key collision) and rolled back. */
  conflicts: number
  /** Rows inserted, updated or deleted by committed transactions (as Postgres counted them). */
  changes: number
  large: number
  byKind: Record<string, number>
}

/** Shared id counters, so inserts and key changes never collide on o_items. */
class Ids {
  constructor(
    private nextItem: number,
    private nextPair: number,
  ) {}
  item(): number {
    return this.nextItem++
  }
  /** The next o_items id to be handed out. */
  get itemHigh(): number {
    return this.nextItem
  }
  pair(): number {
    return this.nextPair++
  }
}

class TxnGen {
  private readonly v: Values
  constructor(
    private readonly rng: Rng,
    private readonly ids: Ids,
    private readonly maxItemId: () => number,
    private readonly allowLarge: boolean,
  ) {
    this.v = new Values(rng)
  }

  private some(k: number): string {
    const from = this.rng.int(0, this.maxItemId())
    return `id IN (SELECT id FROM o_items WHERE id >= ${from} ORDER BY id LIMIT ${k})`
  }

  /** `col = value` for one to four distinct columns (Postgres refuses two assignments to one column). */
  private itemSet(exclude: readonly string[] = []): string {
    const v = this.v
    const sets: Record<string, () => string> = {
      grp: () => (this.rng.chance(0.5) ? `grp = ${v.grp()}` : `grp = (grp + ${this.rng.int(1, 3)}) % ${GROUPS}`),
      owner: () => `owner = ${v.owner()}`,
      score: () => `score = ${v.score()}`,
      flag: () => `flag = ${v.flag()}`,
      ts: () => `ts = ${v.ts()}`,
      doc: () => `doc = ${v.doc()}`,
      tags: () => (this.rng.chance(0.7) ? `tags = ${v.tags()}` : `tags = array_append(coalesce(tags, '{}'), ${lit(this.rng.pick(TAGS))})`),
      note: () => `note = ${v.note()}`,
    }
    const columns = Object.keys(sets).filter((c) => !exclude.includes(c))
    return this.rng.some(columns, 1, 4).map((c) => sets[c]!()).join(', ')
  }

  private insertItem(): string {
    const v = this.v
    const rows = Array.from(
      { length: this.rng.int(1, 3) },
      () => `(${this.ids.item()}, ${v.grp()}, ${v.owner()}, ${v.score()}, ${v.flag()}, ${v.ts()}, ${v.doc()}, ${v.tags()}, ${v.note()})`,
    )
    return `INSERT INTO o_items VALUES ${rows.join(', ')}`
  }

  /** One random data-changing statement. */
  stmt(): string {
    const r = this.rng.next()
    const v = this.v
    if (r < 0.2) return this.insertItem()
    if (r < 0.45) return `UPDATE o_items SET ${this.itemSet()} WHERE ${this.some(this.rng.int(1, 4))}`
    if (r < 0.52) return `UPDATE o_items SET id = ${this.ids.item()}${this.rng.chance(0.5) ? `, ${this.itemSet()}` : ''} WHERE ${this.some(1)}`
    if (r < 0.62) return `DELETE FROM o_items WHERE ${this.some(this.rng.int(1, 3))}`
    if (r < 0.67) return `INSERT INTO o_pairs VALUES (${v.region()}, ${this.ids.pair()}, ${this.rng.int(0, 1000)}, ${v.label()}, ${v.tags()}, ${v.flag()}, ${v.score()})`
    if (r < 0.74) {
      const sets = this.rng.some([`v = ${this.rng.int(0, 1000)}`, `label = ${v.label()}`, `tags = ${v.tags()}`, `flag = ${v.flag()}`, `score = ${v.score()}`], 1, 3)
      return `UPDATE o_pairs SET ${sets.join(', ')} WHERE n IN (SELECT n FROM o_pairs WHERE n >= ${this.rng.int(0, 400)} ORDER BY n LIMIT ${this.rng.int(1, 3)})`
    }
    if (r < 0.78) {
      // Key change: a new region (may collide: then the transaction fails and is rolled back) or a fresh n.
      const set = this.rng.chance(0.5) ? `region = ${v.region()}` : `n = ${this.ids.pair()}`
      return `UPDATE o_pairs SET ${set} WHERE (region, n) IN (SELECT region, n FROM o_pairs WHERE n >= ${this.rng.int(0, 400)} ORDER BY n LIMIT 1)`
    }
    if (r < 0.81) return `DELETE FROM o_pairs WHERE (region, n) IN (SELECT region, n FROM o_pairs WHERE n >= ${this.rng.int(0, 400)} ORDER BY n LIMIT 1)`
    if (r < 0.95) return `UPDATE o_tally SET hits = hits + 1${this.rng.chance(0.3) ? `, k = ${this.rng.int(0, 9)}` : ''} WHERE id = ${this.rng.int(1, 40)}`
    return `UPDATE o_tally SET label = ${v.label()} WHERE id = ${this.rng.int(1, 40)}`
  }

  next(): Txn {
    const r = this.rng.next()
    const dml = (sql: string, discarded = false): Stmt => ({ sql, dml: true, discarded })
    if (this.allowLarge && r < 0.012) return this.large()
    if (this.allowLarge && r < 0.04) return this.medium()
    if (r < 0.45) return { kind: 'single', stmts: [dml(this.stmt())], commit: true }
    if (r < 0.7) {
      const stmts = Array.from({ length: this.rng.int(2, 6) }, () => dml(this.stmt()))
      return { kind: 'multi', stmts, commit: true }
    }
    if (r < 0.77) {
      const stmts = Array.from({ length: this.rng.int(1, 4) }, () => dml(this.stmt()))
      return { kind: 'rollback', stmts, commit: false }
    }
    if (r < 0.87) {
      // Savepoints: some work, a savepoint whose work is rolled back, more work; sometimes nested and released.
      const stmts: Stmt[] = [dml(this.stmt()), { sql: 'SAVEPOINT s1' }]
      for (let i = this.rng.int(1, 3); i > 0; i--) stmts.push(dml(this.stmt(), true))
      if (this.rng.chance(0.4)) stmts.push({ sql: 'SAVEPOINT s2' }, dml(this.stmt(), true), { sql: 'RELEASE SAVEPOINT s2' })
      stmts.push({ sql: 'ROLLBACK TO SAVEPOINT s1' }, dml(this.stmt()))
      if (this.rng.chance(0.4)) stmts.push({ sql: 'SAVEPOINT s3' }, dml(this.stmt()), { sql: 'RELEASE SAVEPOINT s3' })
      return { kind: 'savepoint', stmts, commit: true }
    }
    if (r < 0.93) {
      // The same row several times in one transaction: insert, update, key change, maybe delete.
      const id = this.ids.item()
      const id2 = this.ids.item()
      const v = this.v
      const stmts = [
        dml(`INSERT INTO o_items VALUES (${id}, ${v.grp()}, ${v.owner()}, ${v.score()}, ${v.flag()}, ${v.ts()}, ${v.doc()}, ${v.tags()}, ${v.note()})`),
        dml(`UPDATE o_items SET ${this.itemSet()} WHERE id = ${id}`),
        dml(`UPDATE o_items SET id = ${id2}, ${this.itemSet()} WHERE id = ${id}`),
      ]
      if (this.rng.chance(0.5)) stmts.push(dml(`DELETE FROM o_items WHERE id = ${id2}`))
      return { kind: 'same-row', stmts, commit: true }
    }
    // Hot rows: many transactions touch the same few.
    const stmts = Array.from({ length: this.rng.int(1, 3) }, () =>
      dml(`UPDATE o_tally SET hits = hits + ${this.rng.int(1, 3)}, k = ${this.rng.int(0, 9)} WHERE id = ${this.rng.int(1, 8)}`),
    )
    return { kind: 'hot', stmts, commit: true }
  }

  /** Hundreds of rows: Postgres streams it under a 64 kB logical_decoding_work_mem. */
  large(): Txn {
    const v = this.v
    const dml = (sql: string, discarded = false): Stmt => ({ sql, dml: true, discarded })
    const kind = this.rng.int(0, 3)
    const mod = this.rng.int(3, 6)
    const rem = this.rng.int(0, mod - 1)
    if (kind === 0) {
      return {
        kind: 'large-update',
        large: true,
        commit: true,
        stmts: [dml(`UPDATE o_items SET note = ${v.note(true)} || id::text, grp = (grp + 1) % ${GROUPS}, score = coalesce(score, 0) + 1 WHERE id % ${mod} = ${rem}`)],
      }
    }
    if (kind === 1) {
      const first = this.ids.item()
      const count = this.rng.int(300, 700)
      for (let i = 1; i < count; i++) this.ids.item()
      return {
        kind: 'large-insert',
        large: true,
        commit: true,
        stmts: [
          dml(
            `INSERT INTO o_items SELECT i, i % ${GROUPS}, (ARRAY['ann','bob',NULL,'o''neil'])[1 + i % 4], (i % 100)::numeric / 4, i % 3 = 0, ` +
              `'2024-01-05 00:00:00+00'::timestamptz + (i % 50) * interval '1 hour', jsonb_build_object('k', i % 6), ARRAY['a', (ARRAY['b','c','x y'])[1 + i % 3]], ` +
              `repeat('big ', 40) || i FROM generate_series(${first}, ${first + count - 1}) i`,
          ),
          // Part of it goes again in the same transaction, the rest in a later one.
          dml(`DELETE FROM o_items WHERE id BETWEEN ${first} AND ${first + count - 1} AND id % 3 = 0`),
        ],
      }
    }
    if (kind === 2) {
      // A big savepoint rolled back inside a streamed transaction (a subtransaction abort in the stream).
      return {
        kind: 'large-savepoint',
        large: true,
        commit: true,
        stmts: [
          dml(`UPDATE o_items SET owner = ${v.owner()} WHERE id % ${mod} = ${rem}`),
          { sql: 'SAVEPOINT big' },
          dml(`UPDATE o_items SET note = ${v.note(true)}, tags = '{a,b}' WHERE id % ${mod} <> ${rem}`, true),
          { sql: 'ROLLBACK TO SAVEPOINT big' },
          dml(`UPDATE o_pairs SET v = v + 1, label = ${v.label()}`),
        ],
      }
    }
    // Large and thrown away: a streamed transaction that aborts.
    return {
      kind: 'large-rollback',
      large: true,
      commit: false,
      stmts: [dml(`UPDATE o_items SET note = ${v.note(true)}, grp = 0 WHERE id % ${mod} = ${rem}`)],
    }
  }

  /** Tens of rows: under 64 kB of decoding memory but over a 16 kB maxTransactionBytes. */
  medium(): Txn {
    const v = this.v
    const k = this.rng.int(40, 90)
    return {
      kind: 'medium',
      commit: true,
      stmts: [
        { sql: `UPDATE o_items SET ${this.itemSet(['note'])}, note = ${v.note(true)} WHERE ${this.some(k)}`, dml: true },
        { sql: this.stmt(), dml: true },
      ],
    }
  }

  /** Deletes what large inserts left behind now and then, so the table does not grow without end. */
  trim(maxRows: number): Txn {
    return {
      kind: 'trim',
      commit: true,
      stmts: [{ sql: `DELETE FROM o_items WHERE id IN (SELECT id FROM o_items ORDER BY id DESC LIMIT greatest(0, (SELECT count(*) FROM o_items) - ${maxRows}))`, dml: true }],
    }
  }
}

/** SQLSTATEs of conflicts between concurrent writers: the transaction is rolled back and counted, not failed. */
const CONFLICTS = new Set(['40P01', '40001', '55P03', '23505', '57014'])

export interface WritersOptions {
  readonly connectionString: string
  readonly writers: number
  readonly rng: Rng
  /** First id for new o_items rows (above the seeded ones). */
  readonly firstItemId: number
  /** Large and medium transactions (default true). */
  readonly large?: boolean
  /** o_items is trimmed back to about this many rows now and then. */
  readonly maxItems?: number
  /** Sleep between transactions of one writer (ms, default 0). */
  readonly thinkMs?: number
}

/**
 * Writer connections running random transactions until stopped. `pause()`
 * resolves once every writer sits between transactions; `resume()` lets them go on.
 */
export class Writers {
  readonly stats: WorkloadStats = { committed: 0, rolledBack: 0, conflicts: 0, changes: 0, large: 0, byKind: {} }
  private readonly ids: Ids
  private running: Array<Promise<void>> = []
  private clients: pg.Client[] = []
  private stopping = false
  private paused = false
  private gate: Promise<void> = Promise.resolve()
  private openGate: () => void = () => {}
  private idle = new Set<number>()
  private idleWaiters: Array<() => void> = []
  private maxItemId: number
  failure: Error | undefined

  constructor(private readonly options: WritersOptions) {
    this.ids = new Ids(options.firstItemId, 100_000)
    this.maxItemId = options.firstItemId
  }

  async start(): Promise<void> {
    for (let w = 0; w < this.options.writers; w++) {
      const client = new pg.Client({ connectionString: this.options.connectionString, application_name: `oracle_writer_${w}` })
      await client.connect()
      client.on('error', () => {})
      await client.query(`SET deadlock_timeout = '50ms'; SET lock_timeout = '5s'`)
      this.clients.push(client)
    }
    this.running = this.clients.map((client, w) => this.loop(client, w, this.options.rng.fork()))
  }

  /** Every writer finishes its current transaction and waits. */
  async pause(): Promise<void> {
    if (!this.paused) {
      this.paused = true
      this.gate = new Promise((resolve) => {
        this.openGate = resolve
      })
    }
    while (this.idle.size < this.running.length && this.failure === undefined && !this.allDone) {
      await new Promise<void>((resolve) => this.idleWaiters.push(resolve))
    }
    if (this.failure !== undefined) throw this.failure
  }

  resume(): void {
    this.paused = false
    this.openGate()
  }

  async stop(): Promise<void> {
    this.stopping = true
    this.resume()
    await Promise.all(this.running)
    await Promise.all(this.clients.map((c) => c.end().catch(() => {})))
    this.clients = []
    if (this.failure !== undefined) throw this.failure
  }

  /**
   * The statements of one committing large transaction of the workload's kinds
   * (ids from the writers' own counters), for a caller that runs it itself.
   */
  largeTransaction(rng: Rng): { statements: string[]; kind: string } {
    const gen = new TxnGen(rng, this.ids, () => this.maxItemId, true)
    let txn = gen.large()
    while (!txn.commit) txn = gen.large()
    return { statements: txn.stmts.map((s) => s.sql), kind: txn.kind }
  }

  private doneCount = 0
  private get allDone(): boolean {
    return this.doneCount === this.running.length
  }

  private markIdle(w: number, idle: boolean): void {
    if (idle) this.idle.add(w)
    else this.idle.delete(w)
    const waiters = this.idleWaiters
    this.idleWaiters = []
    for (const wake of waiters) wake()
  }

  private async loop(client: pg.Client, w: number, rng: Rng): Promise<void> {
    const gen = new TxnGen(rng, this.ids, () => this.maxItemId, this.options.large ?? true)
    let n = 0
    try {
      while (!this.stopping) {
        if (this.paused) {
          this.markIdle(w, true)
          await this.gate
          this.markIdle(w, false)
          continue
        }
        n++
        const txn = this.options.maxItems !== undefined && n % 97 === 0 && w === 0 ? gen.trim(this.options.maxItems) : gen.next()
        await this.run(client, txn)
        if (this.options.thinkMs) await new Promise((r) => setTimeout(r, rng.int(0, this.options.thinkMs ?? 0)))
      }
    } catch (error) {
      this.failure ??= error instanceof Error ? error : new Error(String(error))
    } finally {
      this.doneCount++
      this.markIdle(w, true)
    }
  }

  /** Runs one transaction in one round trip. */
  private async run(client: pg.Client, txn: Txn): Promise<void> {
    const sql = ['BEGIN', ...txn.stmts.map((s) => s.sql), txn.commit ? 'COMMIT' : 'ROLLBACK'].join(';\n')
    let results: pg.QueryResult[]
    try {
      const r = (await client.query(sql)) as unknown as pg.QueryResult | pg.QueryResult[]
      results = Array.isArray(r) ? r : [r]
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {})
      const code = (error as { code?: string }).code
      if (code !== undefined && CONFLICTS.has(code)) {
        this.stats.conflicts++
        return
      }
      throw new Error(`workload statement failed (${code}): ${(error as Error).message}\n${sql}`, { cause: error })
    }
    this.stats.byKind[txn.kind] = (this.stats.byKind[txn.kind] ?? 0) + 1
    if (!txn.commit) {
      this.stats.rolledBack++
      return
    }
    this.stats.committed++
    if (txn.large) this.stats.large++
    // results[0] is BEGIN; statement i is results[i + 1].
    txn.stmts.forEach((s, i) => {
      if (s.dml && !s.discarded) this.stats.changes += results[i + 1]?.rowCount ?? 0
    })
    this.maxItemId = this.ids.itemHigh
  }
}

