import { describe, expect, it } from 'vitest'
import {
  type ChangeMessage,
  type Message,
  MUST_REFETCH_BODY,
  MUST_REFETCH_MESSAGE,
  U64_MAX,
  isChangeMessage,
  isControlMessage,
  snapshotEndMessage,
  upToDateMessage,
} from '../src/index.js'

describe('control message bytes', () => {
  it.each<[bigint, string]>([
    [0n, '{"headers":{"control":"up-to-date","global_last_seen_lsn":"0"}}'],
    [123n, '{"headers":{"control":"up-to-date","global_last_seen_lsn":"123"}}'],
    [
      9007199254740993n,
      '{"headers":{"control":"up-to-date","global_last_seen_lsn":"9007199254740993"}}',
    ],
    [U64_MAX, '{"headers":{"control":"up-to-date","global_last_seen_lsn":"18446744073709551615"}}'],
  ])('up-to-date at %s', (lsn, bytes) => {
    expect(upToDateMessage(lsn)).toBe(bytes)
    expect(JSON.parse(bytes)).toEqual({ headers: { control: 'up-to-date', global_last_seen_lsn: lsn.toString() } })
  })

  it.each<[bigint, bigint, bigint[], string]>([
    [10n, 12n, [], '{"headers":{"control":"snapshot-end","xmin":"10","xmax":"12","xip_list":[]}}'],
    [10n, 15n, [10n, 13n], '{"headers":{"control":"snapshot-end","xmin":"10","xmax":"15","xip_list":["10","13"]}}'],
    [
      4294967296n,
      9007199254740993n,
      [4294967297n],
      '{"headers":{"control":"snapshot-end","xmin":"4294967296","xmax":"9007199254740993","xip_list":["4294967297"]}}',
    ],
  ])('snapshot-end %s %s [%s]', (xmin, xmax, xip, bytes) => {
    expect(snapshotEndMessage(xmin, xmax, xip)).toBe(bytes)
  })

  it('must-refetch', () => {
    expect(MUST_REFETCH_MESSAGE).toBe('{"headers":{"control":"must-refetch"}}')
    expect(MUST_REFETCH_BODY).toBe('[{"headers":{"control":"must-refetch"}}]')
  })

  it('refuses values outside u64', () => {
    expect(() => upToDateMessage(-1n)).toThrow(RangeError)
    expect(() => upToDateMessage(U64_MAX + 1n)).toThrow(RangeError)
    expect(() => snapshotEndMessage(1n, 2n, [-1n])).toThrow(RangeError)
  })
})

describe('message guards', () => {
  const change: ChangeMessage = {
    key: '"public"."items"/"1"',
    value: { id: '1', title: null },
    headers: { operation: 'insert', relation: ['public', 'items'], lsn: '1234', op_position: 0, txids: [750], last: true },
  }
  const messages: Array<[Message, boolean, boolean]> = [
    [change, true, false],
    [JSON.parse(upToDateMessage(5n)) as Message, false, true],
    [JSON.parse(MUST_REFETCH_MESSAGE) as Message, false, true],
    [{ headers: { event: 'move-out', patterns: [{ pos: 0, value: 'x' }] } }, false, false],
  ]

  it.each(messages)('classifies %j', (message, isChange, isControl) => {
    expect(isChangeMessage(message)).toBe(isChange)
    expect(isControlMessage(message)).toBe(isControl)
  })
})
