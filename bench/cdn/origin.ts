/**
 * The origin of the CDN benchmark, in a process of its own: the whole Sluice
 * server as `sluice start` builds it (`createServer` from @sluice/server, the
 * same config schema), plus a listener on its HTTP server's `request` event
 * that counts every request reaching the origin by its URL. The counting
 * listener runs beside fastify's and changes nothing it answers.
 *
 * Commands: `start {databaseUrl, storageDir, flags}` -> {url, pid};
 * `counts {}` -> requests per URL since the last `reset`; `responses {}` ->
 * finished responses per `<status> <URL>`; `reset {}`;
 * `stop {}`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { createServer, loadConfig, type SluiceServer } from '@sluice/server'
import { serveCommands } from '../http/json-lines.js'
import { RequestCounts } from './request-counts.js'

let server: SluiceServer | undefined
const seen = new RequestCounts()

async function start(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const flags = (args.flags as string[]) ?? []
  const config = loadConfig(
    ['--database-url', String(args.databaseUrl), '--storage-dir', String(args.storageDir), '--port', '0', '--host', '127.0.0.1', ...flags],
    {},
  )
  server = await createServer(config)
  server.app.server.on('request', (req: IncomingMessage, res: ServerResponse) => seen.count(req, res))
  return { url: server.url, pid: process.pid }
}

async function stop(): Promise<void> {
  await server?.close()
  server = undefined
}

serveCommands({ start, counts: () => seen.counts(), responses: () => seen.responses(), reset: () => seen.reset(), stop })
