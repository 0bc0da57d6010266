// The browser flows of the todo app, written
// once and run twice: with the app reading shapes from Sluice directly, and
// through nginx as a caching CDN in front of it (item 12).
import { mkdirSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import type { BrowserContext } from 'playwright-core'
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest'
import { type Stack, startStack } from './stack.js'
import { TodoPage, timeUntil } from './todo-page.js'

const RESULTS_DIR = fileURLToPath(new URL('../test-results/', import.meta.url))
/** The bound for a change in one browser to show in another. */
const PROPAGATION_BOUND_MS = 1_000
/**
 * Each change is timed this many times and the median must be within the bound: one sample can be
 * delayed by a scheduling hiccup on a shared two-core machine, a slow path shows in every round.
 */
const PROPAGATION_ROUNDS = 3
/** How long the offline page is watched for changes it must not get: several times the propagation bound. */
const OFFLINE_QUIET_MS = 3_000

export interface FlowOptions {
  readonly viaNginx: boolean
  /** Write test-results/todo.png (item 13). */
  readonly screenshot: boolean
}

let unique = 0
/** Names no other test uses, so tests sharing one database never see each other's rows. */
const named = (base: string): string => `${base} ${++unique}`

function median(values: readonly number[]): number {
  const sorted = [...values].sort((x, y) => x - y)
  return sorted[Math.floor(sorted.length / 2)]!
}

function offsetOf(url: string): string | null {
  return new URL(url).searchParams.get('offset')
}

export function defineFlows(label: string, options: FlowOptions): void {
  describe(label, () => {
    let stack: Stack
    const contexts: BrowserContext[] = []
    /** Medians, reported and asserted. */
    const figures: Record<string, number> = {}
    /** Every sample, reported. */
    const propagation: Record<string, number[]> = {}
    /** Reported, not asserted: they depend on the client's retry backoff. */
    const recovery: Record<string, number> = {}

    beforeAll(async () => {
      stack = await startStack({ appDir: inject('appDir'), viaNginx: options.viaNginx })
    })

    afterEach(async () => {
      for (const context of contexts.splice(0)) await context.close()
    })

    afterAll(async () => {
      if (Object.keys(figures).length + Object.keys(recovery).length > 0) {
        const line = (record: Record<string, number>) =>
          Object.entries(record)
            .map(([what, ms]) => `${what} ${ms}`)
            .join(', ')
        const all = Object.entries(propagation)
          .map(([what, values]) => `${what} ${values.join('/')}`)
          .join(', ')
        console.log(`propagation between browsers (${label}), ms: ${all} (medians ${line(figures)}); recovery, ms: ${line(recovery)}`)
        mkdirSync(RESULTS_DIR, { recursive: true })
        const file = `${RESULTS_DIR}figures-${options.viaNginx ? 'nginx' : 'direct'}.json`
        writeFileSync(file, `${JSON.stringify({ medians: figures, samples: propagation, recovery }, null, 2)}\n`)
      }
      await stack?.close()
    })

    async function open(): Promise<TodoPage> {
      const context = await stack.browser.newContext({ viewport: { width: 1100, height: 720 } })
      contexts.push(context)
      return TodoPage.open(context, stack.appUrl)
    }

    async function listId(name: string): Promise<string> {
      const { rows } = await stack.db.query<{ id: string }>('SELECT id FROM lists WHERE name = $1', [name])
      expect(rows).toHaveLength(1)
      return rows[0]!.id
    }

    async function dbTitles(list: string): Promise<string[]> {
      const { rows } = await stack.db.query<{ title: string }>('SELECT title FROM todos WHERE list_id = $1 ORDER BY created_at, id', [list])
      return rows.map((r) => r.title)
    }

    /** A list made through the UI, with todos added one by one, all confirmed by the stream. */
    async function listWithTodos(page: TodoPage, name: string, titles: readonly string[]): Promise<string> {
      await page.createList(name)
      await page.page.locator('.panel-title .editable-text', { hasText: name }).waitFor()
      for (const title of titles) {
        await page.addTodo(title)
        await page.todo(title).waitFor()
      }
      for (const title of titles) await page.syncedTodo(title, false).waitFor()
      await page.list(name).and(page.page.locator(':not([data-pending])')).waitFor()
      return listId(name)
    }

    it('an add, toggle, rename and delete in one browser appear in the other within one second', async () => {
      const [a, b] = await Promise.all([open(), open()])
      const samples: Record<string, number[]> = {}
      let start = 0
      const mark = () => (start = performance.now())
      const took = async (what: string, seen: Promise<number>) => (samples[what] ??= []).push(await seen)

      let list = ''
      for (let round = 0; round < PROPAGATION_ROUNDS; round++) {
        list = named('Groceries')
        await a.createList(list, mark)
        await took('new list', timeUntil(start, b.list(list)))
        await b.selectList(list)

        await a.addTodo('Milk', mark)
        // Optimistic: the writer shows it before any round trip has finished.
        expect(await a.todo('Milk').count()).toBe(1)
        await took('add', timeUntil(start, b.todo('Milk')))

        await a.syncedTodo('Milk', false).waitFor()
        await a.toggle('Milk', mark)
        await took('toggle', timeUntil(start, b.syncedTodo('Milk', true)))

        await a.syncedTodo('Milk', true).waitFor()
        await a.renameTodo('Milk', 'Oat milk', mark)
        await took('rename', timeUntil(start, b.todo('Oat milk')))

        await a.syncedTodo('Oat milk', true).waitFor()
        await a.deleteTodo('Oat milk', mark)
        await took('delete', timeUntil(start, b.todo('Oat milk'), 'detached'))
        expect(await dbTitles(await listId(list))).toEqual([])
        await a.waitForTitles([])
      }

      for (const [what, values] of Object.entries(samples)) {
        figures[what] = median(values)
        propagation[what] = values
      }
      for (const [what, values] of Object.entries(samples)) {
        expect(median(values), `${what}: ${values.join(', ')} ms to reach the other browser (median of ${values.length})`).toBeLessThan(PROPAGATION_BOUND_MS)
      }
      if (options.viaNginx) {
        // The browsers really read through the CDN: every shape request went to nginx.
        for (const url of [...a.shapeRequests, ...b.shapeRequests]) expect(url.startsWith(stack.shapeUrl)).toBe(true)
        // And it caches: a third browser's initial requests are the URLs the first two asked for, answered
        // by nginx without reaching Sluice (the client then catches up from there).
        const c = await open()
        await c.list(list).waitFor()
        const initial = c.shapeRequests.filter((url) => offsetOf(url) === '-1').map((url) => new URL(url))
        expect(initial.length).toBeGreaterThanOrEqual(2)
        const log = await stack.nginx!.accessLog()
        for (const url of initial) {
          const served = log.filter((entry) => entry.uri === `${url.pathname}${url.search}`)
          expect(served.length, `${url.search} in nginx's log`).toBeGreaterThanOrEqual(2)
          expect(served.at(-1)?.cacheStatus, `${url.search} for the third browser`).toBe('HIT')
        }
      }
    })

    it('a write made directly in Postgres (not through the app) appears in both browsers', async () => {
      const [a, b] = await Promise.all([open(), open()])
      const list = named('Chores')
      const id = await listWithTodos(a, list, ['Sweep'])
      await b.selectList(list)
      await b.todo('Sweep').waitFor()

      await stack.db.query(`INSERT INTO todos (list_id, title) VALUES ($1, 'Water the plants')`, [id])
      await Promise.all([a.todo('Water the plants').waitFor(), b.todo('Water the plants').waitFor()])

      await stack.db.query(`UPDATE todos SET completed = true WHERE list_id = $1 AND title = 'Sweep'`, [id])
      await Promise.all([a.syncedTodo('Sweep', true).waitFor(), b.syncedTodo('Sweep', true).waitFor()])

      const renamed = `${list} (psql)`
      await stack.db.query('UPDATE lists SET name = $2 WHERE id = $1', [id, renamed])
      await Promise.all([a.list(renamed).waitFor(), b.list(renamed).waitFor()])

      await stack.db.query(`DELETE FROM todos WHERE list_id = $1 AND title = 'Sweep'`, [id])
      await Promise.all([a.waitForTitles(['Water the plants']), b.waitForTitles(['Water the plants'])])
    })

    it('sharing a list shows who it is shared with in every browser, and unsharing removes them', async () => {
      const [a, b] = await Promise.all([open(), open()])
      const list = named('Trip')
      const id = await listWithTodos(a, list, ['Book the train'])
      await b.selectList(list)
      const members = async () => (await stack.db.query<{ member: string }>('SELECT member FROM list_members WHERE list_id = $1 ORDER BY member', [id])).rows.map((r) => r.member)

      await a.share('bob')
      await a.share('carol')
      await Promise.all([a.member('bob').waitFor(), a.member('carol').waitFor(), b.member('bob').waitFor(), b.member('carol').waitFor()])
      expect(await members()).toEqual(['bob', 'carol'])

      await b.unshare('bob')
      await Promise.all([a.member('bob').waitFor({ state: 'detached' }), b.member('bob').waitFor({ state: 'detached' })])
      expect(await members()).toEqual(['carol'])
      expect(await a.member('carol').count()).toBe(1)
    })

    it('a reload resumes from the saved offset: no offset=-1 request after it', async () => {
      const a = await open()
      const list = named('Reading')
      await listWithTodos(a, list, ['Dune', 'Emma'])
      // A fresh browser did sync from scratch, so the check below has something to tell apart.
      expect(a.shapeRequests.some((url) => offsetOf(url) === '-1')).toBe(true)
      // Both shapes saved (the Shape saves at each up-to-date that changed its rows).
      await a.page.waitForFunction(() => Object.keys(localStorage).filter((k) => k.startsWith('sluice-todo:')).length >= 2)

      const before = a.shapeRequests.length
      await a.page.reload()
      // The saved rows show before the stream has answered anything.
      await a.todo('Dune').waitFor()
      await a.waitForState('live')
      await a.todo('Emma').waitFor()
      // Still following: a change made after the reload arrives.
      await stack.db.query(`INSERT INTO todos (list_id, title) VALUES ($1, 'Ulysses')`, [await listId(list)])
      await a.waitForTitles(['Dune', 'Emma', 'Ulysses'])

      const after = a.shapeRequests.slice(before)
      expect(after.length).toBeGreaterThan(0)
      expect(after.filter((url) => offsetOf(url) === '-1')).toEqual([])
    })

    it('going offline and back online catches up with everything missed', async () => {
      const a = await open()
      const list = named('Trip')
      const id = await listWithTodos(a, list, ['Passport', 'Tickets'])

      await a.page.context().setOffline(true)
      await a.waitForState('offline')
      // Missed while offline: an insert, an update and a delete, by someone else.
      await stack.db.query(`INSERT INTO todos (list_id, title) VALUES ($1, 'Sunscreen')`, [id])
      await stack.db.query(`UPDATE todos SET completed = true WHERE list_id = $1 AND title = 'Passport'`, [id])
      await stack.db.query(`DELETE FROM todos WHERE list_id = $1 AND title = 'Tickets'`, [id])
      const requestsWhileOffline = a.shapeRequests.length
      // Really cut off: given time in which a connected page would have shown them (well over a second
      // here), nothing arrives. A long-poll open when the network went away must not deliver either.
      await a.page.waitForTimeout(OFFLINE_QUIET_MS)
      expect(await a.todo('Sunscreen').count()).toBe(0)
      expect(await a.titles()).toEqual(['Passport', 'Tickets'])

      await a.page.context().setOffline(false)
      await a.waitForTitles(['Passport', 'Sunscreen'])
      await a.syncedTodo('Passport', true).waitFor()
      await a.waitForState('live')
      expect(a.shapeRequests.length).toBeGreaterThan(requestsWhileOffline)
      expect(await a.titles()).toEqual(await dbTitles(id))
    })

    it('survives a Sluice restart while the page is open, without a reload', async () => {
      const a = await open()
      const list = named('Garden')
      const id = await listWithTodos(a, list, ['Rake leaves'])
      await a.page.evaluate(() => ((window as unknown as { sameDocument: boolean }).sameDocument = true))

      await stack.stopSluice()
      await a.waitForState('reconnecting')
      await stack.db.query(`INSERT INTO todos (list_id, title) VALUES ($1, 'Plant bulbs')`, [id])
      await stack.startSluice()
      const started = performance.now()

      await a.waitForTitles(['Rake leaves', 'Plant bulbs'])
      recovery['restart: missed write shown'] = Math.round(performance.now() - started)
      await a.waitForState('live')
      recovery['restart: badge live'] = Math.round(performance.now() - started)
      // And writes made through the app after the restart are confirmed by the stream again.
      await a.addTodo('Mulch')
      await a.syncedTodo('Mulch', false).waitFor()
      expect(await a.page.evaluate(() => (window as unknown as { sameDocument?: boolean }).sameDocument)).toBe(true)
      expect(await a.titles()).toEqual(await dbTitles(id))
    })

    it('a shape rotated by the server (409) re-syncs without duplicates', async () => {
      const a = await open()
      const list = named('Rotation')
      const id = await listWithTodos(a, list, ['First', 'Second', 'Third'])
      // Counts, in the page, any moment at which a todo id is rendered twice.
      await a.page.evaluate(() => {
        const w = window as unknown as { duplicateSeen: boolean }
        w.duplicateSeen = false
        new MutationObserver(() => {
          const ids = [...document.querySelectorAll('[data-testid="todo"]')].map((e) => e.getAttribute('data-id'))
          if (new Set(ids).size !== ids.length) w.duplicateSeen = true
        }).observe(document.body, { childList: true, subtree: true })
      })

      const head = await fetch(`${stack.sluiceUrl}/v1/shape?table=todos&offset=-1`)
      const handle = head.headers.get('electric-handle')
      expect(handle).toBeTruthy()
      await head.body?.cancel()
      const before = a.shapeRequests.length
      const deleted = await fetch(`${stack.sluiceUrl}/v1/shape?table=todos&handle=${handle}`, { method: 'DELETE' })
      expect(deleted.status).toBe(202)

      // The page's stream got its 409 and started over from -1 on the new shape.
      await expect.poll(() => a.shapeRequests.slice(before).some((url) => offsetOf(url) === '-1'), { timeout: 30_000 }).toBe(true)
      await a.waitForState('live')
      await stack.db.query(`INSERT INTO todos (list_id, title) VALUES ($1, 'Fourth')`, [id])
      await a.waitForTitles(['First', 'Second', 'Third', 'Fourth'])

      const ids = await a.todoIds()
      expect(new Set(ids).size).toBe(ids.length)
      expect(await a.page.evaluate(() => (window as unknown as { duplicateSeen: boolean }).duplicateSeen)).toBe(false)
      expect(await a.titles()).toEqual(await dbTitles(id))
      const newHandles = a.shapeRequests
        .slice(before)
        .map((url) => new URL(url).searchParams)
        .filter((params) => params.get('table') === 'todos' && params.get('offset') !== '-1')
        .map((params) => params.get('handle'))
      expect(newHandles.length).toBeGreaterThan(0)
      expect(newHandles.every((h) => h !== handle)).toBe(true)
    })

    if (options.screenshot) {
      it('writes a screenshot of the app with data for review (test-results/todo.png)', async () => {
        const a = await open()
        await listWithTodos(a, 'Work', ['Review the sync PR', 'Write release notes'])
        await listWithTodos(a, 'Weekend', ['Farmers market', 'Fix the bike', 'Call grandma', 'Bake bread', 'Long walk by the river'])
        await a.toggle('Farmers market')
        await a.toggle('Call grandma')
        await a.syncedTodo('Farmers market', true).waitFor()
        await a.syncedTodo('Call grandma', true).waitFor()
        await a.page.mouse.move(0, 0)
        mkdirSync(RESULTS_DIR, { recursive: true })
        const path = `${RESULTS_DIR}todo.png`
        const png = await a.page.screenshot({ path, fullPage: true })
        expect(png.length).toBeGreaterThan(10_000)
        console.log(`screenshot: ${path}`)
      })
    }
  })
}
