/*
 * A shape's log is stored under its handle until it is first compacted; a
 * compacted log is a new log, `<handle>_c<generation>`, that replaces it
 * (docs/architecture.md, compaction). Handles never contain `_`
 * (`<hash>-<microseconds>`), so the suffix cannot be mistaken for one.
 */

const SUFFIX = /_c(\d+)$/

/** The store id of a shape's log after its `generation`th compaction. */
export function compactedLogId(handle: string, generation: number): string {
  return `${handle}_c${generation}`
}

/** The handle a store id belongs to. */
export function handleOfLogId(id: string): string {
  const i = id.lastIndexOf('_c')
  return i > 0 && SUFFIX.test(id) ? id.slice(0, i) : id
}

/** How many times the log under this id has been compacted (0: the log made with the shape). */
export function generationOfLogId(id: string): number {
  const m = SUFFIX.exec(id)
  return m === null ? 0 : Number(m[1])
}

/** A flush's advanced logs named by their handles (what live waiters wait on); the same object when no id is a compacted one. */
export function byHandles<T extends { readonly advanced: readonly string[] }>(result: T): T {
  const ids = result.advanced
  let i = 0
  while (i < ids.length && handleOfLogId(ids[i]!) === ids[i]) i++
  return i === ids.length ? result : { ...result, advanced: ids.map(handleOfLogId) }
}
