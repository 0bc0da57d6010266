import { useCallback, useMemo, useRef, useState } from 'react'
import type { WriteResult } from './api'
import type { List, Todo } from './model'

/**
 * One write shown before the server has confirmed it: how it changes the rows
 * on screen. Each function must give the same result whether or not the synced
 * rows already contain the write (they do for a moment, between the txid
 * arriving and the change being dropped), so inserts replace, never duplicate.
 */
export interface OptimisticChange {
  readonly lists?: (rows: readonly List[]) => readonly List[]
  readonly todos?: (rows: readonly Todo[]) => readonly Todo[]
  /** The rows it touches, marked as not yet saved in the UI. */
  readonly ids: readonly string[]
}

interface Pending extends OptimisticChange {
  readonly seq: number
}

export interface Notice {
  readonly seq: number
  readonly message: string
}

/** How long an error notice stays up; long enough to read two lines. */
const NOTICE_MS = 6_000

export const upsert = <T extends { readonly id: string }>(rows: readonly T[], row: T): readonly T[] =>
  rows.some((r) => r.id === row.id) ? rows.map((r) => (r.id === row.id ? row : r)) : [...rows, row]

export const patch = <T extends { readonly id: string }>(rows: readonly T[], id: string, change: Partial<T>): readonly T[] =>
  rows.map((r) => (r.id === id ? { ...r, ...change } : r))

export const without = <T,>(rows: readonly T[], drop: (row: T) => boolean): readonly T[] => rows.filter((r) => !drop(r))

/**
 * Optimistic writes, each dropped when its own transaction has arrived
 * through the stream (`confirm` waits for the txid) or when the write fails
 * (the change disappears and a notice says why). Several writes may be in
 * flight; they apply in the order they were made.
 */
export function useOptimisticWrites() {
  const [pending, setPending] = useState<readonly Pending[]>([])
  const [notices, setNotices] = useState<readonly Notice[]>([])
  const counter = useRef(0)

  const dismiss = useCallback((seq: number) => setNotices((all) => all.filter((n) => n.seq !== seq)), [])

  const run = useCallback(
    async (change: OptimisticChange, write: () => Promise<WriteResult>, confirm: (result: WriteResult) => Promise<void>): Promise<void> => {
      const seq = ++counter.current
      setPending((all) => [...all, { ...change, seq }])
      try {
        await confirm(await write())
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error)
        setNotices((all) => [...all, { seq, message }])
        setTimeout(() => dismiss(seq), NOTICE_MS)
      } finally {
        setPending((all) => all.filter((p) => p.seq !== seq))
      }
    },
    [dismiss],
  )

  const apply = useCallback(
    (lists: readonly List[], todos: readonly Todo[]) => {
      let l = lists
      let t = todos
      for (const p of pending) {
        if (p.lists) l = p.lists(l)
        if (p.todos) t = p.todos(t)
      }
      return { lists: l, todos: t }
    },
    [pending],
  )

  const pendingIds = useMemo(() => new Set(pending.flatMap((p) => p.ids)), [pending])

  return useMemo(() => ({ run, apply, pendingIds, notices, dismiss }), [run, apply, pendingIds, notices, dismiss])
}
