/**
 * The server's restore phases alone, in one process, on a copy of a store's
 * heads file (written at a clean stop: `cp <store>/logs/heads /tmp/heads`):
 * decoding the heads file, the shape metas, rebuilding the registry, reviving
 * each shape (compiling its where clause against a stand-in of the bench's
 * `start_items` table) and adding it to a router. Prints each phase's CPU time
 * and the heap after a full collection. Reads nothing else and writes nothing,
 * so two checkouts can be compared on the same file, alternately, without
 * Postgres:
 *
 *   node --expose-gc bench/start/restore-phases.mjs <checkout> <heads file>
 *
 * Uses the checkout's dist/ (build it first). Not a benchmark of the suite: a
 * probe for changes to the restore path, steadier than a whole start on a
 * shared machine.
 */
import { readFileSync } from 'node:fs'

const [root, headsPath] = process.argv.slice(2)
const imp = (p) => import(`${root}/packages/${p}`)
const { decodeHeads } = await imp('storage/dist/file/heads-file.js')
const { ShapeRegistry, decodeShapeMeta } = await imp('server/dist/shapes/definition/index.js')
const { revive, RestoreRoutes } = await imp('server/dist/shapes/restore-shapes.js')
const { ShapeRouter } = await imp('server/dist/shapes/router.js')
const { routeSpec } = await imp('server/dist/shapes/live-shape.js')
const { loadWhereParser } = await imp('server/dist/where/index.js')
await loadWhereParser()

const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000 }
const out = {}
let t = cpu()
const lap = (name) => { const n = cpu(); out[name] = Math.round(n - t); t = n }
const buf = readFileSync(headsPath)
const logs = decodeHeads(buf, buf.readBigUInt64LE(16))
lap('decodeHeads')
const stored = []
// The heads file gives each meta as a string of one character per byte, as the log keeps it (metaText).
for (const [, l] of logs) stored.push({ meta: decodeShapeMeta(l.meta), log: { id: l.id } })
lap('decodeMeta')
const registry = ShapeRegistry.restore(stored.map((s) => s.meta))
lap('registry')
const col = (name, attnum, typeOid, typeName) => ({ name, attnum, typeOid, typeMod: -1, typeName, dims: 0, notNull: true, typeCategory: typeName === 'int4' ? 'N' : 'S' })
const info = { oid: 16384, schema: 'public', name: 'start_items', kind: 'r', replicaIdentity: 'full', columns: [col('id', 1, 23, 'int4'), col('title', 2, 25, 'text')], primaryKey: ['id'] }
const revived = []
const routes = new RestoreRoutes()
for (const s of stored) { if (registry.status(s.meta.handle) !== 'active') continue; const r = revive(s, info, 1n << 60n, routes); if (r.problem) throw new Error(r.problem); revived.push(r) }
lap('revive')
const router = new ShapeRouter({ advance() {}, invalidate: async () => {} })
for (const r of revived) router.add(routeSpec(r.shape), r.target)
lap('router')
globalThis.gc?.()
const mem = process.memoryUsage()
console.log(JSON.stringify({ ...out, total: Object.values(out).reduce((a, b) => a + b, 0), heapMiB: Math.round(mem.heapUsed / 1048576), shapes: revived.length }))
