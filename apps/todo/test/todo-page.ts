// The app as a person uses it, through Chromium: every action is a click or
// a key press on the rendered page, every check reads the DOM.
import type { BrowserContext, Locator, Page, Request } from 'playwright-core'

/** Long enough for a retry after a restart (the client's backoff) on a busy two-core machine. */
export const SYNC_TIMEOUT_MS = 30_000

export type BadgeState = 'live' | 'syncing' | 'reconnecting' | 'offline' | 'error'

export class TodoPage {
  /** Every /v1/shape request this page made, in order. */
  readonly shapeRequests: string[] = []

  private constructor(readonly page: Page) {
    page.on('request', (request: Request) => {
      if (request.url().includes('/v1/shape')) this.shapeRequests.push(request.url())
    })
  }

  static async open(context: BrowserContext, appUrl: string): Promise<TodoPage> {
    const page = await context.newPage()
    const app = new TodoPage(page)
    page.on('pageerror', (error) => console.error(`page error: ${error.message}`))
    await page.goto(appUrl)
    await app.waitForState('live')
    return app
  }

  badge(): Locator {
    return this.page.getByTestId('connection')
  }

  async waitForState(state: BadgeState, timeout = SYNC_TIMEOUT_MS): Promise<void> {
    await this.page.locator(`[data-testid="connection"][data-state="${state}"]`).waitFor({ timeout })
  }

  list(name: string): Locator {
    return this.page.getByTestId('list').filter({ has: this.page.locator('.editable-text', { hasText: exact(name) }) })
  }

  todo(title: string): Locator {
    return this.page.getByTestId('todo').filter({ has: this.page.locator('.editable-text', { hasText: exact(title) }) })
  }

  /** A todo that is saved (no optimistic change pending) with this completion. */
  syncedTodo(title: string, completed: boolean): Locator {
    return this.page
      .locator(`[data-testid="todo"][data-completed="${completed}"]:not([data-pending])`)
      .filter({ has: this.page.locator('.editable-text', { hasText: exact(title) }) })
  }

  /** `mark` is called just before the key press or click that makes the write (to time it from there). */
  async createList(name: string, mark: () => void = () => {}): Promise<void> {
    const input = this.page.getByLabel('New list', { exact: true })
    await input.fill(name)
    mark()
    await input.press('Enter')
  }

  async selectList(name: string): Promise<void> {
    await this.list(name).locator('.editable-text').click()
    await this.page.locator('.panel-title .editable-text', { hasText: exact(name) }).waitFor()
  }

  async addTodo(title: string, mark: () => void = () => {}): Promise<void> {
    const input = this.page.getByLabel('New todo', { exact: true })
    await input.fill(title)
    mark()
    await input.press('Enter')
  }

  async toggle(title: string, mark: () => void = () => {}): Promise<void> {
    const box = this.todo(title).locator('input[type="checkbox"]')
    await box.waitFor()
    mark()
    await box.click()
  }

  /** Double-click the title, type, Enter: the rename a person does. */
  async renameTodo(title: string, next: string, mark: () => void = () => {}): Promise<void> {
    await this.todo(title).locator('.editable-text').dblclick()
    const input = this.page.getByLabel(`New name for todo "${title}"`, { exact: true })
    await input.fill(next)
    mark()
    await input.press('Enter')
  }

  async deleteTodo(title: string, mark: () => void = () => {}): Promise<void> {
    const row = this.todo(title)
    await row.hover()
    mark()
    await row.getByRole('button', { name: `Delete todo "${title}"` }).click()
  }

  /** A chip of someone the selected list is shared with (synced: no write pending). */
  member(name: string): Locator {
    return this.page.locator(`[data-testid="member"][data-member="${name}"]:not([data-pending])`)
  }

  async share(member: string): Promise<void> {
    const input = this.page.getByLabel('Share with', { exact: true })
    await input.fill(member)
    await input.press('Enter')
  }

  async unshare(member: string): Promise<void> {
    await this.page.getByRole('button', { name: `Stop sharing with ${member}`, exact: true }).click()
  }

  /** Opens the "Shared with me" view from the sidebar. */
  async openShared(): Promise<void> {
    await this.page.getByTestId('shared-link').click()
    await this.page.getByRole('region', { name: 'Shared with me' }).waitFor()
  }

  /** A list in the "Shared with me" view. */
  sharedList(name: string): Locator {
    return this.page.getByTestId('shared-list').filter({ has: this.page.locator('.shared-list-name', { hasText: exact(name) }) })
  }

  /** A todo of a shared list, with this completion. */
  sharedTodo(list: string, title: string, completed: boolean): Locator {
    return this.sharedList(list).locator(`[data-testid="shared-todo"][data-completed="${completed}"]`).filter({ has: this.page.locator('.todo-title', { hasText: exact(title) }) })
  }

  /** `[list name, todo titles]` of the "Shared with me" view as rendered. */
  async sharedView(): Promise<Array<[string, string[]]>> {
    return this.page.getByTestId('shared-list').evaluateAll((lists) =>
      lists.map((list) => [list.querySelector('.shared-list-name')?.textContent ?? '', [...list.querySelectorAll('[data-testid="shared-todo"] .todo-title')].map((t) => t.textContent ?? '')]),
    )
  }

  async clearCompleted(): Promise<void> {
    await this.page.getByRole('button', { name: 'Clear completed' }).click()
  }

  /** Titles of the selected list's todos as rendered, top to bottom. */
  async titles(): Promise<string[]> {
    return this.page.locator('[data-testid="todo"] .editable-text').allTextContents()
  }

  /** Ids of the rendered todos (to catch a row rendered twice). */
  async todoIds(): Promise<string[]> {
    return this.page.getByTestId('todo').evaluateAll((rows) => rows.map((row) => row.getAttribute('data-id') ?? ''))
  }

  /** Waits until the rendered titles equal `expected` (order included). */
  async waitForTitles(expected: readonly string[], timeout = SYNC_TIMEOUT_MS): Promise<void> {
    await this.page.waitForFunction(
      (want) => {
        const got = [...document.querySelectorAll('[data-testid="todo"] .editable-text')].map((e) => e.textContent)
        return got.length === want.length && got.every((t, i) => t === want[i])
      },
      expected,
      { timeout, polling: 50 },
    )
  }
}

/** Matches the whole text, not a substring (a title may contain another). */
function exact(text: string): RegExp {
  return new RegExp(`^${text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`)
}

/**
 * Milliseconds from now until `locator` is present, measured in the test
 * process; waits well past the one-second bound so a slow run reports
 * its figure instead of a timeout.
 */
export async function timeUntil(start: number, locator: Locator, state: 'visible' | 'detached' = 'visible'): Promise<number> {
  await locator.waitFor({ state, timeout: 10_000 })
  return Math.round(performance.now() - start)
}
