import { describe, expect, it } from 'vitest'
import { ChangeMerger, rowOf } from '../../src/shapes/compaction/merge-changes.js'

/** The merge of compaction on its own: messages in, one message per key out (docs/protocol.md §4.5). */

const line = (value: unknown): Buffer => Buffer.from(JSON.stringify(value))
const change = (key: string, operation: string, value: Record<string, string | null>, lsn: number, op: number, extra: Record<string, unknown> = {}): Buffer =>
  line({ key, value, headers: { operation, relation: ['public', 't'], ...extra, lsn: String(lsn), op_position: op, txids: [lsn] } })
const UNTIL = { tx: 1000n, op: 0n }

function merged(m: ChangeMerger): unknown[] {
  return [...m.merged()].map((e) => ({ offset: `${e.offset.tx}_${e.offset.op}`, ...(JSON.parse(e.json.toString()) as object) }))
}

describe('ChangeMerger', () => {
  it('merges an insert and its updates into one insert at the last change, and a deleted row into a delete', () => {
    const m = new ChangeMerger()
    m.change(change('a', 'insert', { id: '1', x: '1', y: '1' }, 10, 0), UNTIL)
    m.change(change('b', 'insert', { id: '2', x: '1', y: '1' }, 10, 2), UNTIL)
    m.change(change('a', 'update', { id: '1', x: '2' }, 11, 0, { last: true }), UNTIL)
    m.change(change('b', 'delete', { id: '2' }, 12, 0), UNTIL)
    m.change(change('a', 'update', { id: '1', y: '3' }, 13, 4), UNTIL)
    expect(merged(m)).toEqual([
      { offset: '12_0', key: 'b', value: { id: '2' }, headers: { operation: 'delete', relation: ['public', 't'], lsn: '12', op_position: 0, txids: [12] } },
      { offset: '13_4', key: 'a', value: { id: '1', x: '2', y: '3' }, headers: { operation: 'insert', relation: ['public', 't'], lsn: '13', op_position: 4, txids: [13] } },
    ])
    expect(m.changes).toBe(5)
  })

  it('keeps untouched snapshot rows where they are and merges updates into the snapshot row read back', () => {
    const m = new ChangeMerger()
    const rowA = line({ key: 'a', value: { id: '1', x: '1' }, headers: { operation: 'insert', relation: ['public', 't'] } })
    const rowB = line({ key: 'b', value: { id: '2', x: '1' }, headers: { operation: 'insert', relation: ['public', 't'] } })
    m.snapshotRow(rowA, 0n)
    m.snapshotRow(rowB, 0n)
    m.snapshotRow(line({ headers: { control: 'snapshot-end', xmin: '1', xmax: '2', xip_list: [] } }), 0n)
    m.change(change('a', 'update', { id: '1', x: '5' }, 20, 0), UNTIL)
    expect(m.isUntouched('b')).toBe(true)
    expect(m.isUntouched('a')).toBe(false)
    expect(m.needsBase('a')).toBe(true)
    const { key, value } = rowOf(rowA)
    m.base(key!, value!)
    expect(merged(m)).toEqual([{ offset: '20_0', key: 'a', value: { id: '1', x: '5' }, headers: { operation: 'insert', relation: ['public', 't'], lsn: '20', op_position: 0, txids: [20] } }])
    expect(m.snapshotEnd?.toString()).toContain('snapshot-end')
  })

  it('keeps updates of a key whose insert it never saw (log=changes_only) as one update, and a re-insert after a delete as an insert', () => {
    const m = new ChangeMerger()
    m.change(change('a', 'update', { id: '1', x: '2' }, 30, 0), UNTIL)
    m.change(change('a', 'update', { id: '1', y: '3' }, 31, 0), UNTIL)
    m.change(change('b', 'delete', { id: '2' }, 31, 2, { key_change_to: 'c' }), UNTIL)
    m.change(change('c', 'insert', { id: '3', x: '9' }, 31, 3, { key_change_from: 'b' }), UNTIL)
    m.change(change('c', 'delete', { id: '3' }, 32, 0), UNTIL)
    m.change(change('c', 'insert', { id: '3', x: '10' }, 33, 0), UNTIL)
    // Past the compaction point: not taken.
    expect(m.change(change('a', 'update', { id: '1', x: '99' }, 2000, 0), UNTIL)).toBe(false)
    expect(merged(m)).toEqual([
      { offset: '31_0', key: 'a', value: { id: '1', x: '2', y: '3' }, headers: { operation: 'update', relation: ['public', 't'], lsn: '31', op_position: 0, txids: [31] } },
      { offset: '31_2', key: 'b', value: { id: '2' }, headers: { operation: 'delete', relation: ['public', 't'], lsn: '31', op_position: 2, txids: [31] } },
      { offset: '33_0', key: 'c', value: { id: '3', x: '10' }, headers: { operation: 'insert', relation: ['public', 't'], lsn: '33', op_position: 0, txids: [33] } },
    ])
  })
})
