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
