/**
 * The first appends after a clean open: opens a store (a copy of the start
 * benchmark's 100k store, opened and closed once by the checkout so that its
 * heads file is that build's), then appends one transaction to every log,
 * three times over, with a flush after each pass. Prints the open's CPU and
 * each pass's. The first pass is where a log's fields that the open laid out
 * one way and an append writes another way cost a migration per log.
 *
 *   node bench/start/first-append.mjs <checkout> <store dir>
 *
 * Uses the checkout's dist/ (build it first). Writes to the store: use a copy.
 * A probe, not a benchmark of the suite.
 */
const [root, storeDir] = process.argv.slice(2)
const { openFileLogStore } = await import(`${root}/packages/storage/dist/index.js`)
const { loadSendfile } = await import(`${root}/packages/sendfile/dist/index.js`)
const loaded = loadSendfile()
if (!loaded.available) throw new Error('the addon is needed (its lock and batched stat)')
const lock = { lockFile: loaded.sendfile.lockFile, waitMs: 10_000 }
const cpu = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}

let t = cpu()
const store = await openFileLogStore({ dir: `${storeDir}/logs`, lock, statFiles: loaded.sendfile.statFiles, flushIntervalMs: 60_000, flushWhenIdle: false })
const out = { logs: store.size, openCpuMs: Math.round(cpu() - t) }
const logs = [...store.ids()].map((id) => store.get(id))
const json = new TextEncoder().encode('{"key":"\\"public\\".\\"t\\"/\\"1\\"","value":{"id":"1"},"headers":{"operation":"update"}}')
// Past the store's watermark, with a low half above 2^31 (what a busy server's LSNs have half the time).
let lsn = (((store.durableLsn >> 32n) + 1n) << 32n) + 0x9000_0000n
for (let pass = 0; pass < 3; pass++) {
  t = cpu()
  for (const log of logs) log.appendTransaction([{ offset: { tx: lsn, op: 0n }, json }])
  store.advance(lsn)
  out[`append${pass}CpuMs`] = Math.round(cpu() - t)
  await store.flush()
  lsn += 1000n
}
console.log(JSON.stringify(out))
await store.close()
