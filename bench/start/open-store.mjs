/**
 * The store's open alone after a clean stop, with the addon's batched stat
 * (`statFiles`, on the thread pool while the heads file is decoded) and with a
 * `statSync` per file, alternately, on one store (a copy of the start
 * benchmark's 100k store, e.g. `cp -a <fixture>/store-100000 /tmp/s`): each
 * round opens and closes it once each way (the close writes the heads file
 * again, so every open is a clean one). Prints each open's wall and CPU time.
 *
 *   node bench/start/open-store.mjs <checkout> <store dir> [rounds]
 *
 * Uses the checkout's dist/ (build it first). A probe for the stat change, not
 * a benchmark of the suite.
 */
const [root, storeDir, roundsArg] = process.argv.slice(2)
const rounds = Number(roundsArg ?? 3)
const { openFileLogStore } = await import(`${root}/packages/storage/dist/index.js`)
const { loadSendfile } = await import(`${root}/packages/sendfile/dist/index.js`)
const loaded = loadSendfile()
if (!loaded.available || loaded.sendfile.statFiles === undefined) throw new Error('the addon with statFiles is needed')
const lock = { lockFile: loaded.sendfile.lockFile, waitMs: 10_000 }
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000 }

async function once(batched) {
  const w0 = performance.now()
  const c0 = cpu()
  const store = await openFileLogStore({ dir: `${storeDir}/logs`, lock, ...(batched ? { statFiles: loaded.sendfile.statFiles } : {}) })
  const wall = performance.now() - w0
  const used = cpu() - c0
  const logs = store.size
  const clean = store.cleanOpened
  await store.close()
  return { way: batched ? 'statFiles' : 'statSync', wallMs: Math.round(wall), cpuMs: Math.round(used), logs, clean }
}

for (let r = 1; r <= rounds; r++) {
  const order = r % 2 === 1 ? [true, false] : [false, true]
  for (const batched of order) console.log(JSON.stringify({ round: r, ...(await once(batched)), load: (await import('node:os')).loadavg()[0] }))
}
