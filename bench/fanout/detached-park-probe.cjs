'use strict'
/**
 * What a parked long-poll would cost outside node:http, and what waking it
 * would then cost (issue 31, item 3: "about 4 KB per parked request").
 *
 * Not Sluice code: a probe of Node's own HTTP server, run with plain `node`.
 * Each mode is a server process of its own that parks N keep-alive GETs (with
 * a browser's headers), reports its RSS and V8 heap per parked request after
 * a full collection, then wakes all of them with one small 200 and reports
 * how long until the last client has its response.
 *
 *   net      a bare net.Server keeping the sockets (no HTTP at all): the floor
 *            of any Node TCP connection; it is never woken
 *   http     node:http keeps each request and response until the wake (what
 *            Sluice does, minus fastify and Sluice's own objects)
 *   reparse  each socket taken back from node:http as soon as its request is
 *            parsed (listeners removed, the parser unconsumed and closed, the
 *            request and response dropped), keeping the socket and the
 *            request's head; woken by handing the socket back to the server
 *            and feeding it the head again, so the request is parsed and
 *            routed a second time and answered by the ordinary handler
 *   raw      taken back the same way; woken by writing a ready-made response
 *            on the socket (a second response writer beside node:http's),
 *            then handing the socket back for its next request
 *
 * The detaching modes use Node internals (`socket.parser`, `unconsume`, the
 * `_consumed` flags, `parser.close`), as node:http's own upgrade path does;
 * a wrong order of those calls aborts the process. They show what the
 * target would take, not something to ship.
 *
 *   node bench/fanout/detached-park-probe.cjs [N=10000] [modes=net,http,reparse,raw] [reps=2]
 */
const { fork } = require('node:child_process')
const http = require('node:http')
const net = require('node:net')

const HEAD =
  'GET /v1/shape?table=items&offset=0_0&handle=1234-5678&live=true&cursor=12345 HTTP/1.1\r\n' +
  'Host: localhost:3000\r\nAccept: */*\r\n' +
  'User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36\r\n' +
  'Accept-Encoding: gzip, deflate, br\r\nOrigin: http://localhost:5173\r\nReferer: http://localhost:5173/\r\n' +
  'Accept-Language: en-US,en;q=0.9\r\n\r\n'

if (process.argv[2] === '--server') serve(process.argv[3])
else main().catch((error) => {
  console.error(error)
  process.exit(1)
})

function serve(mode) {
  const body = Buffer.from('[{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1"},"headers":{"operation":"update"}},{"headers":{"control":"up-to-date"}}]')
  const headers = { 'content-type': 'application/json', 'cache-control': 'public, max-age=5', 'electric-handle': '1234-5678', 'electric-offset': '1_0', 'electric-cursor': '123', 'electric-up-to-date': '', etag: '"1234-5678:0_0:1_0"' }
  const rawHead = `HTTP/1.1 200 OK\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}content-length: ${body.length}\r\n\r\n`
  const woken = Symbol('woken')
  const parked = []
  const ignore = () => {}

  const detach = (req) => {
    const socket = req.socket
    const parser = socket.parser
    const head = `${req.method} ${req.url} HTTP/1.1\r\n${req.rawHeaders.map((v, i) => (i % 2 === 0 ? `${v}: ` : `${v}\r\n`)).join('')}\r\n`
    for (const event of ['data', 'end', 'close', 'drain', 'error', 'timeout', 'pause', 'resume']) socket.removeAllListeners(event)
    if (parser._consumed) parser.unconsume()
    parser._consumed = false
    socket._handle._consumed = false
    parser.onIncoming = null
    parser.socket = null
    parser.incoming = null
    parser.outgoing = null
    parser.remove()
    parser.free()
    // Closing it within its own execute() (this handler runs inside it) aborts the process.
    setImmediate(() => parser.close())
    socket.parser = null
    socket._httpMessage = null
    socket.on = net.Socket.prototype.on
    socket.addListener = net.Socket.prototype.addListener
    socket.prependListener = net.Socket.prototype.prependListener
    socket.on('data', ignore)
    socket.on('close', ignore)
    socket.on('error', ignore)
    parked.push({ socket, head })
  }
  const reattach = (socket) => {
    socket.removeListener('data', ignore)
    socket.removeListener('close', ignore)
    socket.removeListener('error', ignore)
    server.emit('connection', socket)
  }

  const server =
    mode === 'net'
      ? net.createServer((socket) => {
          socket.on('data', ignore)
          socket.on('error', ignore)
          parked.push(socket)
        })
      : http.createServer((req, res) => {
          if (req.socket[woken]) {
            req.socket[woken] = false
            res.writeHead(200, headers).end(body)
          } else if (mode === 'http') parked.push(res)
          else detach(req)
        })
  if (mode !== 'net') {
    server.keepAliveTimeout = 0
    server.requestTimeout = 0
    server.headersTimeout = 0
  }
  server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }))
  process.on('message', (message) => {
    if (message === 'measure') {
      globalThis.gc()
      globalThis.gc()
      const { rss, heapUsed } = process.memoryUsage()
      process.send({ rss, heapUsed, parked: parked.length })
    } else if (message === 'wake') {
      const list = parked.splice(0)
      if (mode === 'http') for (const res of list) res.writeHead(200, headers).end(body)
      else if (mode === 'raw') {
        for (const { socket } of list) {
          socket.cork()
          socket.write(rawHead, 'latin1')
          socket.write(body)
          socket.uncork()
          reattach(socket)
        }
      } else if (mode === 'reparse') {
        for (const { socket, head } of list) {
          socket[woken] = true
          reattach(socket)
          socket.emit('data', Buffer.from(head, 'latin1'))
        }
      }
      process.send({ woken: list.length })
    }
  })
}

async function run(mode, n) {
  const server = fork(__filename, ['--server', mode], { execArgv: ['--expose-gc'] })
  const exited = new Promise((resolve) => server.once('exit', (code, signal) => resolve(signal ?? code)))
  const ask = (message) =>
    Promise.race([
      new Promise((resolve) => {
        server.once('message', resolve)
        if (message !== undefined) server.send(message)
      }),
      exited.then((how) => {
        throw new Error(`the ${mode} server exited (${how})`)
      }),
    ])
  const { port } = await ask()
  const sockets = []
  let answered = 0
  let lastAnswer = 0
  const open = async (count) => {
    for (let i = 0; i < count; i++) {
      const socket = net.connect(port, '127.0.0.1')
      socket.on('error', () => {})
      socket.on('data', (chunk) => {
        if (chunk.includes('HTTP/1.1 200')) {
          answered++
          lastAnswer = performance.now()
        }
      })
      socket.write(HEAD)
      sockets.push(socket)
      if (i % 500 === 499) await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
  try {
    // A few hundred first, so code compiled and pools filled are in the "before" figure.
    await open(200)
    await new Promise((resolve) => setTimeout(resolve, 500))
    const before = await ask('measure')
    await open(n)
    await new Promise((resolve) => setTimeout(resolve, 2000))
    const after = await ask('measure')
    const row = {
      mode,
      parked: after.parked,
      rssKiB: (after.rss - before.rss) / n / 1024,
      heapKiB: (after.heapUsed - before.heapUsed) / n / 1024,
      wakeMs: undefined,
    }
    if (mode !== 'net') {
      const started = performance.now()
      await ask('wake')
      while (answered < n + 200 && performance.now() - started < 30_000) await new Promise((resolve) => setTimeout(resolve, 2))
      if (answered < n + 200) throw new Error(`${mode}: ${answered} of ${n + 200} answered`)
      row.wakeMs = lastAnswer - started
    }
    return row
  } finally {
    for (const socket of sockets) socket.destroy()
    server.kill()
  }
}

async function main() {
  const n = Number(process.argv[2] ?? 10_000)
  const modes = (process.argv[3] ?? 'net,http,reparse,raw').split(',')
  const reps = Number(process.argv[4] ?? 2)
  console.log(`${n} parked keep-alive GETs per server, Node ${process.version}; per parked request after a full collection`)
  console.log('mode     rep  RSS KiB  heap KiB  wake of all (ms)')
  for (let rep = 1; rep <= reps; rep++) {
    for (const mode of modes) {
      const row = await run(mode, n)
      console.log(`${mode.padEnd(8)} ${String(rep).padStart(3)}  ${row.rssKiB.toFixed(2).padStart(7)}  ${row.heapKiB.toFixed(2).padStart(8)}  ${row.wakeMs === undefined ? '-' : row.wakeMs.toFixed(0)}`)
    }
  }
}
