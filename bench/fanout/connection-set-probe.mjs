// What the HTTP app's set of open connections (app.ts `openConnections`: one Set entry and one shared
// 'close' listener per connection) costs in V8 heap: 10,000 idle connections to a bare node:http server,
// with and without the same tracking, heap after full collections, per connection. Both ends live in
// this process, so the absolute figure counts each connection twice; the difference between the two
// runs is the tracking's alone.
//
//   node --expose-gc bench/fanout/connection-set-probe.mjs plain
//   node --expose-gc bench/fanout/connection-set-probe.mjs track
import http from 'node:http'
import net from 'node:net'

const track = process.argv[2] === 'track'
const count = Number(process.argv[3] ?? 10_000)
if (typeof globalThis.gc !== 'function') throw new Error('run with node --expose-gc')
const server = http.createServer(() => {})
if (track) {
  const open = new Set()
  function forget() {
    open.delete(this)
  }
  server.on('connection', (socket) => {
    open.add(socket)
    socket.on('close', forget)
  })
}
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
const { port } = server.address()
globalThis.gc()
const before = process.memoryUsage().heapUsed
const clients = []
for (let i = 0; i < count; i++) {
  clients.push(net.connect(port, '127.0.0.1'))
  if (i % 500 === 499) await new Promise((resolve) => setTimeout(resolve, 20))
}
await new Promise((resolve) => setTimeout(resolve, 1500))
globalThis.gc()
globalThis.gc()
const after = process.memoryUsage().heapUsed
console.log(`${track ? 'tracked' : 'plain'}: ${((after - before) / count).toFixed(0)} bytes of V8 heap per connection (both ends), ${count} connections`)
process.exit(0)
