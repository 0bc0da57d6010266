/**
 * The store's open after a crash: a child process opens the store, appends a
 * transaction to `touch` of its logs, flushes and exits without closing (as a
 * kill -9 would leave it); then another child times the open that follows,
 * and exits the same way, so rounds can be repeated on one store. Run it on a
 * copy of the start benchmark's 100k store (`cp -a <fixture>/store-100000 /tmp/s`).
 * Prints each open's wall and CPU time and how many logs came from the heads
 * file (the rest were scanned).
 *
 *   node bench/start/crash-open.mjs <checkout> <store dir> [touch] [rounds]
 *
 * Uses the checkout's dist/ (build it first). A probe, not a benchmark of the suite.
 */
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const [root, storeDir, touchArg, roundsArg, role] = process.argv.slice(2)
const touch = Number(touchArg ?? 1000)
const rounds = Number(roundsArg ?? 3)

async function open() {
  const { openFileLogStore } = await import(`${root}/packages/storage/dist/index.js`)
  const { loadSendfile } = await import(`${root}/packages/sendfile/dist/index.js`)
  const { sendfile } = loadSendfile()
  const cpu = () => {
    const u = process.cpuUsage()
    return (u.user + u.system) / 1000
  }
  const w0 = performance.now()
  const c0 = cpu()
  const store = await openFileLogStore({ dir: `${storeDir}/logs`, lock: { lockFile: sendfile.lockFile, waitMs: 10_000 }, statFiles: sendfile.statFiles, headsIntervalMs: 0 })
  return { store, wallMs: Math.round(performance.now() - w0), cpuMs: Math.round(cpu() - c0) }
}

if (role === 'append') {
  const { store } = await open()
  const ids = store.ids()
  const tx = store.durableLsn + 1000n
  const enc = new TextEncoder()
  for (let i = 0; i < touch; i++) {
    const json = enc.encode(JSON.stringify({ key: `"public"."start_items"/"${i}"`, value: { id: String(i) }, headers: { operation: 'update' } }))
    store.get(ids[(i * 97) % ids.length]).appendTransaction([{ offset: { tx, op: 0n }, json }])
  }
  store.advance(tx)
  await store.flush()
  process.exit(0)
} else if (role === 'open') {
  const { store, wallMs, cpuMs } = await open()
  console.log(JSON.stringify({ wallMs, cpuMs, logs: store.size, fromHeads: store.cleanOpened }))
  process.exit(0)
} else {
  const self = fileURLToPath(import.meta.url)
  const child = (r) => {
    const out = spawnSync(process.execPath, [self, root, storeDir, String(touch), '1', r], { encoding: 'utf8' })
    if (out.status !== 0) throw new Error(`${r} failed: ${out.stderr}`)
    return out.stdout.trim()
  }
  for (let r = 1; r <= rounds; r++) {
    child('append')
    console.log(JSON.stringify({ round: r, touched: touch, ...JSON.parse(child('open')) }))
  }
}
