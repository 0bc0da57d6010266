import { readdirSync } from 'node:fs'
import { basename } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { type FsPort, nodeFs } from '@sluice/storage'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { beforeAll, describe, expect, it } from 'vitest'
import { ShapeError } from '../../src/shapes/shape-error.js'
import type { ShapeInvalidated } from '../../src/shapes/shape-manager.js'
import { RestoredClause, WhereClauseError } from '../../src/where/index.js'
import { caughtUp, compareShape, shapeParams, sorted, usePipelines } from './harness.js'
import { type LogLine, readLog } from './log-replay.js'

const cluster = usePostgres()
const dirs = useTempDir('pipeline')
const { start, stop } = usePipelines(cluster, dirs)

beforeAll(async () => {
  await cluster.query(`
    CREATE TABLE items (id int8 PRIMARY KEY, owner text, status text NOT NULL DEFAULT 'open', n int4, body text, flag bool);
    CREATE TABLE pairs (b text, a int4, v text, PRIMARY KEY (b, a));
    CREATE TABLE loose (x int4, y text);
    CREATE TABLE other (id int4 PRIMARY KEY, v text);
    INSERT INTO items SELECT i, (ARRAY['ann','bob','cid'])[1 + i % 3], 'open', i, 'body ' || i, i % 2 = 0 FROM generate_series(1, 90) i;
    INSERT INTO pairs SELECT 'k' || (i % 4), i, 'v' || i FROM generate_series(1, 20) i;
    INSERT INTO loose SELECT i % 5, 'y' || (i % 3) FROM generate_series(1, 30) i;
    INSERT INTO other SELECT i, 'o' || i FROM generate_series(1, 10) i;
  `)
})

/** Every transaction in a shape log ends with exactly one `last: true`, offsets strictly increase, no change twice. */
function checkLogStructure(lines: readonly LogLine[]): void {
  let snapshotEnded = false
  const seen = new Set<string>()
  let previous: [bigint, number] | undefined
  let open: bigint | undefined
  for (const { message } of lines) {
    const h = message.headers
    if (h['control'] === 'snapshot-end') {
      snapshotEnded = true
      continue
    }
    if (h['lsn'] === undefined) {
      expect(snapshotEnded).toBe(false)
      expect(h['operation']).toBe('insert')
      continue
    }
    const lsn = BigInt(h['lsn'] as string)
    const op = h['op_position'] as number
    const id = `${lsn}_${op}_${String(h['key_change_to'] ?? '')}`
    expect(seen.has(id), `duplicate change ${id}`).toBe(false)
    seen.add(id)
    if (previous !== undefined) expect(lsn > previous[0] || (lsn === previous[0] && op >= previous[1])).toBe(true)
    if (open !== undefined && lsn !== open) throw new Error(`transaction ${open} has no last:true line`)
    open = h['last'] === true ? undefined : lsn
    expect(Array.isArray(h['txids'])).toBe(true)
    previous = [lsn, op]
  }
  expect(snapshotEnded).toBe(true)
  expect(open).toBeUndefined()
}

describe('the sync pipeline on real Postgres', () => {
  it('snapshots shapes, then keeps them equal to Postgres through inserts, updates across boundaries, key changes and deletes', async () => {
    const { pipeline } = await start()
    const specs = [
      { where: undefined },
      { where: "owner = 'ann'" },
      { where: "owner IN ('ann', 'bob')" },
      { where: 'n > $1 AND status = $2', params: ['40', 'open'] },
      { where: "owner = 'bob' OR n < 10" },
      { where: undefined, columns: ['id', 'owner'] },
      { where: "owner = 'cid'", replica: 'full' as const },
    ]
    const handles: string[] = []
    for (const spec of specs) {
      const resolved = await pipeline.shapes.resolve(
        shapeParams('public', 'items', {
          ...(spec.where === undefined ? {} : { where: spec.where }),
          ...(spec.params === undefined ? {} : { params: spec.params }),
          ...(spec.columns === undefined ? {} : { columns: spec.columns }),
          ...(spec.replica === undefined ? {} : { replica: spec.replica }),
        }),
      )
      expect(resolved.created).toBe(true)
      handles.push(resolved.handle)
    }
    // The same definition spelled differently is the same shape.
    const again = await pipeline.shapes.resolve(shapeParams('public', 'items', { where: "OWNER   =  'ann'" }))
    expect(again).toMatchObject({ handle: handles[1], created: false })
    await Promise.all(handles.map((h) => pipeline.shapes.ready(h)))

    await cluster.query(`
      UPDATE items SET owner = 'bob' WHERE id BETWEEN 1 AND 6;              -- moves rows between shapes
      UPDATE items SET n = n + 100 WHERE id % 7 = 0;                       -- in and out of n > 40
      UPDATE items SET id = id + 1000 WHERE id IN (10, 11, 12);            -- key changes
      DELETE FROM items WHERE id IN (20, 21, 22);
      INSERT INTO items VALUES (500, 'ann', 'open', 3, 'new', true), (501, NULL, 'closed', NULL, NULL, NULL);
      UPDATE items SET status = 'closed' WHERE owner = 'cid' AND id < 40;
    `)
    await cluster.query(`BEGIN; UPDATE items SET owner = 'cid' WHERE id = 500; UPDATE items SET owner = 'ann' WHERE id = 500; UPDATE items SET id = 600 WHERE id = 500; COMMIT`)
    await caughtUp(pipeline, cluster)

    for (const [i, spec] of specs.entries()) {
      const { actual, expected, lines } = await compareShape(pipeline, cluster, handles[i]!, {
        ...(spec.where === undefined ? {} : { where: spec.where }),
        ...(spec.params === undefined ? {} : { params: spec.params }),
        ...(spec.columns === undefined ? {} : { columns: spec.columns }),
        bools: ['flag'],
      })
      expect(sorted(actual), `shape ${spec.where ?? '(all)'}`).toEqual(sorted(expected))
      checkLogStructure(lines)
    }
    // replica=full updates carry old values of the changed columns.
    const full = await compareShape(pipeline, cluster, handles[6]!, { where: "owner = 'cid'" })
    const updates = full.lines.filter((l) => l.message.headers['operation'] === 'update')
    expect(updates.length).toBeGreaterThan(0)
    for (const u of updates) {
      const old = u.message.old_value ?? {}
      expect(Object.keys(old).length).toBeGreaterThan(0)
      for (const [column, value] of Object.entries(old)) expect(u.message.value?.[column]).not.toBe(value)
    }
  })

  it('gives composite and missing primary keys the protocol key format', async () => {
    const { pipeline } = await start()
    const pairs = await pipeline.shapes.resolve(shapeParams('public', 'pairs', { where: "b = 'k1'" }))
    const loose = await pipeline.shapes.resolve(shapeParams('public', 'loose', { where: 'x = 2' }))
    await pipeline.shapes.ready(pairs.handle)
    await pipeline.shapes.ready(loose.handle)
    await cluster.query(`
      INSERT INTO pairs VALUES ('k1', 100, 'new/slash'), ('k2', 101, 'x');
      UPDATE pairs SET b = 'k1' WHERE a = 2;
      UPDATE pairs SET a = a + 1000 WHERE b = 'k1' AND a = 5;
      DELETE FROM pairs WHERE a = 9;
      INSERT INTO loose VALUES (2, 'dup'), (2, 'dup'), (2, NULL);
      DELETE FROM loose WHERE x = 2 AND y = 'y0';
    `)
    await caughtUp(pipeline, cluster)
    const p = await compareShape(pipeline, cluster, pairs.handle, { where: "b = 'k1'" })
    expect(sorted(p.actual)).toEqual(sorted(p.expected))
    expect([...p.actual.keys()]).toContain('"public"."pairs"/"k1"/"100"')
    const l = await compareShape(pipeline, cluster, loose.handle, { where: 'x = 2', strict: false })
    // Without a key, identical rows share one key: the shape holds one of them, as Electric's does.
    expect(sorted(l.actual)).toEqual(sorted(l.expected))
    expect([...l.actual.keys()]).toContain('"public"."loose"/"2"/_')
  })

  it('invalidates exactly the shapes of a truncated table', async () => {
    const { pipeline } = await start()
    const events: ShapeInvalidated[] = []
    pipeline.shapes.on('invalidated', (e) => events.push(e))
    const a = await pipeline.shapes.resolve(shapeParams('public', 'other'))
    const b = await pipeline.shapes.resolve(shapeParams('public', 'other', { where: 'id < 5' }))
    const keep = await pipeline.shapes.resolve(shapeParams('public', 'pairs'))
    await Promise.all([a, b, keep].map((s) => pipeline.shapes.ready(s.handle)))
    await cluster.query(`BEGIN; INSERT INTO pairs VALUES ('t', 1, 'before'); TRUNCATE other; INSERT INTO other VALUES (1, 'after'); COMMIT`)
    await caughtUp(pipeline, cluster)
    expect(events.map((e) => e.handle).sort()).toEqual([a.handle, b.handle].sort())
    expect(events.every((e) => e.reason.kind === 'truncate')).toBe(true)
    expect(pipeline.shapes.status(a.handle)).toBe('expired')
    expect(pipeline.store.get(a.handle)).toBeUndefined()
    const kept = await compareShape(pipeline, cluster, keep.handle)
    expect(sorted(kept.actual)).toEqual(sorted(kept.expected))
    // A new request for the same definition gets a new handle and the table as it is now.
    const renewed = await pipeline.shapes.resolve(shapeParams('public', 'other'))
    expect(renewed.handle).not.toBe(a.handle)
    await pipeline.shapes.ready(renewed.handle)
    const now = await compareShape(pipeline, cluster, renewed.handle)
    expect(sorted(now.actual)).toEqual(sorted(now.expected))
    await cluster.query(`INSERT INTO other SELECT i, 'o' || i FROM generate_series(2, 10) i`)
  })

  it('invalidates shapes when their table changes shape or is dropped and created again', async () => {
    await cluster.query(`CREATE TABLE ddl_t (id int4 PRIMARY KEY, v text); INSERT INTO ddl_t VALUES (1, 'a');
                         CREATE TABLE ddl_r (id int4 PRIMARY KEY, v text); INSERT INTO ddl_r VALUES (1, 'a')`)
    const { pipeline } = await start()
    const events: ShapeInvalidated[] = []
    pipeline.shapes.on('invalidated', (e) => events.push(e))
    const t = await pipeline.shapes.resolve(shapeParams('public', 'ddl_t'))
    const r = await pipeline.shapes.resolve(shapeParams('public', 'ddl_r'))
    const keep = await pipeline.shapes.resolve(shapeParams('public', 'other'))
    await Promise.all([t, r, keep].map((s) => pipeline.shapes.ready(s.handle)))
    await cluster.query(`ALTER TABLE ddl_t ADD COLUMN extra int4; INSERT INTO ddl_t VALUES (2, 'b', 7)`)
    await caughtUp(pipeline, cluster)
    expect(events.map((e) => [e.handle, e.reason.kind])).toEqual([[t.handle, 'schema_change']])
    // Dropped and recreated: noticed on the next request for it (or its next change).
    await cluster.query(`DROP TABLE ddl_r; CREATE TABLE ddl_r (id int4 PRIMARY KEY, v text); INSERT INTO ddl_r VALUES (5, 'new')`)
    const again = await pipeline.shapes.resolve(shapeParams('public', 'ddl_r'))
    expect(again.handle).not.toBe(r.handle)
    expect(events.map((e) => e.handle)).toContain(r.handle)
    await pipeline.shapes.ready(again.handle)
    await caughtUp(pipeline, cluster)
    const fresh = await compareShape(pipeline, cluster, again.handle)
    expect(sorted(fresh.actual)).toEqual(sorted(fresh.expected))
    expect(pipeline.shapes.status(keep.handle)).toBe('active')
  })

  it('restores shapes after a restart and continues their logs without loss or duplicates', async () => {
    const { pipeline, dir } = await start()
    const s1 = await pipeline.shapes.resolve(shapeParams('public', 'items', { where: "owner = 'ann'" }))
    const s2 = await pipeline.shapes.resolve(shapeParams('public', 'pairs'))
    await Promise.all([s1, s2].map((s) => pipeline.shapes.ready(s.handle)))
    await cluster.query(`UPDATE items SET n = n + 1 WHERE owner = 'ann'`)
    await caughtUp(pipeline, cluster)
    await stop(pipeline)
    // Changes while Sluice is down arrive from the slot on restart.
    await cluster.query(`UPDATE items SET owner = 'ann' WHERE id IN (31, 32); INSERT INTO pairs VALUES ('down', 1, 'x')`)
    const { pipeline: second } = await start({}, dir)
    expect(second.shapes.status(s1.handle)).toBe('active')
    const same = await second.shapes.resolve(shapeParams('public', 'items', { where: "owner = 'ann'" }))
    expect(same).toMatchObject({ handle: s1.handle, created: false })
    await cluster.query(`DELETE FROM items WHERE id = 31`)
    await caughtUp(second, cluster)
    for (const [h, where] of [[s1.handle, "owner = 'ann'"], [s2.handle, undefined]] as const) {
      const c = await compareShape(second, cluster, h, where === undefined ? {} : { where })
      expect(sorted(c.actual)).toEqual(sorted(c.expected))
      checkLogStructure(c.lines)
    }
  })

  it('restores one-conjunct shapes from their recorded routes without compiling their clauses, and routes their changes as before', async () => {
    await cluster.query(`
      CREATE TABLE routed (id int8 PRIMARY KEY, owner text, flag bool, n int4);
      INSERT INTO routed SELECT i, (ARRAY['ann','bob','cid'])[1 + i % 3], i % 2 = 0, i FROM generate_series(1, 40) i;
    `)
    const specs: ReadonlyArray<{ where: string; params?: readonly string[] }> = [
      { where: 'id = 3' },
      { where: 'id = 4' },
      { where: 'id IN (5, 6, 7)' },
      { where: 'id = $1', params: ['8'] },
      { where: "owner = 'bob'" },
      { where: "owner = 'cid'" },
      { where: 'flag' },
      { where: 'NOT flag' },
      { where: "n > 30 AND owner = 'ann'" },
    ]
    const { pipeline, dir } = await start()
    const handles: string[] = []
    for (const spec of specs) {
      const resolved = await pipeline.shapes.resolve(shapeParams('public', 'routed', spec))
      await pipeline.shapes.ready(resolved.handle)
      handles.push(resolved.handle)
    }
    // The watermark past every snapshot: no shape needs a stitching target (which decodes its meta) on restart.
    await caughtUp(pipeline, cluster)
    await stop(pipeline)
    await cluster.query(`UPDATE routed SET owner = 'bob' WHERE id IN (3, 6, 9)`)

    const { pipeline: second } = await start({}, dir)
    // One meta decoded for the table's checks, one per key domain to compile its first clause (id, owner,
    // flag), and the one shape without a route; the other five metas were read from their slices alone.
    expect(second.shapes.restoreStats).toEqual({ shapes: specs.length, decodedMetas: 4 })
    const restored = handles.map((h) => second.shapes.where(h))
    // One shape per key domain (id, owner, flag) is compiled to check its route; the rest wait until something asks.
    const lazy = restored.filter((w) => w instanceof RestoredClause && !w.isCompiled)
    expect(lazy.length).toBe(5)
    expect(restored[8]).not.toBeInstanceOf(RestoredClause)

    await cluster.query(`
      UPDATE routed SET n = n + 100 WHERE id IN (3, 4, 5, 8, 12);
      UPDATE routed SET owner = 'cid', flag = NOT flag WHERE id IN (6, 10, 11);
      UPDATE routed SET id = 7000 WHERE id = 7;
      INSERT INTO routed VALUES (4000, 'bob', true, 4), (4001, 'ann', false, 99);
      DELETE FROM routed WHERE id IN (2, 8);
    `)
    await caughtUp(second, cluster)
    for (const [i, spec] of specs.entries()) {
      const c = await compareShape(second, cluster, handles[i]!, { ...spec, bools: ['flag'] })
      expect(sorted(c.actual), spec.where).toEqual(sorted(c.expected))
      checkLogStructure(c.lines)
    }
    // Routing their rows, moves in and out included, compiled none of them.
    expect(lazy.every((w) => w instanceof RestoredClause && !w.isCompiled)).toBe(true)
  })

  it('fills unchanged TOAST values from the old row', async () => {
    await cluster.query(`CREATE TABLE toasty (id int4 PRIMARY KEY, big text, n int4)`)
    const { pipeline } = await start()
    const full = await pipeline.shapes.resolve(shapeParams('public', 'toasty', { replica: 'full' }))
    const dflt = await pipeline.shapes.resolve(shapeParams('public', 'toasty', { where: 'n > 0' }))
    await pipeline.shapes.ready(full.handle)
    await pipeline.shapes.ready(dflt.handle)
    // Random text does not compress, so it is stored out of line.
    await cluster.query(`INSERT INTO toasty SELECT 1, string_agg(md5(random()::text), '') FROM generate_series(1, 4000)`)
    await cluster.query(`UPDATE toasty SET n = 1 WHERE id = 1`)
    await caughtUp(pipeline, cluster)
    for (const [h, where] of [[full.handle, undefined], [dflt.handle, 'n > 0']] as const) {
      const c = await compareShape(pipeline, cluster, h, where === undefined ? {} : { where })
      expect(sorted(c.actual)).toEqual(sorted(c.expected))
      expect(c.actual.get('"public"."toasty"/"1"')?.['big']?.length).toBe(128_000)
    }
  })

  it('creates many shapes at once under a write load, each equal to Postgres', async () => {
    await cluster.query(`CREATE TABLE busy (id int4 PRIMARY KEY, grp int4, v int4); INSERT INTO busy SELECT i, i % 25, 0 FROM generate_series(1, 500) i`)
    const { pipeline } = await start({ snapshotConnections: 3 })
    let writing = true
    const writer = (async () => {
      let i = 0
      while (writing) {
        i++
        await cluster.query(`UPDATE busy SET v = v + 1, grp = (grp + $1) % 25 WHERE id % 50 = $2`, [i % 3, i % 50])
      }
    })()
    const resolved = await Promise.all(Array.from({ length: 25 }, (_, g) => pipeline.shapes.resolve(shapeParams('public', 'busy', { where: `grp = ${g}` }))))
    await Promise.all(resolved.map((r) => pipeline.shapes.ready(r.handle)))
    writing = false
    await writer
    await caughtUp(pipeline, cluster)
    let total = 0
    for (const [g, r] of resolved.entries()) {
      const c = await compareShape(pipeline, cluster, r.handle, { where: `grp = ${g}` })
      expect(sorted(c.actual), `grp = ${g}`).toEqual(sorted(c.expected))
      checkLogStructure(c.lines)
      total += c.actual.size
    }
    expect(total).toBe(500)
  })

  it('a shape waiting for the flush that makes its log durable does not hold the snapshot connection', async () => {
    await cluster.query(`CREATE TABLE slot_a (id int4 PRIMARY KEY); CREATE TABLE slot_b (id int4 PRIMARY KEY); INSERT INTO slot_a VALUES (1); INSERT INTO slot_b VALUES (1)`)
    // The real filesystem, with every sync held back while `held` is set: no flush can complete.
    let held = false
    let resume!: () => void
    const resumed = new Promise<void>((r) => (resume = r))
    const gated = <A extends unknown[]>(sync: (...args: A) => Promise<void>) => async (...args: A): Promise<void> => {
      if (held) await resumed
      return sync(...args)
    }
    const storageFs: FsPort = { ...nodeFs, fdatasync: gated(nodeFs.fdatasync), fsync: gated(nodeFs.fsync) }
    const { pipeline, dir } = await start({ snapshotConnections: 1, storageFs })
    held = true
    try {
      const a = await pipeline.shapes.resolve(shapeParams('public', 'slot_a'))
      const aReady = pipeline.shapes.ready(a.handle)
      const b = await pipeline.shapes.resolve(shapeParams('public', 'slot_b'))
      const bReady = pipeline.shapes.ready(b.handle)
      // B's snapshot begins by making B's log in the store's tmp/ folder: with the one connection still
      // held by A until A's log is durable, it never would while syncs are held.
      const started = (handle: string): boolean => readdirSync(dir, { recursive: true, encoding: 'utf8' }).some((p) => basename(p).startsWith(`${handle}.`))
      for (let i = 0; i < 300 && !started(b.handle); i++) await new Promise((r) => setTimeout(r, 50))
      expect(started(b.handle), "B's snapshot did not start while A's log waited for a sync").toBe(true)
      held = false
      resume()
      await Promise.all([aReady, bReady])
    } finally {
      held = false
      resume()
    }
    for (const table of ['slot_a', 'slot_b']) {
      const r = await pipeline.shapes.resolve(shapeParams('public', table))
      const c = await compareShape(pipeline, cluster, r.handle, {})
      expect(sorted(c.actual)).toEqual(sorted(c.expected))
    }
  })

  it('follows a partitioned table through changes to its partitions', async () => {
    await cluster.query(`
      CREATE TABLE parted (id int4, region text, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
      CREATE TABLE parted_eu PARTITION OF parted FOR VALUES IN ('eu');
      CREATE TABLE parted_us PARTITION OF parted FOR VALUES IN ('us');
      INSERT INTO parted VALUES (1, 'eu', 'a'), (2, 'us', 'b')`)
    const { pipeline } = await start()
    const all = await pipeline.shapes.resolve(shapeParams('public', 'parted'))
    const eu = await pipeline.shapes.resolve(shapeParams('public', 'parted', { where: "region = 'eu'" }))
    await Promise.all([all, eu].map((s) => pipeline.shapes.ready(s.handle)))
    await cluster.query(`INSERT INTO parted VALUES (3, 'eu', 'c'); UPDATE parted SET region = 'eu' WHERE id = 2; UPDATE parted SET v = 'z' WHERE id = 1; DELETE FROM parted_eu WHERE id = 3`)
    await caughtUp(pipeline, cluster)
    for (const [h, where] of [[all.handle, undefined], [eu.handle, "region = 'eu'"]] as const) {
      const c = await compareShape(pipeline, cluster, h, where === undefined ? {} : { where })
      expect(sorted(c.actual), where ?? 'all').toEqual(sorted(c.expected))
      checkLogStructure(c.lines)
    }
  })

  it('takes no rows into a changes_only shape, only what changes after it', async () => {
    const { pipeline } = await start()
    const shape = await pipeline.shapes.resolve(shapeParams('public', 'other', { where: 'id > $1', params: ['5'], log: 'changes_only' }))
    await pipeline.shapes.ready(shape.handle)
    await cluster.query(`UPDATE other SET v = v || '!' WHERE id IN (2, 8)`)
    await caughtUp(pipeline, cluster)
    const lines = readLog(pipeline.shapes.log(shape.handle)!)
    expect(lines[0]!.message.headers['control']).toBe('snapshot-end')
    expect(lines.slice(1).map((l) => [l.message.headers['operation'], l.message.key])).toEqual([['update', '"public"."other"/"8"']])
  })

  it('tells Postgres of a flush only after the flush\'s listeners (the live requests it wakes) have run', async () => {
    const { pipeline } = await start()
    const shape = await pipeline.shapes.resolve(shapeParams('public', 'other', { where: 'id = $1', params: ['3'] }))
    await pipeline.shapes.ready(shape.handle)
    await caughtUp(pipeline, cluster)
    await sleep(50)
    const before = pipeline.store.durableLsn
    // Added after the pipeline's own listeners, as the live waiters are: what Postgres was told when it runs.
    const seen: Array<{ durable: bigint; confirmed: bigint }> = []
    const off = pipeline.store.onFlush((r) => seen.push({ durable: r.durableLsn, confirmed: pipeline.replication.confirmedLsn }), { advanced: false })
    try {
      await cluster.query(`UPDATE other SET v = v || '?' WHERE id = 3`)
      await caughtUp(pipeline, cluster)
    } finally {
      off()
    }
    const moved = seen.find((s) => s.durable > before)
    expect(moved).toBeDefined()
    // Not yet: the status update would have come between the fdatasync and the responses.
    expect(moved!.confirmed).toBeLessThan(moved!.durable)
    // A turn of the event loop later it is sent.
    const deadline = Date.now() + 5_000
    while (pipeline.replication.confirmedLsn < pipeline.store.durableLsn && Date.now() < deadline) await sleep(5)
    expect(pipeline.replication.confirmedLsn).toBeGreaterThanOrEqual(pipeline.store.durableLsn)
  })

  it('refuses definitions that cannot be shapes with typed errors', async () => {
    const { pipeline } = await start()
    await expect(pipeline.shapes.resolve(shapeParams('public', 'nope'))).rejects.toMatchObject({ code: 'table_not_found' })
    await expect(pipeline.shapes.resolve(shapeParams('public', 'items', { where: 'nope = 1' }))).rejects.toBeInstanceOf(WhereClauseError)
    await expect(pipeline.shapes.resolve(shapeParams('public', 'items', { where: "id = 1; DROP TABLE items" }))).rejects.toBeInstanceOf(WhereClauseError)
    await expect(pipeline.shapes.resolve(shapeParams('public', 'items', { columns: ['owner'] }))).rejects.toMatchObject({ code: 'invalid_columns' })
    await expect(pipeline.shapes.resolve(shapeParams('public', 'items', { columns: ['id', 'ghost'] }))).rejects.toBeInstanceOf(ShapeError)
    expect(pipeline.shapes.size).toBe(0)
    const { rows } = await cluster.query<{ n: string }>('SELECT count(*)::text AS n FROM items')
    expect(Number(rows[0]!.n)).toBeGreaterThan(0)
  })
})

describe('every column type end to end', () => {
  it('snapshots and replicates every common type with the text Postgres prints, keyed by any of them', async () => {
    await cluster.query(`
      CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy 😀');
      CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
      CREATE TYPE complex AS (r float8, i float8);
      CREATE TABLE "Types ""All"" Ü" (
        id int8 PRIMARY KEY, i2 int2, i4 int4, num numeric, num_typed numeric(40, 20), f4 float4, f8 float8,
        txt text, vc varchar(20), bp char(5), flag bool, u uuid, d date, t time, ttz timetz, ts timestamp,
        tstz timestamptz, iv interval, j json, jb jsonb, arr_i int4[], arr_t text[], arr_2d int4[][], m mood,
        m_arr mood[], dom posint, cx complex, by bytea, addr inet, "weird ""col"" /x" text)`)
    const row = (id: number) => `(${id}, 32767, -2147483648, 12345.678901234567890123, 3.14159265358979323846, 1.1, 'NaN',
        'héllo "wörld" \\ ✓ 🚀 / slash', 'varchar', 'ab', true, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-01-31',
        '23:59:59.999999', '12:34:56.123456+05:30', '2024-01-31 12:34:56.123456', '2024-01-31 12:34:56.654321+02',
        '1 year 2 months 3 days 04:05:06.789', '{"b": 1,   "a": [1, 2]}', '{"b": 1,   "a": [1, 2]}', '{1,2,3}',
        '{"a b","c,d","e\\"f",NULL,""}', '{{1,2},{3,4}}', 'happy 😀', '{sad,ok}', 7, '(1.5,-2)', '\\x0001fffe',
        '10.0.0.1', 'w/${id}')`
    await cluster.query(`INSERT INTO "Types ""All"" Ü" VALUES ${row(1)}, (2, ${Array(29).fill('NULL').join(', ')})`)
    const { pipeline } = await start()
    const table = 'Types "All" Ü'
    const all = await pipeline.shapes.resolve(shapeParams('public', table, { replica: 'full' }))
    const byType = [
      ['tstz = $1', ['2024-01-31 10:34:56.654321+00']],
      ["m = 'happy 😀' AND flag", []],
      ['3 = ANY(arr_i) AND num > 12345.6789', []],
      ['u = $1', ['A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11']],
      ['"weird ""col"" /x" LIKE $1', ['w/%']],
    ] as const
    const shapes = [all]
    for (const [where, params] of byType) {
      shapes.push(await pipeline.shapes.resolve(shapeParams('public', table, { where, params: [...params] })))
    }
    await Promise.all(shapes.map((s) => pipeline.shapes.ready(s.handle)))
    await cluster.query(`INSERT INTO "Types ""All"" Ü" VALUES ${row(3)}`)
    await cluster.query(`UPDATE "Types ""All"" Ü" SET txt = 'changed', f8 = '-Infinity', bp = 'x' WHERE id = 1`)
    await cluster.query(`UPDATE "Types ""All"" Ü" SET m = 'ok' WHERE id = 3`)
    await caughtUp(pipeline, cluster)
    for (const [i, s] of shapes.entries()) {
      const options = i === 0 ? {} : { where: byType[i - 1]![0], params: [...byType[i - 1]![1]] }
      const c = await compareShape(pipeline, cluster, s.handle, options)
      expect(sorted(c.actual), options.where ?? 'all').toEqual(sorted(c.expected))
      checkLogStructure(c.lines)
    }
    const c = await compareShape(pipeline, cluster, all.handle)
    expect(c.actual.get(`"public"."Types "All" Ü"/"1"`)?.['bp']).toBe('x    ')
    expect(c.actual.get(`"public"."Types "All" Ü"/"3"`)?.['flag']).toBe('t')
  })
})
