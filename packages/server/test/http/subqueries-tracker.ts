/**
 * A client-side materialiser of a subquery shape, written from the wire rules
 * (docs/protocol.md, "Subquery shapes"): rows with their tag sets and
 * `active_conditions`; `move-out` flips the matching positions off and drops
 * rows with no disjunct left true; `move-in` flips them on. What the tests
 * compare with Postgres's own `SELECT … WHERE <clause>`.
 */
export interface WireMessage {
  key?: string
  value?: Record<string, unknown>
  headers: Record<string, unknown>
}

interface TrackedRow {
  value: Record<string, unknown>
  tags: Set<string>
  active: boolean[]
}

export class TagTracker {
  readonly rows = new Map<string, TrackedRow>()
  /** Inserts of a key the client already held: a row sent twice. */
  duplicateInserts = 0
  /** Positions of each disjunct, from the first tagged row. */
  private disjuncts: number[][] | undefined

  apply(messages: readonly WireMessage[]): void {
    for (const m of messages) {
      const h = m.headers
      if (h['control'] === 'must-refetch') {
        this.rows.clear()
        this.disjuncts = undefined
      }
      if (h['event'] === 'move-out' || h['event'] === 'move-in') {
        this.move(h['event'] === 'move-in', h['patterns'] as { pos: number; value: string }[])
        continue
      }
      if (m.key === undefined) continue
      const tags = (h['tags'] as string[] | undefined) ?? []
      if (this.disjuncts === undefined && tags.length > 0) {
        this.disjuncts = tags.map((t) => t.split('/').flatMap((slot, i) => (slot === '' ? [] : [i])))
      }
      if (h['operation'] === 'delete') {
        this.rows.delete(m.key)
        continue
      }
      const known = this.rows.get(m.key)
      if (known !== undefined && h['operation'] === 'insert') this.duplicateInserts++
      const row: TrackedRow = known ?? { value: {}, tags: new Set(), active: [] }
      row.value = { ...row.value, ...m.value }
      for (const t of tags) row.tags.add(t)
      for (const t of (h['removed_tags'] as string[] | undefined) ?? []) row.tags.delete(t)
      const active = h['active_conditions'] as boolean[] | undefined
      if (active !== undefined && active.length > 0) row.active = [...active]
      this.rows.set(m.key, row)
    }
  }

  private move(on: boolean, patterns: readonly { pos: number; value: string }[]): void {
    for (const [key, row] of this.rows) {
      let hit = false
      for (const { pos, value } of patterns) {
        if ([...row.tags].some((t) => t.split('/')[pos] === value)) {
          row.active[pos] = on
          hit = true
        }
      }
      if (hit && !on && !(this.disjuncts ?? []).some((d) => d.every((p) => row.active[p] === true))) this.rows.delete(key)
    }
  }

  /** Row values by key. */
  values(): Map<string, Record<string, unknown>> {
    return new Map([...this.rows].map(([k, r]) => [k, r.value]))
  }
}
