import type { ShapeSchema } from '@sluice/protocol'
import { InvalidResponseError, NetworkError } from './errors.js'
import { type Message, isChangeMessage } from './messages.js'
import { type ReadWatch, readSseEvents } from './sse-reader.js'
import type { Row } from './value-parser.js'

/**
 * Reading a response's parts: the schema header, the body as text or as SSE
 * events (a broken connection is the network failure it is, and is retried as
 * one), and the offset to resume an SSE stream after.
 */

export function parseSchema(text: string): ShapeSchema {
  try {
    const schema: unknown = JSON.parse(text)
    if (typeof schema === 'object' && schema !== null && !Array.isArray(schema)) return schema as ShapeSchema
  } catch {
    // Reported below.
  }
  throw new InvalidResponseError(`electric-schema header is not a JSON object: ${text.slice(0, 200)}`)
}

/** The SSE reader, with a broken connection reported as the network failure it is. */
export async function* sseEvents(body: ReadableStream<Uint8Array>, url: string, watch?: ReadWatch): AsyncGenerator<string, void, undefined> {
  try {
    yield* readSseEvents(body, watch)
  } catch (error) {
    throw new NetworkError(url, error)
  }
}

/**
 * The body as text, telling `watch` while it waits for the network (a live
 * answer's watchdog runs only then): read piece by piece, where `readText`
 * lets the runtime read it whole.
 */
export async function readTextWatched(response: Response, url: string, watch: ReadWatch): Promise<string> {
  const body = response.body
  if (body === null) return ''
  const reader = body.getReader()
  const decoder = new TextDecoder()
  const parts: string[] = []
  try {
    for (;;) {
      watch.waiting()
      const { done, value } = await reader.read()
      watch.got()
      if (done) break
      parts.push(decoder.decode(value, { stream: true }))
    }
    parts.push(decoder.decode())
    return parts.join('')
  } catch (error) {
    throw new NetworkError(url, error)
  } finally {
    reader.releaseLock()
  }
}

export async function readText(response: Response, url: string): Promise<string> {
  try {
    return await response.text()
  } catch (error) {
    // The connection broke mid-body: a network failure, retried like one.
    throw new NetworkError(url, error)
  }
}

/** `<lsn>_<op_position>` of the last change in a batch (the offset to resume after it). */
export function lastChangeOffset(batch: ReadonlyArray<Message<Row>>): string | undefined {
  for (let i = batch.length - 1; i >= 0; i--) {
    const message = batch[i]!
    if (!isChangeMessage(message)) continue
    const { lsn, op_position: op } = message.headers
    if (lsn !== undefined && op !== undefined) return `${lsn}_${op}`
  }
  return undefined
}
