import type { MovePattern } from '@sluice/protocol'

/**
 * Which rows of a subquery shape are in it, from the `tags`,
 * `removed_tags` and `active_conditions` headers and the `move-out` /
 * `move-in` events (see this package's README). A plain shape never sends tags, so
 * this stays empty and costs nothing.
 *
 * A tag is one string per disjunct of the where clause's DNF, its slots
 * joined by `/`: a slot is empty for a position outside that disjunct, the
 * literal `1` for a row predicate, and a hash of the row's left-side value for
 * a subquery position. A `move-out` names `(position, hash)` pairs whose
 * subquery value left the inner set: every row with that slot loses that
 * position, and a row left with no disjunct whose positions are all true is
 * out of the shape. A `move-in` sets the position true again on rows still
 * held (a row present through another disjunct); rows that newly enter come as
 * the `is_move_in` inserts after it, so a move-in never adds a row itself.
 */

/** One row's tag state, as persisted: `[row key, tags, active_conditions or null]`. */
export type PersistedRowTags = readonly [key: string, tags: readonly string[], activeConditions: readonly boolean[] | null]

interface RowTags {
  tags: Set<string>
  /** Absent for servers before Electric 1.6.0, which sent tags only: then a row goes with its last tag. */
  activeConditions: boolean[] | undefined
}

/** Headers of a change message that this tracker reads. */
export interface TagHeaders {
  readonly tags?: readonly string[]
  readonly removed_tags?: readonly string[]
  readonly active_conditions?: readonly boolean[]
}

const SLOT_SEPARATOR = '/'
/** The slot of a row predicate: it never names a subquery value, so no pattern can match it. */
const ROW_PREDICATE_SLOT = '1'

export class TagTracker {
  readonly #rows = new Map<string, RowTags>()
  /** position → slot hash → keys of the rows whose tags carry that slot there. */
  readonly #index = new Map<number, Map<string, Set<string>>>()
  /** The positions of each disjunct, taken once from the first tag list seen (every message has the same layout). */
  #disjuncts: number[][] | undefined

  get size(): number {
    return this.#rows.size
  }

  /**
   * An insert (`replace`: the message carries the row's whole tag state) or an
   * update (tags added, `removed_tags` dropped). Active conditions are replaced
   * when the message has them.
   */
  change(key: string, headers: TagHeaders, replace: boolean): void {
    const { tags, removed_tags: removed, active_conditions: conditions } = headers
    const hasConditions = conditions !== undefined && conditions.length > 0
    if (tags === undefined && removed === undefined && !hasConditions) {
      if (replace) this.remove(key)
      return
    }
    if (tags !== undefined && tags.length > 0) this.#disjuncts ??= disjunctsOf(tags)
    let state = this.#rows.get(key)
    if (state === undefined || replace) {
      if (state !== undefined) this.#unindex(key, state.tags)
      state = { tags: new Set(), activeConditions: undefined }
      this.#rows.set(key, state)
    }
    const before = new Set(state.tags)
    if (tags !== undefined) for (const tag of tags) state.tags.add(tag)
    if (removed !== undefined) for (const tag of removed) state.tags.delete(tag)
    if (hasConditions) state.activeConditions = [...conditions]
    this.#reindex(key, before, state.tags)
  }

  /** A delete: the row's tag state goes with it. */
  remove(key: string): void {
    const state = this.#rows.get(key)
    if (state === undefined) return
    this.#unindex(key, state.tags)
    this.#rows.delete(key)
  }

  /** Applies a `move-out`; returns the keys of the rows that left the shape (their tag state is dropped). */
  moveOut(patterns: readonly MovePattern[]): string[] {
    const gone: string[] = []
    for (const { pos, value } of patterns) {
      const keys = this.#index.get(pos)?.get(value)
      if (keys === undefined) continue
      for (const key of [...keys]) {
        const state = this.#rows.get(key)
        if (state === undefined) continue
        let stays: boolean
        if (state.activeConditions !== undefined) {
          state.activeConditions[pos] = false
          stays = this.#satisfied(state)
        } else {
          const before = new Set(state.tags)
          for (const tag of before) if (slotAt(tag, pos) === value) state.tags.delete(tag)
          this.#reindex(key, before, state.tags)
          stays = state.tags.size > 0
        }
        if (!stays) {
          this.remove(key)
          gone.push(key)
        }
      }
    }
    return gone
  }

  /** Applies a `move-in`: rows still held through another disjunct get the position back. */
  moveIn(patterns: readonly MovePattern[]): void {
    for (const { pos, value } of patterns) {
      const keys = this.#index.get(pos)?.get(value)
      if (keys === undefined) continue
      for (const key of keys) {
        const conditions = this.#rows.get(key)?.activeConditions
        if (conditions !== undefined) conditions[pos] = true
      }
    }
  }

  /** A `must-refetch`: the new handle's tags share nothing with the old ones. */
  clear(): void {
    this.#rows.clear()
    this.#index.clear()
    this.#disjuncts = undefined
  }

  persist(): PersistedRowTags[] {
    const out: PersistedRowTags[] = []
    for (const [key, state] of this.#rows) out.push([key, [...state.tags], state.activeConditions ?? null])
    return out
  }

  restore(rows: readonly PersistedRowTags[]): void {
    this.clear()
    for (const [key, tags, conditions] of rows) {
      this.change(key, { tags, ...(conditions === null ? {} : { active_conditions: conditions }) }, true)
    }
  }

  /** Whether some disjunct has all its positions true. */
  #satisfied(state: RowTags): boolean {
    const conditions = state.activeConditions!
    const disjuncts = this.#disjuncts ?? disjunctsOf([...state.tags])
    return disjuncts.some((positions) => positions.length > 0 && positions.every((pos) => conditions[pos] === true))
  }

  #reindex(key: string, before: ReadonlySet<string>, after: ReadonlySet<string>): void {
    const removed = [...before].filter((tag) => !after.has(tag))
    const added = [...after].filter((tag) => !before.has(tag))
    if (removed.length === 0 && added.length === 0) return
    // A slot may be carried by a tag that stays: drop only pairs no remaining tag has.
    const kept = slotPairs(after)
    for (const [pos, slot] of slotPairs(removed).values()) {
      if (!kept.has(pairKey(pos, slot))) this.#unlink(pos, slot, key)
    }
    for (const [pos, slot] of slotPairs(added).values()) {
      let bySlot = this.#index.get(pos)
      if (bySlot === undefined) this.#index.set(pos, (bySlot = new Map()))
      let keys = bySlot.get(slot)
      if (keys === undefined) bySlot.set(slot, (keys = new Set()))
      keys.add(key)
    }
  }

  #unindex(key: string, tags: ReadonlySet<string>): void {
    for (const [pos, slot] of slotPairs(tags).values()) this.#unlink(pos, slot, key)
  }

  /** Empty sets go too: hashes of values long gone must not pile up. */
  #unlink(pos: number, slot: string, key: string): void {
    const bySlot = this.#index.get(pos)
    const keys = bySlot?.get(slot)
    if (keys === undefined) return
    keys.delete(key)
    if (keys.size > 0) return
    bySlot!.delete(slot)
    if (bySlot!.size === 0) this.#index.delete(pos)
  }

  /** How many (position, hash) entries the index holds (for tests). */
  get indexedSlots(): number {
    let count = 0
    for (const bySlot of this.#index.values()) count += bySlot.size
    return count
  }
}

/** `(position, slot)` of every subquery slot of `tags`, keyed so duplicates collapse. */
function slotPairs(tags: Iterable<string>): Map<string, readonly [number, string]> {
  const pairs = new Map<string, readonly [number, string]>()
  for (const tag of tags) {
    const slots = tag.split(SLOT_SEPARATOR)
    for (let pos = 0; pos < slots.length; pos++) {
      const slot = slots[pos]!
      if (slot !== '' && slot !== ROW_PREDICATE_SLOT) pairs.set(pairKey(pos, slot), [pos, slot])
    }
  }
  return pairs
}

function pairKey(pos: number, slot: string): string {
  return `${pos}/${slot}`
}

function slotAt(tag: string, pos: number): string | undefined {
  return tag.split(SLOT_SEPARATOR)[pos]
}

/** Each tag string is one disjunct; its non-empty slots are that disjunct's positions. */
function disjunctsOf(tags: readonly string[]): number[][] {
  return tags.map((tag) => {
    const positions: number[] = []
    tag.split(SLOT_SEPARATOR).forEach((slot, pos) => {
      if (slot !== '') positions.push(pos)
    })
    return positions
  })
}
