import type { ShapeSchema } from '@sluice/protocol'
import type { PersistedRowTags } from './tag-tracker.js'
import type { Row } from './value-parser.js'

/**
 * Where a Shape keeps `(handle, offset, rows)` between page loads, so a reload
 * resumes from its offset instead of syncing the shape again from `-1`.
 *
 * The port is three async calls on whole snapshots: small enough for any
 * backend (memory, localStorage, IndexedDB, a file, SQLite). A snapshot is
 * saved when the shape reaches up-to-date, so its rows are exactly the shape's
 * contents at its offset, with no half-applied transaction.
 */
export interface PersistedShape {
  /** Format version of this record; a loader ignores versions it does not know. */
  readonly version: typeof PERSISTED_SHAPE_VERSION
  readonly handle: string
  readonly offset: string
  readonly schema: ShapeSchema | undefined
  /** `[row key, row]`, rows as the parsers produced them. */
  readonly rows: ReadonlyArray<readonly [string, Row]>
  /**
   * Subquery shapes: each row's tags and active conditions, so a `move-out`
   * after a reload still finds the rows it removes. Absent for plain shapes.
   */
  readonly tags?: readonly PersistedRowTags[]
  /** When it was saved (ms since the epoch). */
  readonly savedAt: number
}

export const PERSISTED_SHAPE_VERSION = 1

export interface ShapeStorage {
  load(key: string): Promise<PersistedShape | undefined>
  save(key: string, shape: PersistedShape): Promise<void>
  remove(key: string): Promise<void>
}

/**
 * The default: a Map, so a Shape re-created in the same process (a remounted
 * component, a second view of the same shape) resumes without re-syncing.
 */
export class MemoryShapeStorage implements ShapeStorage {
  readonly #entries = new Map<string, PersistedShape>()

  async load(key: string): Promise<PersistedShape | undefined> {
    return this.#entries.get(key)
  }

  async save(key: string, shape: PersistedShape): Promise<void> {
    // A copy of the row list: the Shape keeps mutating its own Map.
    this.#entries.set(key, { ...shape, rows: [...shape.rows] })
  }

  async remove(key: string): Promise<void> {
    this.#entries.delete(key)
  }

  get size(): number {
    return this.#entries.size
  }
}
