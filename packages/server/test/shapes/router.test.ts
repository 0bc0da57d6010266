import { describe, expect, it } from 'vitest'
import type { Change, Relation, StreamAbort, StreamBuffer, StreamedChange, Transaction } from '../../src/replication/index.js'
import { UNCHANGED_TOAST } from '../../src/replication/index.js'
import type { AppendOptions } from '@sluice/storage'
import { ABANDONED_LSN } from '../../src/shapes/router-hooks.js'
import { type Invalidation, ShapeRouter, type ShapeTarget, type TransactionPart } from '../../src/shapes/router.js'
import type { TableInfo } from '../../src/shapes/table-catalog.js'
import { compileWhere, loadWhereParser } from '../../src/where/index.js'

await loadWhereParser()

function column(name: string, typeOid: number, typeName: string, pkIndex?: number) {
  return {
    name,
    attnum: 0,
    typeOid,
    typeMod: -1,
    typeName,
    dims: 0,
    notNull: pkIndex !== undefined,
    typeCategory: typeName === 'int4' ? 'N' : 'S',
    castToTextIsOutput: true,
    ...(pkIndex === undefined ? {} : { pkIndex }),
  }
}

const ITEMS: TableInfo = {
  oid: 1000,
  schema: 'public',
  name: 'items',
  kind: 'table',
  replicaIdentity: 'full',
  columns: [column('id', 23, 'int4', 0), column('owner', 25, 'text'), column('n', 23, 'int4')],
  primaryKey: ['id'],
}

function relationOf(info: TableInfo, id = info.oid, extra: readonly string[] = []): Relation {
  const columns = [...info.columns.map((c) => c.name), ...extra].map((name, i) => ({
    name,
    typeOid: info.columns[i]?.typeOid ?? 25,
    typeMod: -1,
    isKey: true,
    flags: 1,
  }))
  return { id, schema: info.schema, table: info.name, replicaIdentity: 'full', columns, keyColumns: columns.map((_, i) => i) }
}

const REL = relationOf(ITEMS)
const row = (id: number, owner: string | null, n: number): string[] => [String(id), owner as string, String(n)]
const insert = (id: number, owner: string | null, n: number): Change => ({ kind: 'insert', relation: REL, newTuple: row(id, owner, n) })
const update = (before: string[], after: string[]): Change => ({ kind: 'update', relation: REL, oldTuple: before, oldTupleKind: 'full', newTuple: after, unchangedToast: [] })
const del = (before: string[]): Change => ({ kind: 'delete', relation: REL, oldTuple: before, oldTupleKind: 'full' })
let nextLsn = 100n
const txn = (changes: Change[], xid = 7): Transaction => ({ xid, lsn: (nextLsn += 10n), endLsn: nextLsn + 1n, commitTime: 0n, origin: undefined, changes })

class Collector implements ShapeTarget {
  readonly parts: TransactionPart[] = []
  /** The byte arrays as handed over (views of the router's memory, for identity checks only). */
  readonly handed: Uint8Array[][] = []
  appendLines(lsn: bigint, ops: readonly number[], lines: readonly Uint8Array[], count: number, options: AppendOptions | undefined, xid: number): void {
    this.handed.push(lines.slice(0, count))
    // The arrays are only valid during the call (the router refills them and reuses the lines' memory), as for every target.
    const jsons = lines.slice(0, count).map((json) => Uint8Array.prototype.slice.call(json))
    this.parts.push({ lsn, xid, ops: ops.slice(0, count), jsons, count, more: options?.more === true })
  }
  get messages(): Array<Record<string, any>> {
    return this.parts.flatMap((p) => p.jsons.map((json) => JSON.parse(new TextDecoder().decode(json)) as Record<string, any>))
  }
}

/** Streamed transactions kept in memory, read back in batches of two (so batch boundaries fall inside transactions). */
class ArrayStreams implements StreamBuffer {
  readonly open = new Map<number, Change[]>()
  get openXids(): number[] {
    return [...this.open.keys()]
  }
  async append(xid: number, changes: readonly StreamedChange[]): Promise<void> {
    const list = this.open.get(xid) ?? []
    list.push(...changes.map((c) => c.change))
    this.open.set(xid, list)
  }
  async abort(abort: StreamAbort): Promise<void> {
    this.open.delete(abort.xid)
  }
  async *commit(xid: number): AsyncIterable<readonly Change[]> {
    const list = this.open.get(xid) ?? []
    this.open.delete(xid)
    for (let i = 0; i < list.length; i += 2) {
      await new Promise((r) => setTimeout(r, 1))
      yield list.slice(i, i + 2)
    }
  }
}

function setup(options: { markWrap?: number } = {}) {
  const advanced: bigint[] = []
  const invalidations: Array<{ handles: readonly string[]; reason: Invalidation }> = []
  let gate: Promise<void> = Promise.resolve()
  const router = new ShapeRouter({
    advance: (lsn) => advanced.push(lsn),
    invalidate: async (handles, reason) => {
      invalidations.push({ handles, reason })
      await gate
    },
    ...options,
  })
  const add = async (handle: string, where?: string, options: { columns?: string[]; replica?: 'default' | 'full'; table?: TableInfo } = {}) => {
    const table = options.table ?? ITEMS
    const target = new Collector()
    const clause = where === undefined ? undefined : await compileWhere(where, { columns: table.columns.map((c) => ({ name: c.name, type: c.typeName })) })
    await router.register({ handle, table, where: clause, columns: options.columns, replica: options.replica ?? 'default' }, target)
    return target
  }
  return { router, advanced, invalidations, add, setGate: (p: Promise<void>) => (gate = p) }
}

describe('ShapeRouter', () => {
  it('routes each change to the shapes it affects, with positions and a per-shape last flag', async () => {
    const { router, advanced, add } = setup()
    const ann = await add('ann', "owner = 'ann'")
    const bob = await add('bob', "owner = 'bob'")
    const all = await add('all')
    const tx = txn([insert(1, 'ann', 1), insert(2, 'bob', 2), insert(3, 'ann', 3)], 42)
    await router.onTransaction(tx)
    expect(advanced).toEqual([tx.lsn])
    expect(ann.parts).toHaveLength(1)
    expect(ann.parts[0]).toMatchObject({ lsn: tx.lsn, xid: 42, more: false })
    expect(ann.parts[0]!.ops).toEqual([0, 4])
    expect(ann.messages.map((m) => [m['key'], m['headers']['last']])).toEqual([
      ['"public"."items"/"1"', undefined],
      ['"public"."items"/"3"', true],
    ])
    expect(bob.messages).toEqual([
      {
        key: '"public"."items"/"2"',
        value: { id: '2', owner: 'bob', n: '2' },
        headers: { operation: 'insert', relation: ['public', 'items'], lsn: String(tx.lsn), op_position: 2, txids: [42], last: true },
      },
    ])
    expect(all.messages.map((m) => m['headers']['op_position'])).toEqual([0, 2, 4])
  })

  it('encodes a change once per projection and shares the bytes among shapes', async () => {
    const { router, add } = setup()
    const a = await add('a', "owner = 'ann'")
    const b = await add('b', 'n > 0')
    const c = await add('c', undefined, { columns: ['id', 'owner'] })
    await router.onTransaction(txn([insert(1, 'ann', 5)]))
    expect(a.handed[0]![0]).toBe(b.handed[0]![0])
    expect(c.handed[0]![0]).not.toBe(a.handed[0]![0])
    expect(c.messages[0]!['value']).toEqual({ id: '1', owner: 'ann' })
  })

  it('turns updates that cross a shape boundary into inserts and deletes', async () => {
    const { router, add } = setup()
    const ann = await add('ann', "owner = 'ann'")
    const bob = await add('bob', "owner = 'bob'", { replica: 'full' })
    await router.onTransaction(txn([update(row(1, 'ann', 1), row(1, 'bob', 1)), update(row(2, 'ann', 1), row(2, 'ann', 9))]))
    expect(ann.messages.map((m) => [m['headers']['operation'], m['key'], m['value']])).toEqual([
      ['delete', '"public"."items"/"1"', { id: '1' }],
      ['update', '"public"."items"/"2"', { id: '2', n: '9' }],
    ])
    expect(bob.messages.map((m) => [m['headers']['operation'], m['value'], m['old_value']])).toEqual([
      ['insert', { id: '1', owner: 'bob', n: '1' }, undefined],
    ])
  })

  it('splits a key change into delete and insert at op and op+1', async () => {
    const { router, add } = setup()
    const all = await add('all')
    await router.onTransaction(txn([update(row(1, 'ann', 1), row(5, 'ann', 1))]))
    expect(all.parts[0]!.ops).toEqual([0, 1])
    expect(all.messages.map((m) => [m['headers']['operation'], m['headers']['key_change_to'] ?? m['headers']['key_change_from'], m['headers']['last']])).toEqual([
      ['delete', '"public"."items"/"5"', undefined],
      ['insert', '"public"."items"/"1"', true],
    ])
  })

  it('visits only the affected shapes among many indexed ones', async () => {
    const { router, add } = setup()
    const targets = []
    for (let i = 0; i < 2000; i++) targets.push(await add(`s${i}`, `id = ${i}`))
    await router.onTransaction(txn([insert(1234, 'x', 0), update(row(7, 'x', 0), row(7, 'y', 0))]))
    const hit = targets.map((t, i) => [i, t.parts.length] as const).filter(([, n]) => n > 0)
    expect(hit).toEqual([
      [7, 1],
      [1234, 1],
    ])
  })

  it('invalidates the shapes of a truncated table and promises the transaction only afterwards', async () => {
    const { router, advanced, invalidations, add, setGate } = setup()
    const items = await add('items')
    let open!: () => void
    setGate(new Promise((r) => (open = r)))
    const tx = txn([insert(1, 'a', 1), { kind: 'truncate', relations: [REL], cascade: false, restartIdentity: false }, insert(2, 'b', 2)])
    const done = router.onTransaction(tx)
    await new Promise((r) => setTimeout(r, 5))
    expect(invalidations.map((i) => [i.handles, i.reason.kind])).toEqual([[['items'], 'truncate']])
    expect(advanced).toEqual([])
    open()
    await done
    expect(advanced).toEqual([tx.lsn])
    expect(items.parts).toEqual([])
    expect(router.has('items')).toBe(false)
  })

  it('invalidates on a schema change and on a table replaced under the same name', async () => {
    const { router, invalidations, add } = setup()
    await add('items')
    await router.onRelation(REL)
    expect(invalidations).toEqual([])
    await router.onRelation(relationOf(ITEMS, ITEMS.oid, ['extra']))
    expect(invalidations.map((i) => i.reason.kind)).toEqual(['schema_change'])
    await add('again')
    await router.onRelation(relationOf(ITEMS, 2000))
    expect(invalidations.map((i) => [i.handles, i.reason.kind])).toEqual([
      [['items'], 'schema_change'],
      [['again'], 'table_replaced'],
    ])
  })

  it('invalidates shapes whose changes cannot be encoded and keeps routing the rest', async () => {
    const { router, invalidations, advanced, add } = setup()
    await add('items')
    const OTHER: TableInfo = { ...ITEMS, oid: 3000, name: 'other' }
    const other = await add('other', undefined, { table: OTHER })
    const toast: Change = { kind: 'update', relation: REL, oldTuple: undefined, oldTupleKind: undefined, newTuple: ['1', UNCHANGED_TOAST, '1'], unchangedToast: [1] }
    const tx = txn([toast, { kind: 'insert', relation: relationOf(OTHER), newTuple: row(9, 'o', 9) }])
    await router.onTransaction(tx)
    expect(invalidations.map((i) => [i.handles, i.reason.kind])).toEqual([[['items'], 'unroutable_change']])
    expect(other.messages).toHaveLength(1)
    expect(advanced).toEqual([tx.lsn])
  })

  it('routes streamed transactions batch by batch with one last line per shape', async () => {
    const { router, advanced, add } = setup()
    const ann = await add('ann', "owner = 'ann'")
    const bob = await add('bob', "owner = 'bob'")
    const changes = [insert(1, 'ann', 1), insert(2, 'ann', 1), insert(3, 'ann', 1), insert(4, 'bob', 1), insert(5, 'ann', 1)]
    const streams = new ArrayStreams()
    await streams.append(99, changes.map((change) => ({ subxid: 99, change })))
    // A shape registered while the commit is being routed joins after it.
    const commit = router.onBufferedTransaction({ xid: 99, lsn: 5000n, endLsn: 5001n, commitTime: 0n, batches: streams.commit(99) })
    const late = add('late')
    await commit
    const lateTarget = await late
    expect(lateTarget.parts).toEqual([])
    // Batches [1,2] [3,4] [5]: each batch sends what the next one proved was not ann's last.
    expect(ann.parts.map((p) => [p.count, p.more])).toEqual([
      [1, true],
      [1, true],
      [1, true],
      [1, false],
    ])
    expect(ann.messages.map((m) => m['headers']['last'])).toEqual([undefined, undefined, undefined, true])
    expect(bob.parts.map((p) => [p.count, p.more])).toEqual([[1, false]])
    expect(bob.messages[0]!['headers']).toMatchObject({ op_position: 6, last: true, lsn: '5000' })
    expect(advanced).toEqual([5000n])
  })

  it('hands registrations the xids of the transactions routed before them', async () => {
    const { router, add } = setup()
    await router.onTransaction(txn([], 11))
    await router.onTransaction(txn([insert(1, 'a', 1)], 12))
    const target = new Collector()
    const ticket = await router.register({ handle: 'x', table: ITEMS, where: undefined, columns: undefined, replica: 'default' }, target)
    expect(ticket.recentXids).toEqual([11, 12])
    await add('y')
  })

  it('remembers only the last recentXids xids, oldest first, however many were routed', async () => {
    const router = new ShapeRouter({ advance: () => {}, invalidate: async () => {}, recentXids: 3 })
    expect(router.recentXids).toEqual([])
    const seen: number[] = []
    for (let xid = 100; xid < 108; xid++) {
      await router.onTransaction(txn([], xid))
      seen.push(xid)
      expect(router.recentXids).toEqual(seen.slice(-3))
    }
    const ticket = await router.register({ handle: 'x', table: ITEMS, where: undefined, columns: undefined, replica: 'default' }, new Collector())
    expect(ticket.recentXids).toEqual([105, 106, 107])
  })

  it('routes the same after its transaction and change numbers start again', async () => {
    // A wrap every few numbers: a mark left from before a restart would put a change in another shape's slot or drop a move.
    const wrapped = setup({ markWrap: 3 })
    const plain = setup()
    const shapes = async (s: ReturnType<typeof setup>) => [await s.add('ann', "owner = 'ann'"), await s.add('bob', "owner = 'bob'", { replica: 'full' }), await s.add('big', 'n > 5'), await s.add('all')]
    const a = await shapes(wrapped)
    const b = await shapes(plain)
    let seed = 7
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) >>> 0) % n)
    const owners = ['ann', 'bob', 'cy']
    const rows = new Map<number, string[]>()
    for (let t = 0; t < 40; t++) {
      const changes: Change[] = []
      for (let c = rand(4); c >= 0; c--) {
        const id = rand(6)
        const before = rows.get(id)
        const after = row(id, owners[rand(3)]!, rand(10))
        if (before === undefined) changes.push(insert(id, after[1]!, Number(after[2])))
        else if (rand(4) === 0) {
          changes.push(del(before))
          rows.delete(id)
          continue
        } else changes.push(update(before, after))
        rows.set(id, after)
      }
      const tx = txn(changes, 1000 + t)
      await wrapped.router.onTransaction(tx)
      await plain.router.onTransaction(tx)
    }
    const counters = wrapped.router as unknown as { txnCount: number; stamp: number }
    expect(counters.txnCount).toBeLessThanOrEqual(3)
    expect(counters.stamp).toBeLessThanOrEqual(3)
    for (let i = 0; i < a.length; i++) {
      expect(a[i]!.parts.length).toBeGreaterThan(0)
      expect(a[i]!.messages).toEqual(b[i]!.messages)
    }
  })

  it('runs the commit hooks of a transaction that threw part way with ABANDONED_LSN, so its second delivery is not added to the first', async () => {
    const { router } = setup()
    const heard: Array<[bigint, number]> = []
    let failing = true
    // What a subquery shape's intake does: gathers the transaction and asks to hear its commit.
    const intake: ShapeTarget = {
      appendLines: () => {
        router.atCommit((lsn, xid) => heard.push([lsn, xid]))
        if (failing) throw new Error('EIO: the store refused the lines')
      },
    }
    await router.register({ handle: 'sub', table: ITEMS, where: undefined, columns: undefined, replica: 'default' }, intake)
    const t = txn([insert(1, 'ann', 1)], 41)
    expect(() => router.onTransaction(t)).toThrow(/EIO/)
    expect(heard).toEqual([[ABANDONED_LSN, -1]])
    // Delivered again after the reconnect: one commit, heard once.
    failing = false
    router.onTransaction(t)
    expect(heard).toEqual([
      [ABANDONED_LSN, -1],
      [t.lsn, 41],
    ])
  })
})
