import type { ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { FileSender, Sendfile } from '@sluice/sendfile'
import type { LogRead, Span } from '@sluice/storage'
import type { FastifyReply } from 'fastify'
import { type StalledSends, unsentWriteBytes } from './stalled-sends.js'

/**
 * The sendfile path for a shape response body (`log-body.ts` is the pread
 * path; the two give the same bytes). The body is laid out as in log-body.ts:
 *
 *   `[`  file spans (and any in-memory tail span) minus the last `,`  suffix
 *
 * where the suffix is `]`, or the up-to-date line and `]`. The status line,
 * headers (with an exact content-length: sendfile cannot be chunked or
 * compressed) and the `[` go through Node, and only once Node reports them
 * written does sendfile(2) touch the socket; from then until the last file span
 * is sent nothing else writes to it (in-memory spans go through Node between
 * sends, awaited one at a time). Node never learns about the bytes the kernel
 * sent, which is harmless: it only counts them with strictContentLength, and
 * this server sets no socket timeout for kernel progress to refresh. The
 * progress `StalledSends` watches is the bytes sent so far, the send in
 * progress included (`FileSender.remaining`), less what libuv still holds of
 * an in-memory span's write (written in pieces of at most SEND_PIECE_BYTES).
 */

const OPEN = Buffer.from('[')
const CLOSE = Buffer.from(']')

/** The largest single write of an in-memory span. */
export const SEND_PIECE_BYTES = 1024 * 1024

/** File-backed bytes of a read: what sendfile would send. */
export function fileBytes(read: LogRead): number {
  let n = 0
  for (const span of read.spans) if (span.kind === 'file') n += span.length
  return n
}

/** The spans of the body between `[` and the suffix: the stored bytes, less the last `,` when there is no tail. */
export function bodySpans(read: LogRead, withTail: boolean): Span[] {
  const spans = [...read.spans]
  if (withTail || read.byteLength === 0) return spans
  // The separator after the last entry is the last byte of the last non-empty span.
  for (let i = spans.length - 1; i >= 0; i--) {
    const span = spans[i]!
    const length = span.kind === 'file' ? span.length : span.bytes.length
    if (length === 0) continue
    if (length === 1) spans.splice(i, 1)
    else spans[i] = span.kind === 'file' ? { ...span, length: span.length - 1 } : { kind: 'bytes', bytes: span.bytes.subarray(0, span.bytes.length - 1) }
    break
  }
  return spans
}

/**
 * Whether `socket` can take this body by sendfile: not TLS, an open descriptor.
 * Asked of the request's socket, which a pipelined response is not attached to yet.
 */
export function canSendfile(sendfile: Sendfile, socket: Socket | null | undefined): boolean {
  return socket != null && sendfile.descriptorOf(socket) !== undefined
}

/**
 * Answers `reply` (status 200; every header but content-length already set)
 * with the body for `read` and `tail`, taking the reply over from fastify.
 * Releases `read` in every case. Resolves to the body's length once it is all
 * in the socket, or to the bytes known sent when the connection ended first
 * (the socket is then destroyed, so the client sees a cut body, never a wrong one).
 */
export async function sendfileBody(
  reply: FastifyReply,
  read: LogRead,
  tail: string | undefined,
  sendfile: Sendfile,
  stalled?: StalledSends,
): Promise<{ sent: number; complete: boolean }> {
  const suffix = tail === undefined ? CLOSE : Buffer.concat([Buffer.from(tail, 'utf8'), CLOSE])
  const spans = bodySpans(read, tail !== undefined)
  let length = OPEN.length + suffix.length
  for (const span of spans) length += span.kind === 'file' ? span.length : span.bytes.length

  const headers: Record<string, string | number | string[]> = {}
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (value !== undefined) headers[name] = value
  }
  headers['content-length'] = length
  reply.hijack()
  const res = reply.raw
  let sender: FileSender | undefined
  // A client gone mid-body: the send in progress is cancelled and the socket's duplicate closed now.
  const cancel = (): void => sender?.close()
  res.once('close', cancel)
  let sent = 0
  /** Bytes of the file send in progress, of which `sender.remaining()` are still to go. */
  let sending = 0
  try {
    res.writeHead(200, headers)
    // Headers and `[` in one write; once it is done Node has nothing queued for the socket.
    await written(res, OPEN)
    sent += OPEN.length
    for (const span of spans) {
      if (span.kind === 'bytes') {
        // Bytes of the log's unwritten tail (up to a chunk): in pieces, each counted once written.
        for (let done = 0; done < span.bytes.length; done += SEND_PIECE_BYTES) {
          const piece = span.bytes.subarray(done, done + SEND_PIECE_BYTES)
          await written(res, piece)
          sent += piece.length
        }
        continue
      }
      if (sender === undefined) {
        const socket = res.socket
        if (socket === null || res.destroyed) throw new Error('the connection closed')
        while (socket.writableLength > 0) await drained(res, socket)
        sender = sendfile.open(socket)
        // An addon built before sends reported their progress: its bodies are not watched (a slow client's
        // long send would look stalled).
        if (stalled !== undefined && sender.reportsProgress) {
          const watched = sender
          stalled.watch(res, () => sent + sending - watched.remaining() - unsentWriteBytes(res))
        }
      }
      sending = span.length
      await sender.send(span.fd, span.position, span.length)
      sending = 0
      sent += span.length
    }
    sender?.close()
    res.end(suffix)
    return { sent: sent + suffix.length, complete: true }
  } catch (error) {
    // Headers are out: all a failure can do is cut the connection.
    reply.request.log.debug({ err: error, sent, length }, 'sendfile body cut')
    res.destroy()
    return { sent, complete: false }
  } finally {
    res.off('close', cancel)
    sender?.close()
    read.release()
  }
}

/** Resolves once Node has handed `chunk` to the kernel; rejects if the connection closes first. */
function written(res: ServerResponse, chunk: Uint8Array): Promise<void> {
  return new Promise((resolve, reject) => {
    const onClose = (): void => reject(new Error('the connection closed'))
    res.once('close', onClose)
    res.write(chunk, (error) => {
      res.off('close', onClose)
      if (error) reject(error)
      else resolve()
    })
  })
}

function drained(res: ServerResponse, socket: Socket): Promise<void> {
  return new Promise((resolve, reject) => {
    const onClose = (): void => {
      socket.off('drain', onDrain)
      reject(new Error('the connection closed'))
    }
    const onDrain = (): void => {
      res.off('close', onClose)
      resolve()
    }
    res.once('close', onClose)
    socket.once('drain', onDrain)
  })
}
