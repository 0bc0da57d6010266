import type { ShapeSchema } from '@sluice/protocol'
import { InvalidTransitionError } from './errors.js'

/**
 * The ShapeStream's state machine (SPEC.md has the prose and the diagram).
 *
 * States are immutable values; `transition(state, event)` returns the next one
 * and never mutates. The table below is typed as "every state × every event",
 * so adding a state or an event without deciding each of its cases does not
 * compile. Cases that cannot happen in a correct stream throw
 * `InvalidTransitionError` instead of being silently ignored; `stopped` is the
 * one absorbing state (a late response after an abort changes nothing).
 *
 * Offsets and handles are kept as the opaque strings the server sent; the
 * state machine never does arithmetic on them.
 */

/** Where the stream is in the shape's log; shared by every non-terminal state. */
interface Position {
  /** The shape handle; unknown before the first response (unless resuming). */
  readonly handle: string | undefined
  /** Offset of the next request: `-1`, `now`, or one the server returned. */
  readonly offset: string
  /** The first schema seen since the last reset (docs/protocol.md §7: later ones are the same). */
  readonly schema: ShapeSchema | undefined
  /** The last `electric-cursor`; echoed by live requests so their URLs move on (§4.4). */
  readonly cursor: string | undefined
  /** Set after a 409 until the next response: makes the `-1` URL unlike any cached one. */
  readonly cacheBuster: string | undefined
  /**
   * The handle a 409 retired, named as `expired_handle` until the next
   * response (docs/protocol.md §5.4): it tells the server this client followed
   * a shape of the definition, so a table dropped meanwhile is a 503 to wait
   * out (`table_gone`) rather than the 400 of a table never seen.
   */
  readonly expiredHandle: string | undefined
  /** Consecutive failed requests (network, 5xx, 429); zero after any success. */
  readonly failures: number
  /**
   * How live requests are made: chosen by the caller, and down to `long-poll`
   * for good once SSE has failed (it stays so across a 409 reset).
   */
  readonly transport: 'long-poll' | 'sse'
}

/** Catching up: non-live requests, chunk after chunk, until a response is up to date. */
export interface SyncingState extends Position {
  readonly kind: 'syncing'
}

/** At the head of the log: live requests, long-poll or SSE. */
export interface LiveState extends Position {
  readonly kind: 'live'
  readonly handle: string
  /** SSE connections in a row that ended quickly having delivered nothing (§5.5 fallback rule). */
  readonly shortSseConnections: number
}

/** Terminal: aborted by the caller, or an error `onError` did not recover from. */
export interface StoppedState extends Position {
  readonly kind: 'stopped'
  readonly reason: 'aborted' | 'error'
  readonly error: unknown
}

export type StreamState = SyncingState | LiveState | StoppedState
export type StateKind = StreamState['kind']

/** A 200 (or 304) the stream accepted; its messages are published right after this event. */
export interface ResponseEvent {
  readonly type: 'response'
  readonly handle: string
  readonly offset: string
  readonly schema: ShapeSchema | undefined
  readonly cursor: string | undefined
  /** The body ended with up-to-date (the `electric-up-to-date` header). */
  readonly upToDate: boolean
}

/** A batch of an SSE stream ending in up-to-date; it is published right after this event. */
export interface SseBatchEvent {
  readonly type: 'sseBatch'
  /** `<lsn>_<op_position>` of the batch's last change, if it had changes. */
  readonly lastChangeOffset: string | undefined
  readonly cursor: string | undefined
}

/** An SSE response ended (the server's timeout, a proxy, the network). */
export interface SseEndedEvent {
  readonly type: 'sseEnded'
  /** Shorter than the minimum healthy duration and delivered no message. */
  readonly short: boolean
}

/** The SSE request was answered with something other than an event stream. */
export interface SseUnsupportedEvent {
  readonly type: 'sseUnsupported'
}

/** A 409: the shape is gone; restart from `-1` with the new handle, if one came. */
export interface MustRefetchEvent {
  readonly type: 'mustRefetch'
  readonly handle: string | undefined
  /** Random, supplied by the caller so transitions stay pure. */
  readonly cacheBuster: string
}

/** A failure worth retrying (network, 5xx, 429); the same request is retried after a backoff. */
export interface RetryableErrorEvent {
  readonly type: 'retryableError'
}

/** A failure `onError` answered with new options: retry from where the stream is. */
export interface RecoveredEvent {
  readonly type: 'recovered'
}

/** A failure that stops the stream (a 4xx, or a retryable one past `maxRetries`). */
export interface FatalErrorEvent {
  readonly type: 'fatalError'
  readonly error: unknown
}

export interface AbortEvent {
  readonly type: 'abort'
}

export type StreamEvent =
  | ResponseEvent
  | SseBatchEvent
  | SseEndedEvent
  | SseUnsupportedEvent
  | MustRefetchEvent
  | RetryableErrorEvent
  | RecoveredEvent
  | FatalErrorEvent
  | AbortEvent
export type EventType = StreamEvent['type']

type StateOf<K extends StateKind> = Extract<StreamState, { kind: K }>
type EventOf<T extends EventType> = Extract<StreamEvent, { type: T }>

/** Every state × every event: a missing cell is a compile error. */
export type TransitionTable = {
  readonly [K in StateKind]: {
    readonly [T in EventType]: (state: StateOf<K>, event: EventOf<T>) => StreamState
  }
}

/** After this many short, empty SSE connections in a row the stream long-polls instead (§5.5). */
export const MAX_SHORT_SSE_CONNECTIONS = 3

export interface InitialPosition {
  readonly offset: string
  readonly handle?: string | undefined
  /** Default `long-poll`. */
  readonly transport?: 'long-poll' | 'sse'
}

export function initialState(start: InitialPosition): SyncingState {
  return freeze({
    kind: 'syncing',
    handle: start.handle,
    offset: start.offset,
    schema: undefined,
    cursor: undefined,
    cacheBuster: undefined,
    expiredHandle: undefined,
    failures: 0,
    transport: start.transport ?? 'long-poll',
  })
}

const invalid = (state: StreamState, event: StreamEvent): never => {
  throw new InvalidTransitionError(state.kind, event.type)
}

function syncing(from: Position, change: Partial<Omit<SyncingState, 'kind'>>): SyncingState {
  return freeze({ ...position(from), ...change, kind: 'syncing' })
}

function live(from: Position, handle: string, transport: Position['transport'], change: Partial<Omit<LiveState, 'kind' | 'handle' | 'transport'>>): LiveState {
  return freeze({ shortSseConnections: 0, ...position(from), ...change, handle, transport, kind: 'live' })
}

function stopped(from: Position, reason: StoppedState['reason'], error: unknown): StoppedState {
  return freeze({ ...position(from), kind: 'stopped', reason, error })
}

/** The Position fields alone, so no state-specific field leaks into another state. */
function position(s: Position): Position {
  return {
    handle: s.handle,
    offset: s.offset,
    schema: s.schema,
    cursor: s.cursor,
    cacheBuster: s.cacheBuster,
    expiredHandle: s.expiredHandle,
    failures: s.failures,
    transport: s.transport,
  }
}

function afterResponse(state: Position, event: ResponseEvent): Omit<Position, 'handle'> & { handle: string } {
  return {
    ...position(state),
    handle: event.handle,
    offset: event.offset,
    // The first schema since the last reset wins; live responses carry none.
    schema: state.schema ?? event.schema,
    cursor: event.cursor ?? state.cursor,
    cacheBuster: undefined,
    expiredHandle: undefined,
    failures: 0,
  }
}

/** A 409 from any live or syncing state: back to the start of the new shape. */
function refetch(state: Position, event: MustRefetchEvent): SyncingState {
  return syncing(state, {
    handle: event.handle,
    offset: '-1',
    schema: undefined,
    cursor: undefined,
    cacheBuster: event.cacheBuster,
    // A second 409 before any response (the replacement gone too) keeps naming the handle the client followed.
    expiredHandle: state.handle ?? state.expiredHandle,
    failures: 0,
  })
}

export const TRANSITIONS: TransitionTable = {
  syncing: {
    response: (s, e) => {
      const next = afterResponse(s, e)
      return e.upToDate ? live(next, next.handle, s.transport, {}) : syncing(next, {})
    },
    sseBatch: invalid,
    sseEnded: invalid,
    sseUnsupported: invalid,
    mustRefetch: refetch,
    retryableError: (s) => syncing(s, { failures: s.failures + 1 }),
    recovered: (s) => syncing(s, { failures: 0 }),
    fatalError: (s, e) => stopped(s, 'error', e.error),
    abort: (s) => stopped(s, 'aborted', undefined),
  },
  live: {
    response: (s, e) => {
      const next = afterResponse(s, e)
      // A live response that is not up to date (a chunk boundary inside a burst of
      // changes) means more is waiting: catch up with non-live requests again.
      return e.upToDate ? live(next, next.handle, s.transport, { shortSseConnections: s.shortSseConnections }) : syncing(next, {})
    },
    sseBatch: (s, e) =>
      live(s, s.handle, 'sse', {
        offset: e.lastChangeOffset ?? s.offset,
        cursor: e.cursor ?? s.cursor,
        failures: 0,
        shortSseConnections: 0,
      }),
    sseEnded: (s, e) => {
      if (!e.short) return live(s, s.handle, s.transport, { shortSseConnections: 0 })
      const count = s.shortSseConnections + 1
      return count >= MAX_SHORT_SSE_CONNECTIONS
        ? live(s, s.handle, 'long-poll', { shortSseConnections: 0 })
        : live(s, s.handle, s.transport, { shortSseConnections: count })
    },
    sseUnsupported: (s) => live(s, s.handle, 'long-poll', { shortSseConnections: 0 }),
    mustRefetch: refetch,
    retryableError: (s) => live(s, s.handle, s.transport, { shortSseConnections: s.shortSseConnections, failures: s.failures + 1 }),
    recovered: (s) => live(s, s.handle, s.transport, { shortSseConnections: s.shortSseConnections, failures: 0 }),
    fatalError: (s, e) => stopped(s, 'error', e.error),
    abort: (s) => stopped(s, 'aborted', undefined),
  },
  stopped: {
    response: (s) => s,
    sseBatch: (s) => s,
    sseEnded: (s) => s,
    sseUnsupported: (s) => s,
    mustRefetch: (s) => s,
    retryableError: (s) => s,
    recovered: (s) => s,
    fatalError: (s) => s,
    abort: (s) => s,
  },
}

export function transition(state: StreamState, event: StreamEvent): StreamState {
  // The table is typed per (state, event) pair; this lookup pairs them at run time.
  const handler = TRANSITIONS[state.kind][event.type] as (s: StreamState, e: StreamEvent) => StreamState
  return handler(state, event)
}

function freeze<T extends object>(value: T): T {
  return Object.freeze(value)
}
