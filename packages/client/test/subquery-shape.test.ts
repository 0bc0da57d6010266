import { createHash } from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import { MemoryShapeStorage, type Message, Shape, ShapeStream, type Txid } from '../src/index.js'
import { ScriptedShapeServer, type ScriptedResponse } from './scripted-server.js'

/**
 * The Shape of a subquery shape, fed the wire lines of the subquery protocol
 * (tags, removed_tags, active_conditions, is_move_in, move-in / move-out
 * events, the move-in splice) over real HTTP, parsed by the real stream. Each
 * test names the scenario it plays; after every step the materialised rows
 * must be what the where clause selects at that point.
 *
 * Tags are md5(stack id ++ handle ++ value) as a server computes them, with
 * the stack id and handle of the protocol's worked example, so H('v:1') and
 * H('v:2') are the hashes printed there.
 */

const HANDLE = '64392311-1755590400000000'
const H = (namespaced: string): string => createHash('md5').update(`single_stack${HANDLE}${namespaced}`).digest('hex')
const H1 = H('v:1')
const H2 = H('v:2')
const H3 = H('v:3')

const SCHEMA = {
  id: { type: 'int4', pk_index: 0, not_null: true },
  title: { type: 'text' },
  user_id: { type: 'int4' },
  pinned: { type: 'bool' },
}

const up = (lsn: string): string => `{"headers":{"control":"up-to-date","global_last_seen_lsn":"${lsn}"}}`
const snapshotEnd = (xid: number): string => `{"headers":{"control":"snapshot-end","xmin":"${xid}","xmax":"${xid}","xip_list":[]}}`
const moveOut = (patterns: ReadonlyArray<readonly [number, string]>, xid: number): string =>
  `{"headers":{"event":"move-out","patterns":[${patterns.map(([pos, value]) => `{"pos":${pos},"value":"${value}"}`).join(',')}],"txids":[${xid}]}}`
const moveIn = (patterns: ReadonlyArray<readonly [number, string]>, xid: number): string => moveOut(patterns, xid).replace('"move-out"', '"move-in"')
const key = (id: number): string => String.raw`"\"public\".\"posts\"/\"${id}\""`

/** One change line; `headers` is the JSON of the headers after `operation` and `relation`. */
function change(operation: 'insert' | 'update' | 'delete', id: number, value: string, headers: string): string {
  return `{"key":${key(id)},"value":{"id":"${id}"${value === '' ? '' : `,${value}`}},"headers":{"operation":"${operation}","relation":["public","posts"]${headers === '' ? '' : `,${headers}`}}}`
}
const live = (lsn: number, op: number, xid: number): string => `"lsn":"${lsn}","op_position":${op},"txids":[${xid}],"last":true`

let server: ScriptedShapeServer | undefined
let shape: Shape | undefined

afterEach(async () => {
  await shape?.stop()
  await server?.close()
  shape = undefined
  server = undefined
})

async function open(storage?: MemoryShapeStorage): Promise<{ server: ScriptedShapeServer; shape: Shape; published: Message[] }> {
  server = await ScriptedShapeServer.start(HANDLE, SCHEMA)
  const options = { url: server.url, params: { table: 'posts', where: 'user_id IN (SELECT id FROM users WHERE active = true)' } }
  const stream = new ShapeStream(options)
  const published: Message[] = []
  stream.subscribe((messages) => void published.push(...messages))
  shape = storage === undefined ? new Shape(stream) : new Shape(stream, { storage, storageKey: 'posts' })
  return { server, shape, published }
}

/** The initial sync: the snapshot lines (no up-to-date at `-1`), then the up-to-date. */
function initial(...lines: string[]): ScriptedResponse[] {
  return [
    { lines: [...lines, snapshotEnd(750)], offset: '0_0' },
    { lines: [up('24100000')], offset: '0_inf' },
  ]
}

/** The rows as `id → [title, user_id]`, for comparing with what the where clause selects. */
function rows(s: Shape): Record<number, readonly [unknown, unknown]> {
  const out: Record<number, readonly [unknown, unknown]> = {}
  for (const row of s.value.values()) out[row.id as number] = [row.title, row.user_id]
  return out
}

async function settled(promise: Promise<void>): Promise<'resolved' | 'pending'> {
  return Promise.race([promise.then(() => 'resolved' as const), new Promise<'pending'>((resolve) => setImmediate(() => resolve('pending')))])
}

describe('Shape of a subquery shape (the protocol worked example and scenarios)', () => {
  it('worked example, scenarios 1, 4, 5 (TanStack 33, 34): snapshot, live insert, move-in with its splice, move-out', async () => {
    const { server, shape, published } = await open()
    // The exact lines of the worked example (posts 10 → user 1 active, 20 → user 2 inactive).
    await server.step(
      {
        offset: '0_0',
        lines: [
          String.raw`{"key":"\"public\".\"posts\"/\"10\"","value":{"id":"10","title":"a","user_id":"1"},"headers":{"active_conditions":[true],"tags":["9b972fe58a7e3c8c961497cf3adfaed0"],"operation":"insert","relation":["public","posts"]}}`,
          `{"headers":{"control":"snapshot-end","xmin":"750","xmax":"750","xip_list":[]}}`,
        ],
      },
      { offset: '0_inf', lines: [`{"headers":{"control":"up-to-date","global_last_seen_lsn":"24100000"}}`] },
    )
    expect(rows(shape)).toEqual({ 10: ['a', 1] })

    // Scenario 1: a live insert of a matching post.
    await server.step({ offset: '24100100_0', lines: [change('insert', 11, `"title":"c","user_id":"1"`, `${live(24100100, 0, 750)},"tags":["${H1}"],"active_conditions":[true]`), up('24100100')] })
    expect(rows(shape)).toEqual({ 10: ['a', 1], 11: ['c', 1] })

    // Scenario 5: UPDATE users SET active = true WHERE id = 2.
    await server.step({
      offset: '1_2',
      lines: [
        `{"headers":{"event":"move-in","patterns":[{"pos":0,"value":"4936b72016d6d5b3b8e0c5b9c8fc60a0"}],"txids":[751]}}`,
        String.raw`{"key":"\"public\".\"posts\"/\"20\"","value":{"id":"20","title":"b","user_id":"2"},"headers":{"active_conditions":[true],"tags":["4936b72016d6d5b3b8e0c5b9c8fc60a0"],"is_move_in":true,"operation":"insert","relation":["public","posts"]}}`,
        `{"headers":{"control":"snapshot-end","xmin":"752","xmax":"752","xip_list":[]}}`,
        `{"headers":{"control":"up-to-date","global_last_seen_lsn":"24101000"}}`,
      ],
    })
    expect(rows(shape)).toEqual({ 10: ['a', 1], 11: ['c', 1], 20: ['b', 2] })
    // The move's transaction touched only users: it is synced once the move is applied.
    expect(await settled(shape.waitForTxid(751))).toBe('resolved')

    // Scenario 4: UPDATE users SET active = false WHERE id = 1 — one event, no deletes on the wire.
    await server.step({
      offset: '1_3',
      lines: [
        `{"headers":{"event":"move-out","patterns":[{"pos":0,"value":"9b972fe58a7e3c8c961497cf3adfaed0"}],"txids":[753]}}`,
        `{"headers":{"control":"up-to-date","global_last_seen_lsn":"24101500"}}`,
      ],
    })
    expect(rows(shape)).toEqual({ 20: ['b', 2] })
    expect(await settled(shape.waitForTxid(753))).toBe('resolved')

    // The stream hands events to subscribers exactly as they came.
    const events = published.filter((m) => 'event' in m.headers)
    expect(events).toEqual([
      { headers: { event: 'move-in', patterns: [{ pos: 0, value: H2 }], txids: [751] } },
      { headers: { event: 'move-out', patterns: [{ pos: 0, value: H1 }], txids: [753] } },
    ])
    const moved = published.find((m) => 'key' in m && m.key === '"public"."posts"/"20"')
    expect(moved?.headers).toEqual({ active_conditions: [true], tags: [H2], is_move_in: true, operation: 'insert', relation: ['public', 'posts'] })
  })

  it('scenario 6 (NOT IN): a value entering the inner set moves rows out, leaving it moves them back in', async () => {
    const { server, shape } = await open()
    await server.step(
      ...initial(
        change('insert', 10, `"title":"a","user_id":"1"`, `"tags":["${H1}"],"active_conditions":[true]`),
        change('insert', 20, `"title":"b","user_id":"2"`, `"tags":["${H2}"],"active_conditions":[true]`),
      ),
    )
    expect(rows(shape)).toEqual({ 10: ['a', 1], 20: ['b', 2] })
    await server.step({ offset: '1_1', lines: [moveOut([[0, H1]], 760), up('24102000')] })
    expect(rows(shape)).toEqual({ 20: ['b', 2] })
    await server.step({
      offset: '1_4',
      lines: [moveIn([[0, H1]], 761), change('insert', 10, `"title":"a","user_id":"1"`, `"tags":["${H1}"],"active_conditions":[true],"is_move_in":true`), snapshotEnd(762), up('24102100')],
    })
    expect(rows(shape)).toEqual({ 10: ['a', 1], 20: ['b', 2] })
  })

  it('scenarios 7, 21, 29 (TanStack 36): outer updates flow; a post moved to another user keeps only the new tag', async () => {
    const { server, shape } = await open()
    await server.step(...initial(change('insert', 10, `"title":"a","user_id":"1"`, `"tags":["${H1}"],"active_conditions":[true]`)))
    // A title update: removed_tags is always present on a subquery shape's update.
    await server.step({ offset: '24101800_0', lines: [change('update', 10, `"title":"a2"`, `${live(24101800, 0, 754)},"tags":["${H1}"],"removed_tags":[],"active_conditions":[true]`), up('24101800')] })
    expect(rows(shape)).toEqual({ 10: ['a2', 1] })
    // The protocol's example: post 10 moves from user 1 to user 2, both active.
    await server.step({
      offset: '24101976_0',
      lines: [
        String.raw`{"key":"\"public\".\"posts\"/\"10\"","value":{"id":"10","user_id":"2"},"headers":{"operation":"update","relation":["public","posts"],"lsn":"24101976","op_position":0,"txids":[754],"last":true,"tags":["4936b72016d6d5b3b8e0c5b9c8fc60a0"],"removed_tags":["9b972fe58a7e3c8c961497cf3adfaed0"],"active_conditions":[true]}}`,
        up('24101976'),
      ],
    })
    expect(rows(shape)).toEqual({ 10: ['a2', 2] })
    // Scenario 29: the old user is deactivated; the post no longer carries its tag.
    await server.step({ offset: '2_0', lines: [moveOut([[0, H1]], 755), up('24102000')] })
    expect(rows(shape)).toEqual({ 10: ['a2', 2] })
    await server.step({ offset: '2_1', lines: [moveOut([[0, H2]], 756), up('24102100')] })
    expect(rows(shape)).toEqual({})
  })

  it('scenarios 9, 10, 24 (OR with a row predicate): a move-out keeps rows present through the other disjunct; a move-in flips the condition back', async () => {
    const storage = new MemoryShapeStorage()
    const { server, shape } = await open(storage)
    const HNULL = H('NULL')
    // `user_id IN S OR pinned = true`: tags [H(user)/, /1].
    await server.step(
      ...initial(
        change('insert', 10, `"title":"a","user_id":"1","pinned":"t"`, `"tags":["${H1}/","/1"],"active_conditions":[true,true]`),
        change('insert', 20, `"title":"b","user_id":"2","pinned":"f"`, `"tags":["${H2}/","/1"],"active_conditions":[true,false]`),
        change('insert', 30, `"title":"c","user_id":"3","pinned":"t"`, `"tags":["${H3}/","/1"],"active_conditions":[false,true]`),
        change('insert', 40, `"title":"d","user_id":null,"pinned":"t"`, `"tags":["${HNULL}/","/1"],"active_conditions":[false,true]`),
      ),
    )
    expect(Object.keys(rows(shape))).toEqual(['10', '20', '30', '40'])
    // Scenario 9: user 1 deactivated; post 10 is pinned and stays, with no row message.
    await server.step({ offset: '1_0', lines: [moveOut([[0, H1]], 770), up('24103000')] })
    expect(Object.keys(rows(shape))).toEqual(['10', '20', '30', '40'])
    await server.step({ offset: '1_1', lines: [moveOut([[0, H2]], 771), up('24103100')] })
    expect(Object.keys(rows(shape))).toEqual(['10', '30', '40'])
    // Scenario 10: user 3 activated; post 30 is already present: no row message, its condition flips.
    await server.step({ offset: '1_2', lines: [moveIn([[0, H3]], 772), up('24103200')] })
    expect(Object.keys(rows(shape))).toEqual(['10', '30', '40'])
    const saved = await storage.load('posts')
    expect(saved?.tags).toContainEqual(['"public"."posts"/"30"', [`${H3}/`, '/1'], [true, true]])
    expect(saved?.tags).toContainEqual(['"public"."posts"/"10"', [`${H1}/`, '/1'], [false, true]])
    // Post 30 unpinned while user 3 is active: still in, now through the subquery only.
    await server.step({ offset: '24103300_0', lines: [change('update', 30, `"pinned":"f"`, `${live(24103300, 0, 773)},"tags":["${H3}/","/1"],"removed_tags":[],"active_conditions":[true,false]`), up('24103300')] })
    await server.step({ offset: '2_0', lines: [moveOut([[0, H3]], 774), up('24103400')] })
    expect(Object.keys(rows(shape))).toEqual(['10', '40'])
  })

  it('scenarios 13, 14, 15: tags of row forms and of subqueries ANDed with a predicate; several patterns hitting one row delete it once', async () => {
    const { server, shape } = await open()
    const HROW = H('user_id:v:2team_id:v:2')
    const H20 = H('v:20')
    await server.step(
      ...initial(
        change('insert', 1, `"title":"row form","user_id":"2"`, `"tags":["${HROW}"],"active_conditions":[true]`),
        change('insert', 2, `"title":"with params","user_id":"20"`, `"tags":["${H20}/1"],"active_conditions":[true,true]`),
        change('insert', 3, `"title":"two subqueries","user_id":"1"`, `"tags":["${H1}/${H2}"],"active_conditions":[true,true]`),
      ),
    )
    expect(Object.keys(rows(shape))).toEqual(['1', '2', '3'])
    await server.step({ offset: '1_0', lines: [moveOut([[0, HROW]], 780), moveOut([[0, H20]], 780), up('24104000')] })
    expect(Object.keys(rows(shape))).toEqual(['3'])
    await server.step({ offset: '1_1', lines: [moveOut([[0, H1], [1, H2]], 781), up('24104100')] })
    expect(rows(shape)).toEqual({})
    await server.step({
      offset: '1_4',
      lines: [moveIn([[0, HROW]], 782), change('insert', 1, `"title":"row form","user_id":"2"`, `"tags":["${HROW}"],"active_conditions":[true],"is_move_in":true`), snapshotEnd(783), up('24104200')],
    })
    expect(Object.keys(rows(shape))).toEqual(['1'])
  })

  it('scenarios 16, 17, 18: a burst of moves in one body, oscillation, moves into an empty shape', async () => {
    const { server, shape } = await open()
    const [H11, H12, H13] = [H('v:11'), H('v:12'), H('v:13')]
    const moved = (id: number, user: number, hash: string): string => change('insert', id, `"title":"p${id}","user_id":"${user}"`, `"tags":["${hash}"],"active_conditions":[true],"is_move_in":true`)
    // Scenario 18: nothing at first.
    await server.step(...initial())
    expect(rows(shape)).toEqual({})
    await server.step({ offset: '1_2', lines: [moveIn([[0, H11]], 790), moved(1, 11, H11), snapshotEnd(791), up('24105000')] })
    expect(rows(shape)).toEqual({ 1: ['p1', 11] })
    // Scenario 16: move-out, then two move-ins, in one body.
    await server.step({
      offset: '2_6',
      lines: [moveOut([[0, H11]], 792), moveIn([[0, H12]], 793), moved(2, 12, H12), snapshotEnd(794), moveIn([[0, H13]], 795), moved(3, 13, H13), snapshotEnd(796), up('24105100')],
    })
    expect(rows(shape)).toEqual({ 2: ['p2', 12], 3: ['p3', 13] })
    // Then a total move-out: one event, two patterns.
    await server.step({ offset: '2_7', lines: [moveOut([[0, H12], [0, H13]], 797), up('24105200')] })
    expect(rows(shape)).toEqual({})
    // Scenario 17: in → out → in of one value, plus another value in (the collapsed sequence).
    await server.step({
      offset: '3_5',
      lines: [moveIn([[0, H2]], 798), moved(4, 2, H2), snapshotEnd(799), moveOut([[0, H2]], 800), moveIn([[0, H3]], 801), moved(5, 3, H3), snapshotEnd(802), up('24105300')],
    })
    expect(rows(shape)).toEqual({ 5: ['p5', 3] })
    // A move-in after a move-out does not bring back the row it removed (the inserts after it do).
    await server.step({ offset: '3_6', lines: [moveIn([[0, H2]], 803), up('24105400')] })
    expect(rows(shape)).toEqual({ 5: ['p5', 3] })
  })

  it('scenarios 22, 23, 31: updates sent as insert or delete; an update carrying only new conditions', async () => {
    const { server, shape } = await open()
    await server.step(
      ...initial(
        change('insert', 10, `"title":"a","user_id":"1","pinned":"t"`, `"tags":["${H1}/","/1"],"active_conditions":[true,true]`),
        change('insert', 20, `"title":"b","user_id":"2","pinned":"f"`, `"tags":["${H2}/","/1"],"active_conditions":[true,false]`),
      ),
    )
    // Scenario 22: post 20 moves to an inactive user (a delete with the old row's tags), post 30 to an active one (an insert).
    await server.step({
      offset: '24106000_1',
      lines: [
        change('delete', 20, '', `"lsn":"24106000","op_position":0,"txids":[810],"tags":["${H2}/","/1"],"active_conditions":[true,false]`),
        change('insert', 30, `"title":"c","user_id":"1","pinned":"f"`, `${live(24106000, 1, 810)},"tags":["${H1}/","/1"],"active_conditions":[true,false]`),
        up('24106000'),
      ],
    })
    expect(Object.keys(rows(shape))).toEqual(['10', '30'])
    // Scenario 23: no selected column changed (only the key), but post 10 is no longer pinned.
    await server.step({ offset: '24106100_0', lines: [change('update', 10, '', `${live(24106100, 0, 811)},"tags":["${H1}/","/1"],"removed_tags":[],"active_conditions":[true,false]`), up('24106100')] })
    expect(rows(shape)[10]).toEqual(['a', 1])
    await server.step({ offset: '2_0', lines: [moveOut([[0, H1]], 812), up('24106200')] })
    expect(rows(shape)).toEqual({})
    // Scenario 31: user 2 activated and post 30 moved to it with a failing other condition, in one transaction: a delete, and a move-in with no rows.
    await server.step({ offset: '24106300_0', lines: [moveIn([[0, H2]], 813), change('delete', 30, '', `"lsn":"24106300","op_position":0,"txids":[813],"last":true,"tags":["${H1}/","/1"],"active_conditions":[false,false]`), up('24106300')] })
    expect(rows(shape)).toEqual({})
  })

  it('scenario 25 (the splice): an update before the boundary is a delete, then the move-in insert, then later changes', async () => {
    const { server, shape } = await open()
    await server.step(...initial(change('insert', 10, `"title":"a","user_id":"1"`, `"tags":["${H1}"],"active_conditions":[true]`)))
    // Held outer transaction 820 (post 10 → user 2, not yet in the set) is visible to the move-in query;
    // transaction 823 (a title update of post 10) is not, so it follows the splice.
    await server.step({
      offset: '24107000_0',
      lines: [
        change('delete', 10, '', `"lsn":"24107000","op_position":0,"txids":[820],"last":true,"tags":["${H1}"],"active_conditions":[true]`),
        moveIn([[0, H2]], 821),
        change('insert', 10, `"title":"a","user_id":"2"`, `"tags":["${H2}"],"active_conditions":[true],"is_move_in":true`),
        `{"headers":{"control":"snapshot-end","xmin":"822","xmax":"823","xip_list":[]}}`,
        change('update', 10, `"title":"after"`, `${live(24107100, 0, 823)},"tags":["${H2}"],"removed_tags":[],"active_conditions":[true]`),
        up('24107100'),
      ],
    })
    expect(rows(shape)).toEqual({ 10: ['after', 2] })
    // A write seen only by the move-in query's snapshot counts as synced.
    expect(await settled(shape.waitForTxid(822))).toBe('resolved')
  })

  for (const order of ['later first', 'earlier first'] as const) {
    it(`snapshot-ends of move-ins, ${order}: a txid is synced as by every snapshot seen (the shape keeps only the latest)`, async () => {
      const { server, shape } = await open()
      await server.step(...initial(change('insert', 2, `"title":"two","user_id":"2"`, `"tags":["${H2}"],"active_conditions":[true]`)))
      // One move-in's query ran later (xmax 910, 907 still running), the other's earlier (xmax 904).
      const later = `{"headers":{"control":"snapshot-end","xmin":"905","xmax":"910","xip_list":["907"]}}`
      const earlier = `{"headers":{"control":"snapshot-end","xmin":"902","xmax":"904","xip_list":[]}}`
      const [first, second] = order === 'later first' ? [later, earlier] : [earlier, later]
      await server.step({ offset: '1_0', lines: [moveIn([[0, H1]], 900), first, up('24109000')] })
      await server.step({ offset: '1_1', lines: [moveIn([[0, H3]], 901), second, up('24109100')] })
      expect(await settled(shape.waitForTxid(906))).toBe('resolved')
      expect(await settled(shape.waitForTxid(903))).toBe('resolved')
      expect(await settled(shape.waitForTxid(907))).toBe('pending')
      expect(await settled(shape.waitForTxid(911))).toBe('pending')
    })
  }

  it('TanStack 35, 37, 39: out then in again; a deleted post; one transaction moving posts both ways and updating one', async () => {
    const { server, shape } = await open()
    await server.step(
      ...initial(
        change('insert', 2, `"title":"two","user_id":"2"`, `"tags":["${H2}"],"active_conditions":[true]`),
        change('insert', 3, `"title":"three","user_id":"3"`, `"tags":["${H3}"],"active_conditions":[true]`),
      ),
    )
    await server.step({ offset: '1_0', lines: [moveOut([[0, H3]], 830), up('24108000')] })
    await server.step({ offset: '1_3', lines: [moveIn([[0, H3]], 831), change('insert', 3, `"title":"three","user_id":"3"`, `"tags":["${H3}"],"active_conditions":[true],"is_move_in":true`), snapshotEnd(832), up('24108100')] })
    expect(Object.keys(rows(shape))).toEqual(['2', '3'])
    // One transaction: user 1 activated, post 2 renamed, user 3 deactivated.
    await server.step({
      offset: '24108200_0',
      lines: [
        moveOut([[0, H3]], 833),
        moveIn([[0, H1]], 833),
        change('insert', 1, `"title":"one","user_id":"1"`, `"tags":["${H1}"],"active_conditions":[true],"is_move_in":true`),
        snapshotEnd(834),
        change('update', 2, `"title":"two!"`, `${live(24108200, 0, 833)},"tags":["${H2}"],"removed_tags":[],"active_conditions":[true]`),
        up('24108200'),
      ],
    })
    expect(rows(shape)).toEqual({ 1: ['one', 1], 2: ['two!', 2] })
    await server.step({ offset: '24108300_0', lines: [change('delete', 2, '', `${live(24108300, 0, 835)},"tags":["${H2}"],"active_conditions":[true]`), up('24108300')] })
    expect(rows(shape)).toEqual({ 1: ['one', 1] })
  })

  it('must-refetch drops all tag state: the new handle tags rows afresh', async () => {
    const { server, shape } = await open()
    await server.step(...initial(change('insert', 10, `"title":"a","user_id":"1"`, `"tags":["${H1}"],"active_conditions":[true]`)))
    const handle2 = '64392311-1755590500000000'
    const newH1 = createHash('md5').update(`single_stack${handle2}v:1`).digest('hex')
    await server.step(
      { status: 409, offset: '-1', handle: handle2 },
      { offset: '0_0', handle: handle2, lines: [change('insert', 10, `"title":"a","user_id":"1"`, `"tags":["${newH1}"],"active_conditions":[true]`), snapshotEnd(840)] },
      { offset: '0_inf', handle: handle2, lines: [up('24109000')] },
    )
    expect(rows(shape)).toEqual({ 10: ['a', 1] })
    // A pattern of the old handle matches nothing any more.
    await server.step({ offset: '1_0', handle: handle2, lines: [moveOut([[0, H1]], 841), up('24109100')] })
    expect(rows(shape)).toEqual({ 10: ['a', 1] })
    await server.step({ offset: '1_1', handle: handle2, lines: [moveOut([[0, newH1]], 842), up('24109200')] })
    expect(rows(shape)).toEqual({})
  })

  it('tags without active_conditions (servers before 1.6): a row goes with its last matching tag', async () => {
    const { server, shape } = await open()
    await server.step(...initial(change('insert', 10, `"title":"a","user_id":"1"`, `"tags":["${H1}"]`), change('insert', 20, `"title":"b","user_id":"2"`, `"tags":["${H2}"]`)))
    await server.step({ offset: '1_0', lines: [moveOut([[0, H1]], 850), up('24110000')] })
    expect(rows(shape)).toEqual({ 20: ['b', 2] })
  })
})

describe('Shape of a subquery shape across a reload (scenario 30)', () => {
  it('tags are saved with the rows, so a move-out after resuming from storage still removes the row', async () => {
    const storage = new MemoryShapeStorage()
    const first = await open(storage)
    await first.server.step(
      ...initial(
        change('insert', 10, `"title":"a","user_id":"1"`, `"tags":["${H1}"],"active_conditions":[true]`),
        change('insert', 20, `"title":"b","user_id":"2"`, `"tags":["${H2}"],"active_conditions":[true]`),
      ),
    )
    await first.shape.stop()
    await first.server.untilNoneHeld()
    const url = first.server.url
    const resumed = await Shape.open({ url, params: { table: 'posts', where: 'user_id IN (SELECT id FROM users WHERE active = true)' }, storage, storageKey: 'posts' })
    shape = resumed
    expect(rows(resumed)).toEqual({ 10: ['a', 1], 20: ['b', 2] })
    await first.server.step({ offset: '1_0', lines: [moveOut([[0, H1]], 860), up('24111000')] })
    expect(rows(resumed)).toEqual({ 20: ['b', 2] })
    // It resumed where it stopped instead of syncing from -1.
    const resumedRequest = first.server.requests.at(-2)!
    expect(resumedRequest.searchParams.get('offset')).toBe('0_inf')
    expect(resumedRequest.searchParams.get('handle')).toBe(HANDLE)
  })
})

describe('Shape of a plain shape', () => {
  it('keeps rows as before when no message carries tags: an event-free shape saves no tag state', async () => {
    const storage = new MemoryShapeStorage()
    const { server, shape } = await open(storage)
    await server.step(...initial(change('insert', 10, `"title":"a","user_id":"1"`, '')))
    await server.step({ offset: '24112000_0', lines: [change('update', 10, `"title":"b"`, live(24112000, 0, 870)), up('24112000')] })
    expect(rows(shape)).toEqual({ 10: ['b', 1] })
    expect((await storage.load('posts'))?.tags).toBeUndefined()
    const txid: Txid = 870
    expect(await settled(shape.waitForTxid(txid))).toBe('resolved')
  })
})
