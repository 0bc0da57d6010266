import { describe, expect, it } from 'vitest'
import {
  BufferingSink,
  type ChangeSink,
  MemoryStreamBuffer,
  type PgoutputMessage,
  ProtocolViolationError,
  type Relation,
  type StreamAbort,
  type StreamCommit,
  type StreamedChange,
  type Transaction,
  TransactionAssembler,
  type TransactionAssemblerOptions,
  type TupleValue,
  UNCHANGED_TOAST,
  UnchangedToastError,
  UnknownRelationError,
  assertNoUnchangedToast,
  relationChanged,
  wholeTransactions,
} from '../../src/replication/index.js'

const REL: Relation = {
  id: 100,
  schema: 'public',
  table: 'items',
  replicaIdentity: 'full',
  columns: [
    { name: 'id', typeOid: 23, typeMod: -1, isKey: true, flags: 1 },
    { name: 'body', typeOid: 25, typeMod: -1, isKey: false, flags: 0 },
  ],
  keyColumns: [0],
}

type Event =
  | { readonly type: 'tx'; readonly tx: Transaction }
  | { readonly type: 'changes'; readonly xid: number; readonly changes: readonly StreamedChange[] }
  | { readonly type: 'commit'; readonly commit: StreamCommit }
  | { readonly type: 'abort'; readonly abort: StreamAbort }
  | { readonly type: 'relation'; readonly relation: Relation; readonly previous: Relation | undefined }

function recorder(): { sink: ChangeSink; events: Event[] } {
  const events: Event[] = []
  const sink: ChangeSink = {
    onTransaction: (tx) => void events.push({ type: 'tx', tx }),
    onStreamedChanges: (xid, changes) => void events.push({ type: 'changes', xid, changes: [...changes] }),
    onStreamCommit: (commit) => void events.push({ type: 'commit', commit }),
    onStreamAbort: (abort) => void events.push({ type: 'abort', abort }),
    onRelation: (relation, previous) => void events.push({ type: 'relation', relation, previous }),
  }
  return { sink, events }
}

// Message builders: the assembler consumes decoded messages, so tests speak in those.
const begin = (xid: number, lsn: bigint): PgoutputMessage => ({ tag: 'begin', xid, finalLsn: lsn, commitTime: 1000n })
const commit = (lsn: bigint): PgoutputMessage => ({ tag: 'commit', flags: 0, commitLsn: lsn, endLsn: lsn + 40n, commitTime: 1000n })
const relation = (rel: Relation = REL, xid?: number): PgoutputMessage => ({ tag: 'relation', xid, relation: rel })
const insert = (values: TupleValue[], xid?: number): PgoutputMessage => ({ tag: 'insert', xid, relationId: REL.id, newTuple: values, byteLength: 100 })
const update = (newTuple: TupleValue[], oldTuple?: TupleValue[], oldTupleKind?: 'key' | 'full', xid?: number): PgoutputMessage => ({
  tag: 'update',
  xid,
  relationId: REL.id,
  newTuple,
  oldTuple,
  oldTupleKind,
  byteLength: 100,
})
const del = (oldTuple: TupleValue[], kind: 'key' | 'full' = 'full', xid?: number): PgoutputMessage => ({
  tag: 'delete',
  xid,
  relationId: REL.id,
  oldTuple,
  oldTupleKind: kind,
  byteLength: 100,
})
const streamStart = (xid: number, firstSegment: boolean): PgoutputMessage => ({ tag: 'stream-start', xid, firstSegment })
const streamStop: PgoutputMessage = { tag: 'stream-stop' }
const streamCommit = (xid: number, lsn: bigint): PgoutputMessage => ({ tag: 'stream-commit', xid, flags: 0, commitLsn: lsn, endLsn: lsn + 40n, commitTime: 2000n })
const streamAbort = (xid: number, subxid: number): PgoutputMessage => ({ tag: 'stream-abort', xid, subxid })

async function feed(assembler: TransactionAssembler, messages: readonly PgoutputMessage[]): Promise<void> {
  for (const message of messages) await assembler.push(message)
}

function assembled(messages: readonly PgoutputMessage[], options: TransactionAssemblerOptions = {}) {
  const { sink, events } = recorder()
  const assembler = new TransactionAssembler(sink, options)
  return { assembler, events, run: () => feed(assembler, messages) }
}

describe('TransactionAssembler: whole transactions', () => {
  it('groups changes between Begin and Commit, with the commit LSN from Begin', async () => {
    const { events, run } = assembled([
      relation(),
      begin(7, 500n),
      insert(['1', 'a']),
      update(['1', 'b'], ['1', 'a'], 'full'),
      del(['1', 'b']),
      { tag: 'truncate', xid: undefined, cascade: true, restartIdentity: false, relationIds: [REL.id] },
      commit(500n),
    ])
    await run()
    const txs = events.filter((e) => e.type === 'tx').map((e) => e.tx)
    expect(txs).toHaveLength(1)
    expect(txs[0]).toMatchObject({ xid: 7, lsn: 500n, endLsn: 540n, commitTime: 1000n, origin: undefined })
    expect(txs[0]?.changes).toEqual([
      { kind: 'insert', relation: REL, newTuple: ['1', 'a'] },
      { kind: 'update', relation: REL, newTuple: ['1', 'b'], oldTuple: ['1', 'a'], oldTupleKind: 'full', unchangedToast: [] },
      { kind: 'delete', relation: REL, oldTuple: ['1', 'b'], oldTupleKind: 'full' },
      { kind: 'truncate', relations: [REL], cascade: true, restartIdentity: false },
    ])
  })

  it('records the origin of a replayed transaction', async () => {
    const { events, run } = assembled([relation(), begin(1, 10n), { tag: 'origin', originLsn: 5n, name: 'upstream' }, insert(['1', 'x']), commit(10n)])
    await run()
    expect(events.at(-1)).toMatchObject({ type: 'tx', tx: { origin: 'upstream' } })
  })

  it('delivers an empty transaction (Postgres sends them for DDL-only commits)', async () => {
    const { events, run } = assembled([begin(1, 10n), commit(10n)])
    await run()
    expect(events).toEqual([{ type: 'tx', tx: { xid: 1, lsn: 10n, endLsn: 50n, commitTime: 1000n, origin: undefined, changes: [] } }])
  })

  it('reports relation messages with the description they replace', async () => {
    const altered: Relation = { ...REL, columns: [...REL.columns, { name: 'extra', typeOid: 16, typeMod: -1, isKey: false, flags: 0 }] }
    const { events, assembler, run } = assembled([relation(), relation(altered)])
    await run()
    expect(events).toEqual([
      { type: 'relation', relation: REL, previous: undefined },
      { type: 'relation', relation: altered, previous: REL },
    ])
    expect(relationChanged(REL, altered)).toBe(true)
    expect(relationChanged(REL, { ...REL })).toBe(false)
    expect(assembler.relations.get(REL.id)).toBe(altered)
  })
})

describe('TransactionAssembler: unchanged TOAST', () => {
  const cases: Array<{ name: string; message: PgoutputMessage; newTuple: TupleValue[]; unchanged: number[] }> = [
    { name: 'filled from a full old row', message: update(['1', UNCHANGED_TOAST], ['1', 'big'], 'full'), newTuple: ['1', 'big'], unchanged: [] },
    { name: 'filled with NULL when the old value was NULL', message: update(['1', UNCHANGED_TOAST], ['1', null], 'full'), newTuple: ['1', null], unchanged: [] },
    { name: 'left marked without an old row', message: update(['1', UNCHANGED_TOAST]), newTuple: ['1', UNCHANGED_TOAST], unchanged: [1] },
    {
      name: 'not filled from the nulls of a key-only old tuple',
      message: update(['2', UNCHANGED_TOAST], ['1', null], 'key'),
      newTuple: ['2', UNCHANGED_TOAST],
      unchanged: [1],
    },
    {
      name: 'a key column filled from a key-only old tuple',
      message: update([UNCHANGED_TOAST, 'x'], ['k', null], 'key'),
      newTuple: ['k', 'x'],
      unchanged: [],
    },
  ]

  it.each(cases)('$name', async ({ message, newTuple, unchanged }) => {
    const { events, run } = assembled([relation(), begin(1, 10n), message, commit(10n)])
    await run()
    const change = events.at(-1)?.type === 'tx' ? (events.at(-1) as { tx: Transaction }).tx.changes[0] : undefined
    expect(change).toMatchObject({ kind: 'update', newTuple, unchangedToast: unchanged })
  })

  it('assertNoUnchangedToast names the table, the columns and the fix', async () => {
    const { events, run } = assembled([relation(), begin(1, 10n), update(['1', UNCHANGED_TOAST]), commit(10n)])
    await run()
    const change = (events.at(-1) as { tx: Transaction }).tx.changes[0]
    if (change === undefined) throw new Error('no change')
    let error: unknown
    try {
      assertNoUnchangedToast(change)
    } catch (e) {
      error = e
    }
    expect(error).toBeInstanceOf(UnchangedToastError)
    expect(error).toMatchObject({ code: 'unchanged_toast', columns: ['body'] })
    expect((error as Error).message).toContain('ALTER TABLE "public"."items" REPLICA IDENTITY FULL')
  })
})

describe('TransactionAssembler: redelivery', () => {
  it('drops transactions at or below the durable watermark', async () => {
    const { events, run } = assembled(
      [relation(), begin(1, 100n), insert(['1', 'a']), commit(100n), begin(2, 200n), insert(['2', 'b']), commit(200n)],
      { durableLsn: () => 100n },
    )
    await run()
    expect(events.filter((e) => e.type === 'tx').map((e) => (e as { tx: Transaction }).tx.lsn)).toEqual([200n])
  })

  it('drops a transaction the sink already accepted (a reconnect resends it)', async () => {
    const { assembler, events } = assembled([])
    await feed(assembler, [relation(), begin(1, 100n), insert(['1', 'a']), commit(100n)])
    await assembler.reset()
    await feed(assembler, [relation(), begin(1, 100n), insert(['1', 'a']), commit(100n), begin(2, 150n), commit(150n)])
    expect(events.filter((e) => e.type === 'tx').map((e) => (e as { tx: Transaction }).tx.lsn)).toEqual([100n, 150n])
    expect(assembler.lastDeliveredLsn).toBe(150n)
  })

  it('counts a transaction as delivered only once the sink resolves', async () => {
    let release!: () => void
    const gate = new Promise<void>((resolve) => {
      release = resolve
    })
    const sink: ChangeSink = { ...recorder().sink, onTransaction: () => gate }
    const assembler = new TransactionAssembler(sink)
    await feed(assembler, [begin(1, 100n)])
    const pending = assembler.push(commit(100n))
    expect(pending).toBeInstanceOf(Promise)
    expect(assembler.lastDeliveredLsn).toBe(0n)
    release()
    await pending
    expect(assembler.lastDeliveredLsn).toBe(100n)
  })

  it('a sink failure leaves the transaction undelivered', async () => {
    const sink: ChangeSink = { ...recorder().sink, onTransaction: () => Promise.reject(new Error('disk full')) }
    const assembler = new TransactionAssembler(sink)
    await feed(assembler, [begin(1, 100n)])
    await expect(assembler.push(commit(100n))).rejects.toThrow('disk full')
    expect(assembler.lastDeliveredLsn).toBe(0n)
    expect(assembler.lastCommitLsn).toBe(100n)
  })
})

describe('TransactionAssembler: streamed transactions (protocol 2)', () => {
  it('hands changes over per segment, interleaved with whole transactions, then commits', async () => {
    const { events, run } = assembled([
      streamStart(900, true),
      relation(REL, 900),
      insert(['1', 'a'], 900),
      insert(['2', 'b'], 901),
      streamStop,
      relation(),
      begin(5, 300n),
      insert(['9', 'z']),
      commit(300n),
      streamStart(900, false),
      update(['1', 'A'], ['1', 'a'], 'full', 900),
      streamStop,
      streamCommit(900, 400n),
    ])
    await run()
    expect(events.map((e) => e.type)).toEqual(['relation', 'changes', 'relation', 'tx', 'changes', 'commit'])
    expect(events[1]).toMatchObject({ type: 'changes', xid: 900, changes: [{ subxid: 900 }, { subxid: 901 }] })
    expect(events[5]).toEqual({ type: 'commit', commit: { xid: 900, lsn: 400n, endLsn: 440n, commitTime: 2000n } })
  })

  it('batches the changes of a long segment', async () => {
    const inserts = Array.from({ length: 5 }, (_, i) => insert([String(i), 'x'], 900))
    const { events, run } = assembled([relation(), streamStart(900, true), ...inserts, streamStop], { streamBatchSize: 2 })
    await run()
    expect(events.map((e) => (e.type === 'changes' ? e.changes.length : e.type))).toEqual(['relation', 2, 2, 1])
  })

  it('hands the batch of a segment on once its bytes reach streamBatchBytes, however few its changes', async () => {
    const inserts = Array.from({ length: 5 }, (_, i) => insert([String(i), 'x'], 900))
    const { events, run } = assembled([relation(), streamStart(900, true), ...inserts, streamStop], { streamBatchSize: 1024, streamBatchBytes: 250 })
    await run()
    // 100 bytes each: every third change reaches 250.
    expect(events.map((e) => (e.type === 'changes' ? e.changes.length : e.type))).toEqual(['relation', 3, 2])
  })

  it('reports whole and subtransaction aborts', async () => {
    const { events, assembler, run } = assembled([
      relation(),
      streamStart(900, true),
      insert(['1', 'a'], 900),
      streamStop,
      streamAbort(900, 905),
      streamAbort(900, 900),
    ])
    await run()
    expect(events.filter((e) => e.type === 'abort').map((e) => (e as { abort: StreamAbort }).abort)).toEqual([
      { xid: 900, subxid: 905, reason: 'aborted' },
      { xid: 900, subxid: 900, reason: 'aborted' },
    ])
    expect(assembler.busy).toBe(false)
  })

  it('turns a redelivered streamed transaction that is already durable into an abort', async () => {
    const { events, run } = assembled([relation(), streamStart(900, true), insert(['1', 'a'], 900), streamStop, streamCommit(900, 400n)], {
      durableLsn: () => 400n,
    })
    await run()
    expect(events.at(-1)).toEqual({ type: 'abort', abort: { xid: 900, subxid: 900, reason: 'already-durable' } })
  })

  it('reset() voids every open streamed transaction', async () => {
    const { events, assembler, run } = assembled([relation(), streamStart(900, true), insert(['1', 'a'], 900), streamStop, streamStart(901, true)])
    await run()
    expect(assembler.busy).toBe(true)
    await assembler.reset()
    expect(events.filter((e) => e.type === 'abort').map((e) => (e as { abort: StreamAbort }).abort)).toEqual([
      { xid: 900, subxid: 900, reason: 'disconnected' },
      { xid: 901, subxid: 901, reason: 'disconnected' },
    ])
    expect(assembler.busy).toBe(false)
  })
})

describe('TransactionAssembler: transactions larger than maxTransactionBytes', () => {
  it('travel through the streaming callbacks instead of memory', async () => {
    const inserts = Array.from({ length: 7 }, (_, i) => insert([String(i), 'x']))
    const { events, run } = assembled([relation(), begin(3, 700n), ...inserts, commit(700n)], { maxTransactionBytes: 250, streamBatchSize: 2 })
    await run()
    // 100 bytes each: the third insert crosses 250 and hands over the first three.
    expect(events.slice(1).map((e) => (e.type === 'changes' ? e.changes.length : e.type))).toEqual([3, 2, 2, 'commit'])
    expect(events.at(-1)).toEqual({ type: 'commit', commit: { xid: 3, lsn: 700n, endLsn: 740n, commitTime: 1000n } })
  })

  it('hand their batches on by bytes too: large rows are never held 1,024 at a time', async () => {
    const inserts = Array.from({ length: 9 }, (_, i) => insert([String(i), 'x']))
    const { events, run } = assembled([relation(), begin(3, 700n), ...inserts, commit(700n)], {
      maxTransactionBytes: 250,
      streamBatchSize: 1024,
      streamBatchBytes: 200,
    })
    await run()
    // The third insert crosses 250 and hands over the first three at once (300 bytes); then every second one.
    expect(events.slice(1).map((e) => (e.type === 'changes' ? e.changes.length : e.type))).toEqual([3, 2, 2, 2, 'commit'])
  })

  it('reset() in the middle of one aborts it in the sink', async () => {
    const { events, assembler, run } = assembled([relation(), begin(3, 700n), insert(['1', 'x']), insert(['2', 'x'])], { maxTransactionBytes: 150 })
    await run()
    await assembler.reset()
    expect(events.at(-1)).toEqual({ type: 'abort', abort: { xid: 3, subxid: 3, reason: 'disconnected' } })
  })
})

describe('MemoryStreamBuffer', () => {
  async function replay(messages: readonly PgoutputMessage[], options: TransactionAssemblerOptions = {}): Promise<Transaction[]> {
    const out: Transaction[] = []
    const buffer = new MemoryStreamBuffer()
    await feed(new TransactionAssembler(new BufferingSink(buffer, wholeTransactions((tx) => void out.push(tx))), options), messages)
    expect(buffer.openXids).toEqual([])
    return out
  }
  const ids = (tx: Transaction | undefined) => tx?.changes.map((c) => (c.kind === 'insert' ? c.newTuple[0] : c.kind))

  it('rebuilds a streamed transaction, dropping an aborted subtransaction and its children', async () => {
    const txs = await replay([
      relation(),
      streamStart(900, true),
      insert(['1', 'top'], 900),
      insert(['2', 'sub a'], 901),
      insert(['3', 'sub b (child of a)'], 902),
      streamStop,
      streamAbort(900, 901),
      streamStart(900, false),
      insert(['4', 'top again'], 900),
      insert(['5', 'sub c'], 903),
      streamStop,
      streamCommit(900, 400n),
    ])
    expect(txs).toHaveLength(1)
    expect(txs[0]?.lsn).toBe(400n)
    expect(ids(txs[0])).toEqual(['1', '4', '5'])
  })

  it('forgets an aborted streamed transaction', async () => {
    const txs = await replay([relation(), streamStart(900, true), insert(['1', 'x'], 900), streamStop, streamAbort(900, 900), begin(1, 10n), commit(10n)])
    expect(txs.map((t) => t.lsn)).toEqual([10n])
  })

  it('rebuilds a spilled transaction', async () => {
    const inserts = Array.from({ length: 7 }, (_, i) => insert([String(i), 'x']))
    const txs = await replay([relation(), begin(3, 700n), ...inserts, commit(700n)], { maxTransactionBytes: 250, streamBatchSize: 2 })
    expect(ids(txs[0])).toEqual(['0', '1', '2', '3', '4', '5', '6'])
  })
})

describe('TransactionAssembler: protocol violations', () => {
  const cases: Array<{ name: string; messages: PgoutputMessage[]; error: new (...args: never[]) => Error }> = [
    { name: 'Commit without Begin', messages: [commit(1n)], error: ProtocolViolationError },
    { name: 'nested Begin', messages: [begin(1, 1n), begin(2, 2n)], error: ProtocolViolationError },
    { name: 'Commit LSN differing from Begin', messages: [begin(1, 1n), commit(2n)], error: ProtocolViolationError },
    { name: 'a change outside a transaction', messages: [relation(), insert(['1', 'a'])], error: ProtocolViolationError },
    { name: 'a change to an unknown relation', messages: [begin(1, 1n), insert(['1', 'a'])], error: UnknownRelationError },
    { name: 'a streamed change outside a segment', messages: [relation(), insert(['1', 'a'], 5)], error: ProtocolViolationError },
    { name: 'a plain change inside a segment', messages: [relation(), streamStart(5, true), insert(['1', 'a'])], error: ProtocolViolationError },
    { name: 'Begin inside a segment', messages: [streamStart(5, true), begin(1, 1n)], error: ProtocolViolationError },
    { name: 'a second first segment', messages: [streamStart(5, true), streamStop, streamStart(5, true)], error: ProtocolViolationError },
    { name: 'a continuation never started', messages: [streamStart(5, false)], error: ProtocolViolationError },
    { name: 'Stream Stop outside a segment', messages: [streamStop], error: ProtocolViolationError },
    { name: 'Stream Commit of an unknown xid', messages: [streamCommit(5, 10n)], error: ProtocolViolationError },
    { name: 'Stream Commit inside a segment', messages: [streamStart(5, true), streamCommit(5, 10n)], error: ProtocolViolationError },
    { name: 'Stream Abort of an unknown xid', messages: [streamAbort(5, 6)], error: ProtocolViolationError },
  ]

  it.each(cases)('rejects $name', async ({ messages, error }) => {
    const { run } = assembled(messages)
    const failure: unknown = await run().then(
      () => undefined,
      (e: unknown) => e,
    )
    expect(failure).toBeInstanceOf(error)
    expect(failure).toMatchObject({ fatal: true })
  })
})
