// The "Shared with me" view in Chromium: lists and todos that reach a browser
// through subquery shapes, moving in and out as lists are shared and unshared.
// browser-shared.pg.test.ts runs it.
import type { BrowserContext } from 'playwright-core'
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest'
import { type Stack, startStack } from './stack.js'
import { TodoPage } from './todo-page.js'

/** A dozen synced steps in two browsers: room for a busy shared machine, where each step may take seconds. */
const FLOW_TIMEOUT_MS = 180_000

export function defineSharedViewFlow(label: string, options: { readonly viaNginx: boolean }): void {
  describe(label, () => {
    let stack: Stack
    const contexts: BrowserContext[] = []

    beforeAll(async () => {
      stack = await startStack({ appDir: inject('appDir'), viaNginx: options.viaNginx })
    })

    afterEach(async () => {
      for (const context of contexts.splice(0)) await context.close()
    })

    afterAll(async () => {
      await stack?.close()
    })

    /** A browser that calls itself `user`. */
    async function open(user: string): Promise<TodoPage> {
      const context = await stack.browser.newContext({ viewport: { width: 1100, height: 720 } })
      contexts.push(context)
      await context.addInitScript((name) => window.localStorage.setItem('sluice-todo:user', name), user)
      return TodoPage.open(context, stack.appUrl)
    }

    /** What the view must show: every list shared with `user` and its todos, as Postgres has them. */
    async function sharedWith(user: string): Promise<Array<[string, string[]]>> {
      const { rows } = await stack.db.query<{ name: string; titles: string[] }>(
        `SELECT l.name, coalesce(array_agg(t.title ORDER BY t.created_at, t.id) FILTER (WHERE t.id IS NOT NULL), '{}') AS titles
           FROM lists l LEFT JOIN todos t ON t.list_id = l.id
          WHERE l.id IN (SELECT list_id FROM list_members WHERE member = $1)
          GROUP BY l.id, l.name, l.created_at ORDER BY l.created_at, l.id`,
        [user],
      )
      return rows.map((r) => [r.name, r.titles])
    }

    async function listId(name: string): Promise<string> {
      const { rows } = await stack.db.query<{ id: string }>('SELECT id FROM lists WHERE name = $1', [name])
      return rows[0]!.id
    }

    it('lists shared with you move into the view with their todos, follow their changes, and move out when unshared', async () => {
      const [alice, bob] = await Promise.all([open('alice'), open('bob')])
      await bob.openShared()
      expect(await bob.sharedView()).toEqual(await sharedWith('bob'))

      await alice.createList('Camping')
      await alice.page.locator('.panel-title .editable-text', { hasText: 'Camping' }).waitFor()
      for (const title of ['Tent', 'Stove']) {
        await alice.addTodo(title)
        await alice.syncedTodo(title, false).waitFor()
      }
      await alice.createList('Diary')
      await alice.page.locator('.panel-title .editable-text', { hasText: 'Diary' }).waitFor()
      await alice.addTodo('Secret')
      await alice.syncedTodo('Secret', false).waitFor()

      // Shared: the list and its todos move in (the inner table changed, not the rows).
      await alice.selectList('Camping')
      await alice.share('bob')
      await Promise.all([bob.sharedTodo('Camping', 'Tent', false).waitFor(), bob.sharedTodo('Camping', 'Stove', false).waitFor()])
      expect(await bob.sharedView()).toEqual(await sharedWith('bob'))

      // The shared list's own changes follow; the unshared one never shows.
      await alice.addTodo('Map')
      await alice.syncedTodo('Map', false).waitFor()
      await alice.toggle('Tent')
      await Promise.all([bob.sharedTodo('Camping', 'Map', false).waitFor(), bob.sharedTodo('Camping', 'Tent', true).waitFor()])
      expect(await bob.sharedList('Diary').count()).toBe(0)

      // Shared from outside the app (psql), then unshared in the app: in, then out.
      await stack.db.query(`INSERT INTO list_members (list_id, member) VALUES ($1, 'bob')`, [await listId('Diary')])
      await bob.sharedTodo('Diary', 'Secret', false).waitFor()
      expect(await bob.sharedView()).toEqual(await sharedWith('bob'))
      await alice.selectList('Camping')
      await alice.unshare('bob')
      await bob.sharedList('Camping').waitFor({ state: 'detached' })
      expect(await bob.sharedView()).toEqual(await sharedWith('bob'))
      expect(await bob.sharedView()).toEqual([['Diary', ['Secret']]])
    }, FLOW_TIMEOUT_MS)
  })
}
