import type { ChangeHeaders, ControlMessage, EventMessage } from '@sluice/protocol'
import { InvalidResponseError } from './errors.js'
import type { Row, RowParser } from './value-parser.js'

/**
 * Messages as subscribers receive them: change messages with parsed values,
 * control and event messages as the server sent them (docs/protocol.md §3).
 * The stream also publishes a `must-refetch` control message of its own when
 * a 409 resets it, so a subscriber knows to drop what it holds.
 */
export interface ChangeMessage<T extends Row = Row> {
  readonly key: string
  readonly value: T
  /** `replica=full` updates: the old values of the changed columns. */
  readonly old_value?: Partial<T>
  readonly headers: ChangeHeaders
}

export type Message<T extends Row = Row> = ChangeMessage<T> | ControlMessage | EventMessage

export function isChangeMessage<T extends Row>(message: Message<T>): message is ChangeMessage<T> {
  return 'key' in message && 'operation' in message.headers
}

export function isControlMessage<T extends Row>(message: Message<T>): message is ControlMessage {
  return 'control' in message.headers
}

/** A subquery shape's `move-in` / `move-out` event (neither a change nor a control message). */
export function isEventMessage<T extends Row>(message: Message<T>): message is EventMessage {
  return 'event' in message.headers
}

export function isUpToDateMessage<T extends Row>(message: Message<T>): message is ControlMessage {
  return isControlMessage(message) && message.headers.control === 'up-to-date'
}

export function isMustRefetchMessage<T extends Row>(message: Message<T>): message is ControlMessage {
  return isControlMessage(message) && message.headers.control === 'must-refetch'
}

/**
 * A response body: a JSON array of messages; change values parsed with
 * `parseRow`. The messages are the objects JSON.parse made, their values
 * replaced by what `parseRow` returns (which may be the same objects, parsed
 * in place: nobody else holds them).
 */
export function parseBody<T extends Row>(text: string, parseRow: RowParser): Array<Message<T>> {
  if (text === '') return []
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch (cause) {
    throw new InvalidResponseError(`response body is not JSON: ${text.slice(0, 200)}`, { cause })
  }
  if (!Array.isArray(raw)) throw new InvalidResponseError(`response body is not a JSON array: ${text.slice(0, 200)}`)
  for (let i = 0; i < raw.length; i++) toMessage<T>(raw[i], parseRow)
  return raw as Array<Message<T>>
}

/** One message (an SSE event's data). */
export function parseMessage<T extends Row>(text: string, parseRow: RowParser): Message<T> {
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch (cause) {
    throw new InvalidResponseError(`SSE event is not JSON: ${text.slice(0, 200)}`, { cause })
  }
  return toMessage<T>(raw, parseRow)
}

function toMessage<T extends Row>(raw: unknown, parseRow: RowParser): Message<T> {
  if (typeof raw !== 'object' || raw === null || !('headers' in raw) || typeof raw.headers !== 'object' || raw.headers === null) {
    throw new InvalidResponseError(`not a message: ${JSON.stringify(raw)?.slice(0, 200)}`)
  }
  const message = raw as { key?: unknown; value?: unknown; old_value?: unknown; headers: Record<string, unknown> }
  const problem = malformed(message)
  if (problem !== undefined) throw new InvalidResponseError(`malformed message (${problem}): ${JSON.stringify(raw).slice(0, 200)}`)
  if (isValues(message.value)) message.value = parseRow(message.value)
  if (isValues(message.old_value)) message.old_value = parseRow(message.old_value)
  return raw as Message<T>
}

const OPERATIONS = new Set(['insert', 'update', 'delete'])
const XID8 = /^\d{1,20}$/

/**
 * What is wrong with a message whose kind is known (change, control or event)
 * and whose fields a subscriber relies on, or undefined. A message of a kind
 * this client does not know passes: a newer server may send one, and
 * subscribers skip it. Checked here so a server's bad message stops the stream
 * with `InvalidResponseError` instead of failing a subscriber halfway through
 * a batch.
 */
function malformed(message: { key?: unknown; value?: unknown; headers: Record<string, unknown> }): string | undefined {
  const headers = message.headers
  if ('operation' in headers) {
    if (!OPERATIONS.has(headers.operation as string)) return 'unknown operation'
    if (typeof message.key !== 'string') return 'key is not a string'
    if (!isValues(message.value)) return 'value is not an object'
    if (!optionalArray(headers.txids) || !optionalArray(headers.tags) || !optionalArray(headers.removed_tags) || !optionalArray(headers.active_conditions)) {
      return 'txids, tags, removed_tags or active_conditions is not an array'
    }
    return undefined
  }
  if ('control' in headers) {
    if (typeof headers.control !== 'string') return 'control is not a string'
    if (headers.control !== 'snapshot-end') return undefined
    const xip = headers.xip_list
    if (!isXid8(headers.xmin) || !isXid8(headers.xmax) || !Array.isArray(xip) || !xip.every(isXid8)) return 'xmin, xmax or xip_list is not a decimal xid8'
    return undefined
  }
  if ('event' in headers) {
    const patterns = headers.patterns
    if (!Array.isArray(patterns) || !patterns.every(isPattern)) return 'patterns is not a list of {pos, value}'
    if (!optionalArray(headers.txids)) return 'txids is not an array'
  }
  return undefined
}

function optionalArray(value: unknown): boolean {
  return value === undefined || Array.isArray(value)
}

function isXid8(value: unknown): boolean {
  return typeof value === 'string' && XID8.test(value)
}

function isPattern(value: unknown): boolean {
  return typeof value === 'object' && value !== null && Number.isInteger((value as { pos?: unknown }).pos) && typeof (value as { value?: unknown }).value === 'string'
}

function isValues(value: unknown): value is Record<string, string | null> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
