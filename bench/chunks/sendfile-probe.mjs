// The sendfile addon against Node's own socket.write, with nothing else on the path: a server process sends
// one 10 MiB range (from a file with the addon, or from a Buffer already in memory with socket.write) each
// time its client, a child process on loopback, asks with one byte; the client asks again once it has the
// whole range. Prints ranges per second, the server's CPU, and the addon's sendfile calls and bursts.
// Not a benchmark of Sluice (no HTTP, no store): a probe of the addon's own cost.
//
//   pnpm --filter @sluice/sendfile run build   # the addon's dist/
//   node bench/chunks/sendfile-probe.mjs sendfile 200
//   node bench/chunks/sendfile-probe.mjs write 200
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { openSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { connect, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const SIZE = 10 * 1024 * 1024
const [mode, countText, portText] = process.argv.slice(2)
const count = Number(countText ?? 200)

if (mode === 'client') {
  const socket = connect(Number(portText), '127.0.0.1')
  let got = 0
  let done = 0
  const started = process.hrtime.bigint()
  socket.on('connect', () => socket.write('x'))
  socket.on('data', (chunk) => {
    got += chunk.length
    while (got >= SIZE) {
      got -= SIZE
      if (++done === count) {
        const ms = Number(process.hrtime.bigint() - started) / 1e6
        process.stdout.write(`${((count / ms) * 1000).toFixed(1)}`)
        process.exit(0)
      }
      socket.write('x')
    }
  })
} else {
  if (mode !== 'sendfile' && mode !== 'write') throw new Error('usage: sendfile-probe.mjs <sendfile|write> [count]')
  const { loadSendfile } = await import('../../packages/sendfile/dist/index.js')
  const load = loadSendfile()
  if (!load.available) throw new Error(`the sendfile addon is not available: ${load.reason}`)
  const sendfile = load.sendfile
  const path = join(tmpdir(), `sluice-sendfile-probe-${process.pid}`)
  writeFileSync(path, randomBytes(SIZE))
  const fd = openSync(path, 'r')
  const bytes = readFileSync(path)
  const server = createServer((socket) => {
    socket.on('data', async () => {
      if (mode === 'write') {
        socket.write(bytes)
        return
      }
      const sender = sendfile.open(socket)
      try {
        await sender.send(fd, 0, SIZE)
      } finally {
        sender.close()
      }
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const before = sendfile.stats()
  const cpuBefore = process.cpuUsage()
  const client = spawn(process.execPath, [fileURLToPath(import.meta.url), 'client', String(count), String(server.address().port)], { stdio: ['ignore', 'pipe', 'inherit'] })
  let rate = ''
  client.stdout.on('data', (d) => (rate += d))
  client.on('exit', () => {
    const after = sendfile.stats()
    const cpu = process.cpuUsage(cpuBefore)
    const gb = (count * SIZE) / 1e9
    console.log(
      `${mode}: ${rate} ranges of 10 MiB per s; server CPU ${((cpu.user + cpu.system) / 1e6 / gb).toFixed(2)} s/GB; ` +
        `sendfile calls ${after.calls - before.calls}, bursts on the loop ${after.loopBursts - before.loopBursts}, on the pool ${after.poolBursts - before.poolBursts}`,
    )
    rmSync(path, { force: true })
    process.exit(0)
  })
}
