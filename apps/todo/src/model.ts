// The rows as they arrive from the `lists` and `todos` shapes (uuid and
// timestamptz are Postgres text; booleans are parsed by the client).

export interface List {
  readonly id: string
  readonly name: string
  readonly created_at: string
}

export interface Todo {
  readonly id: string
  readonly list_id: string
  readonly title: string
  readonly completed: boolean
  readonly created_at: string
}

/** A row of `list_members`: list `list_id` is shared with the user named `member`. */
export interface Member {
  readonly list_id: string
  readonly member: string
  readonly added_at: string
}

/**
 * The "Shared with me" view's shapes: lists and todos selected through
 * `list_members` with a subquery, `$1` being the user's name. Sluice keeps
 * them current as lists are shared and unshared (rows move in and out).
 */
export const SHARED_LISTS_WHERE = 'id IN (SELECT list_id FROM list_members WHERE member = $1)'
export const SHARED_TODOS_WHERE = 'list_id IN (SELECT list_id FROM list_members WHERE member = $1)'

/** User names as the API accepts them. */
export const USER_NAME = /^[a-z0-9][a-z0-9_.-]{0,39}$/

/**
 * Milliseconds for a timestamptz as Postgres prints it (`2026-08-21 10:11:12.345678+00`)
 * or as the browser does (`toISOString()`, used for optimistic rows), so both sort together.
 */
export function timestampMs(text: string): number {
  const iso = text
    .replace(' ', 'T')
    .replace(/(\.\d{3})\d+/, '$1')
    .replace(/([+-]\d\d)$/, '$1:00')
  const ms = Date.parse(iso)
  return Number.isNaN(ms) ? 0 : ms
}

/** Oldest first; the id breaks ties so every browser shows the same order. */
export function byCreation<T extends { readonly created_at: string; readonly id: string }>(rows: readonly T[]): T[] {
  return [...rows].sort((a, b) => timestampMs(a.created_at) - timestampMs(b.created_at) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
}
