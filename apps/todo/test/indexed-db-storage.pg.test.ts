/**
 * `@sluice/client`'s IndexedDB shape storage in a real browser (Node has no
 * IndexedDB): the adapter's own module, compiled from its source and served
 * from a real origin, saves and loads persisted shapes through Debian's
 * Chromium, and what it saved is still there after a page reload.
 */
import { readFileSync } from 'node:fs'
import { type Server, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { CHROMIUM_ARGS, findChromium } from '@sluice/test-utils'
import { type Browser, chromium } from 'playwright-core'
import { transformWithEsbuild } from 'vite'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

const CLIENT_SOURCES = fileURLToPath(new URL('../../../packages/client/src/', import.meta.url))
/** The adapter and the one module it imports at run time (its error classes); the rest of its imports are types. */
const MODULES = ['indexed-db', 'errors']

const PAGE = `<!doctype html><meta charset="utf-8"><title>idb</title>
<script type="module">
  import { IndexedDbShapeStorage } from '/indexed-db.js'
  window.IndexedDbShapeStorage = IndexedDbShapeStorage
  window.adapterReady = true
</script>`

let server: Server
let origin: string
let browser: Browser

beforeAll(async () => {
  // Each module compiled on its own and served at /<name>.js, where the adapter's relative import finds it.
  const compiled = new Map<string, string>()
  for (const name of MODULES) {
    const file = join(CLIENT_SOURCES, `${name}.ts`)
    compiled.set(`/${name}.js`, (await transformWithEsbuild(readFileSync(file, 'utf8'), file, { format: 'esm', target: 'es2022' })).code)
  }
  server = createServer((req, res) => {
    const code = compiled.get(req.url ?? '')
    if (code !== undefined) {
      res.writeHead(200, { 'content-type': 'text/javascript' }).end(code)
      return
    }
    res.writeHead(200, { 'content-type': 'text/html' }).end(PAGE)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const binary = await findChromium()
  browser = await chromium.launch({ executablePath: binary.path, args: [...CHROMIUM_ARGS] })
}, 180_000)

afterAll(async () => {
  await browser?.close()
  await new Promise((resolve) => server?.close(resolve))
})

describe('IndexedDbShapeStorage in Chromium', () => {
  it('saves and loads shapes with bigint, NaN, Infinity, dates and nested JSON intact, across a reload; remove deletes one key only', async () => {
    const context = await browser.newContext()
    const page = await context.newPage()
    await page.goto(origin)
    await page.waitForFunction(() => (window as unknown as { adapterReady?: boolean }).adapterReady === true)

    const saved = await page.evaluate(async () => {
      const Storage = (window as unknown as { IndexedDbShapeStorage: new (o?: object) => { save(k: string, s: unknown): Promise<void>; load(k: string): Promise<unknown>; close(): Promise<void> } }).IndexedDbShapeStorage
      const storage = new Storage({ databaseName: 'sluice-test' })
      const shape = {
        version: 1,
        handle: '1234-5678',
        offset: '26800584_4',
        schema: { id: { type: 'int8', pk_index: 0, not_null: true }, doc: { type: 'jsonb' } },
        rows: [
          ['"public"."t"/"1"', { id: 1n, f: Number.NaN, g: Number.POSITIVE_INFINITY, at: new Date(Date.UTC(2026, 10, 22)), doc: { a: [1, { b: null }] } }],
          ['"public"."t"/"2"', { id: 2n, f: -0.5, g: Number.NEGATIVE_INFINITY, at: null, doc: 'text' }],
        ],
        savedAt: 1795391831292,
      }
      await storage.save('shape-a', shape)
      await storage.save('shape-b', { ...shape, handle: 'other', rows: [] })
      const back = (await storage.load('shape-a')) as typeof shape
      await storage.close()
      const row1 = back.rows[0]![1] as Record<string, unknown>
      return {
        handle: back.handle,
        offset: back.offset,
        keys: back.rows.map(([k]) => k),
        id1: typeof row1['id'] === 'bigint' ? String(row1['id']) : 'not a bigint',
        nan: Number.isNaN(row1['f']),
        inf: row1['g'] === Number.POSITIVE_INFINITY,
        date: (row1['at'] as Date).toISOString(),
        doc: JSON.stringify(row1['doc']),
      }
    })
    expect(saved).toEqual({
      handle: '1234-5678',
      offset: '26800584_4',
      keys: ['"public"."t"/"1"', '"public"."t"/"2"'],
      id1: '1',
      nan: true,
      inf: true,
      date: '2026-11-22T00:00:00.000Z',
      doc: '{"a":[1,{"b":null}]}',
    })

    // A reloaded page (what a user's refresh does) finds both shapes; remove takes one and leaves the other.
    await page.reload()
    await page.waitForFunction(() => (window as unknown as { adapterReady?: boolean }).adapterReady === true)
    const afterReload = await page.evaluate(async () => {
      const Storage = (window as unknown as { IndexedDbShapeStorage: new (o?: object) => { load(k: string): Promise<unknown>; remove(k: string): Promise<void>; close(): Promise<void> } }).IndexedDbShapeStorage
      const storage = new Storage({ databaseName: 'sluice-test' })
      const a = (await storage.load('shape-a')) as { handle: string; rows: [string, { id: bigint; g: number }][] } | undefined
      await storage.remove('shape-a')
      const removed = await storage.load('shape-a')
      const b = (await storage.load('shape-b')) as { handle: string } | undefined
      const missing = await storage.load('never-saved')
      await storage.close()
      return {
        aHandle: a?.handle,
        aId2: a === undefined ? undefined : String(a.rows[1]![1].id),
        aNegInf: a?.rows[1]![1].g === Number.NEGATIVE_INFINITY,
        removed: removed === undefined,
        bHandle: b?.handle,
        missing: missing === undefined,
      }
    })
    expect(afterReload).toEqual({ aHandle: '1234-5678', aId2: '2', aNegInf: true, removed: true, bHandle: 'other', missing: true })

    // Another origin's page cannot see them (IndexedDB is per origin): the adapter keeps nothing outside the browser's store.
    const other = await context.newPage()
    await other.goto(origin.replace('127.0.0.1', 'localhost'))
    await other.waitForFunction(() => (window as unknown as { adapterReady?: boolean }).adapterReady === true)
    const elsewhere = await other.evaluate(async () => {
      const Storage = (window as unknown as { IndexedDbShapeStorage: new (o?: object) => { load(k: string): Promise<unknown>; close(): Promise<void> } }).IndexedDbShapeStorage
      const storage = new Storage({ databaseName: 'sluice-test' })
      const b = await storage.load('shape-b')
      await storage.close()
      return b === undefined
    })
    expect(elsewhere).toBe(true)
    await context.close()
  }, 120_000)
})
