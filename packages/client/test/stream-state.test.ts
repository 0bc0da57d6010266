import { describe, expect, it } from 'vitest'
import {
  type EventType,
  type LiveState,
  InvalidTransitionError,
  MAX_SHORT_SSE_CONNECTIONS,
  type StateKind,
  type StreamEvent,
  type StreamState,
  TRANSITIONS,
  initialState,
  transition,
} from '../src/index.js'

const schema = { id: { type: 'int4', pk_index: 0, not_null: true as const } }
const response = (over: Partial<Extract<StreamEvent, { type: 'response' }>> = {}): StreamEvent => ({
  type: 'response',
  handle: 'h1',
  offset: '0_0',
  schema,
  cursor: undefined,
  upToDate: false,
  ...over,
})

function run(state: StreamState, ...events: StreamEvent[]): StreamState {
  return events.reduce(transition, state)
}

const start = initialState({ offset: '-1' })
const live = run(start, response(), response({ offset: '10_2', upToDate: true })) as LiveState

describe('the transition table', () => {
  it('has a handler for every state × event', () => {
    const states: StateKind[] = ['syncing', 'live', 'stopped']
    const events: EventType[] = ['response', 'sseBatch', 'sseEnded', 'sseUnsupported', 'mustRefetch', 'retryableError', 'recovered', 'fatalError', 'abort']
    for (const s of states) {
      expect(Object.keys(TRANSITIONS[s]).sort()).toEqual([...events].sort())
    }
  })

  it('states are frozen and transitions never mutate', () => {
    expect(Object.isFrozen(start)).toBe(true)
    const before = JSON.stringify(start)
    const next = transition(start, response())
    expect(JSON.stringify(start)).toBe(before)
    expect(next).not.toBe(start)
    expect(Object.isFrozen(next)).toBe(true)
  })
})

describe('syncing', () => {
  it('starts at -1 with no handle, schema or cursor', () => {
    expect(start).toEqual({ kind: 'syncing', handle: undefined, offset: '-1', schema: undefined, cursor: undefined, cacheBuster: undefined, expiredHandle: undefined, failures: 0, transport: 'long-poll' })
  })

  it('follows chunks, keeps the first schema, becomes live (long-poll) at up-to-date', () => {
    const s1 = transition(start, response())
    expect(s1).toMatchObject({ kind: 'syncing', handle: 'h1', offset: '0_0', schema })
    const other = { id: { type: 'int8' } }
    const s2 = transition(s1, response({ offset: '0_1', schema: other }))
    expect(s2).toMatchObject({ kind: 'syncing', offset: '0_1', schema })
    const s3 = transition(s2, response({ offset: '0_inf', upToDate: true }))
    expect(s3).toMatchObject({ kind: 'live', handle: 'h1', offset: '0_inf', transport: 'long-poll', shortSseConnections: 0 })
  })

  it('offset now and a resumed position start syncing from there', () => {
    expect(initialState({ offset: 'now' })).toMatchObject({ kind: 'syncing', offset: 'now', handle: undefined })
    expect(initialState({ offset: '5_2', handle: 'h' })).toMatchObject({ kind: 'syncing', offset: '5_2', handle: 'h' })
  })

  it('a 409 resets to -1 with the new handle, no schema, and a cache buster until the next response', () => {
    const s = run(start, response({ offset: '0_3' }), { type: 'mustRefetch', handle: 'h2', cacheBuster: 'cb' })
    expect(s).toEqual({ kind: 'syncing', handle: 'h2', offset: '-1', schema: undefined, cursor: undefined, cacheBuster: 'cb', expiredHandle: 'h1', failures: 0, transport: 'long-poll' })
    expect(transition(s, response({ handle: 'h2' })).cacheBuster).toBeUndefined()
  })

  it('a 409 without a handle drops the old one, and names it as expired until the next response', () => {
    const refetching = transition(live, { type: 'mustRefetch', handle: undefined, cacheBuster: 'x' })
    expect(refetching.handle).toBeUndefined()
    expect(refetching.expiredHandle).toBe(live.handle)
    // A second 409 before any response (say the replacement went too) still names the handle the client followed.
    expect(transition(refetching, { type: 'mustRefetch', handle: undefined, cacheBuster: 'y' }).expiredHandle).toBe(live.handle)
    expect(transition(refetching, { type: 'retryableError' }).expiredHandle).toBe(live.handle)
    expect(transition(refetching, response({ handle: 'h5' })).expiredHandle).toBeUndefined()
  })

  it('counts failures, cleared by a response or a recovery', () => {
    const failed = run(start, { type: 'retryableError' }, { type: 'retryableError' })
    expect(failed).toMatchObject({ kind: 'syncing', failures: 2, offset: '-1' })
    expect(transition(failed, response()).failures).toBe(0)
    expect(transition(failed, { type: 'recovered' }).failures).toBe(0)
  })

  it('SSE events cannot happen while syncing', () => {
    for (const event of [
      { type: 'sseBatch', lastChangeOffset: undefined, cursor: undefined },
      { type: 'sseEnded', short: true },
      { type: 'sseUnsupported' },
    ] as StreamEvent[]) {
      expect(() => transition(start, event)).toThrow(InvalidTransitionError)
    }
  })
})

describe('live', () => {
  it('keeps the cursor and moves the offset with each up-to-date response', () => {
    const s = transition(live, response({ offset: '11_0', cursor: '1234', upToDate: true, schema: undefined }))
    expect(s).toMatchObject({ kind: 'live', offset: '11_0', cursor: '1234', schema })
    const s2 = transition(s, response({ offset: '11_0', cursor: undefined, upToDate: true, schema: undefined }))
    expect(s2.cursor).toBe('1234')
  })

  it('a live response short of the head goes back to catching up', () => {
    expect(transition(live, response({ offset: '12_0', upToDate: false })).kind).toBe('syncing')
  })

  it('an SSE batch resumes after its last change, or stays put without changes', () => {
    const sse = { ...live, transport: 'sse' as const }
    expect(transition(sse, { type: 'sseBatch', lastChangeOffset: '20_4', cursor: '99' })).toMatchObject({ offset: '20_4', cursor: '99', transport: 'sse' })
    expect(transition(sse, { type: 'sseBatch', lastChangeOffset: undefined, cursor: undefined })).toMatchObject({ offset: '10_2' })
  })

  it(`falls back to long-poll after ${MAX_SHORT_SSE_CONNECTIONS} short SSE connections in a row`, () => {
    let s: StreamState = { ...live, transport: 'sse' as const }
    for (let i = 1; i < MAX_SHORT_SSE_CONNECTIONS; i++) {
      s = transition(s, { type: 'sseEnded', short: true })
      expect(s).toMatchObject({ transport: 'sse', shortSseConnections: i })
    }
    expect(transition(s, { type: 'sseEnded', short: false })).toMatchObject({ transport: 'sse', shortSseConnections: 0 })
    expect(transition(s, { type: 'sseBatch', lastChangeOffset: undefined, cursor: undefined })).toMatchObject({ shortSseConnections: 0 })
    expect(transition(s, { type: 'sseEnded', short: true })).toMatchObject({ transport: 'long-poll', shortSseConnections: 0 })
  })

  it('an answer that is not an event stream falls back at once', () => {
    expect(transition({ ...live, transport: 'sse' as const }, { type: 'sseUnsupported' })).toMatchObject({ kind: 'live', transport: 'long-poll' })
  })

  it('SSE chosen at the start is used once live, and a fallback outlasts a 409', () => {
    const sseStart = initialState({ offset: '-1', transport: 'sse' })
    const sseLive = run(sseStart, response({ upToDate: true }))
    expect(sseLive).toMatchObject({ kind: 'live', transport: 'sse' })
    const fellBack = run(sseLive, { type: 'sseUnsupported' }, { type: 'mustRefetch', handle: 'h3', cacheBuster: 'c' }, response({ handle: 'h3', upToDate: true }))
    expect(fellBack).toMatchObject({ kind: 'live', transport: 'long-poll' })
  })

  it('a 409 while live resets to syncing at -1', () => {
    expect(transition(live, { type: 'mustRefetch', handle: 'h9', cacheBuster: 'z' })).toMatchObject({ kind: 'syncing', offset: '-1', handle: 'h9' })
  })
})

describe('stopped', () => {
  it('fatal errors and aborts stop from any live state, keeping the position', () => {
    const error = new Error('400')
    expect(transition(live, { type: 'fatalError', error })).toMatchObject({ kind: 'stopped', reason: 'error', error, offset: '10_2', handle: 'h1' })
    expect(transition(start, { type: 'abort' })).toMatchObject({ kind: 'stopped', reason: 'aborted' })
  })

  it('is absorbing: late events change nothing', () => {
    const s = transition(live, { type: 'abort' })
    const events: StreamEvent[] = [
      response({ upToDate: true }),
      { type: 'sseBatch', lastChangeOffset: '1_1', cursor: undefined },
      { type: 'sseEnded', short: true },
      { type: 'sseUnsupported' },
      { type: 'mustRefetch', handle: 'x', cacheBuster: 'y' },
      { type: 'retryableError' },
      { type: 'recovered' },
      { type: 'fatalError', error: new Error('late') },
      { type: 'abort' },
    ]
    for (const event of events) expect(transition(s, event)).toBe(s)
  })
})
