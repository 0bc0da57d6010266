import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * A real HTTP server that answers shape requests with bodies a test hands it,
 * byte for byte, in order: for feeding a client the exact wire lines of a
 * protocol document (a server that produces them may not exist yet). A
 * request that comes before its answer is held, as a live long-poll is.
 */

export interface ScriptedResponse {
  /** The body's JSON lines, joined into the array the wire carries. */
  readonly lines?: readonly string[]
  readonly status?: number
  readonly offset: string
  /** Defaults to the server's handle; a 409 names the new one. */
  readonly handle?: string
}

export class ScriptedShapeServer {
  readonly requests: URL[] = []
  readonly #queue: ScriptedResponse[] = []
  readonly #held: ServerResponse[] = []
  readonly #waiters: Array<{ sent: number; resolve: () => void }> = []
  #pushed = 0
  #sent = 0

  private constructor(
    readonly server: Server,
    readonly url: string,
    readonly handle: string,
    readonly schema: string,
  ) {}

  static async start(handle: string, schema: Record<string, unknown>): Promise<ScriptedShapeServer> {
    let self: ScriptedShapeServer | undefined
    const server = createServer((req, res) => self!.#onRequest(req, res))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const port = (server.address() as AddressInfo).port
    self = new ScriptedShapeServer(server, `http://127.0.0.1:${port}/v1/shape`, handle, JSON.stringify(schema))
    return self
  }

  /**
   * Queues responses and resolves once a request arrives after the last of
   * them was sent: the last ends in up-to-date (or is a 409), after which the
   * client asks again only once it has applied everything before.
   */
  async step(...responses: ScriptedResponse[]): Promise<void> {
    for (const response of responses) {
      this.#pushed++
      const held = this.#held.shift()
      if (held === undefined) this.#queue.push(response)
      else this.#send(held, response)
    }
    const sent = this.#pushed
    await new Promise<void>((resolve) => this.#waiters.push({ sent, resolve }))
  }

  /** Resolves once no request is held: a client that stopped has closed its connection. */
  async untilNoneHeld(): Promise<void> {
    while (this.#held.length > 0) await new Promise((resolve) => setTimeout(resolve, 5))
  }

  async close(): Promise<void> {
    for (const res of this.#held.splice(0)) res.destroy()
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }

  #onRequest(req: IncomingMessage, res: ServerResponse): void {
    this.requests.push(new URL(req.url ?? '/', this.url))
    for (const waiter of this.#waiters.filter((w) => this.#sent >= w.sent)) {
      this.#waiters.splice(this.#waiters.indexOf(waiter), 1)
      waiter.resolve()
    }
    const next = this.#queue.shift()
    if (next !== undefined) return this.#send(res, next)
    this.#held.push(res)
    // A client that gave up on a held request (stopped, or its watchdog) gets no later answer.
    res.on('close', () => {
      const at = this.#held.indexOf(res)
      if (at >= 0) this.#held.splice(at, 1)
    })
  }

  #send(res: ServerResponse, response: ScriptedResponse): void {
    this.#sent++
    const lines = response.lines ?? []
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'electric-handle': response.handle ?? this.handle,
      'electric-offset': response.offset,
      'electric-schema': this.schema,
      'electric-cursor': '1',
    }
    if (lines.at(-1)?.includes('"control":"up-to-date"') === true) headers['electric-up-to-date'] = ''
    res.writeHead(response.status ?? 200, headers)
    res.end(response.status === 409 ? '[{"headers":{"control":"must-refetch"}}]' : `[${lines.join(',')}]`)
  }
}
