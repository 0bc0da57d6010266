import { HandleIssuer, handleMicros, parseHandle } from './handle.js'
import type { MicrosClock } from './handle.js'
import type { ShapeDefinition } from './shape-definition.js'
import { definitionHash, definitionKey, freezeDefinition, uncachedDefinitionKey } from './shape-definition.js'
import type { ShapeMeta } from './shape-meta.js'

export { decodeShapeMeta, encodeShapeMeta, SHAPE_META_VERSION, ShapeMetaError, type ShapeMeta } from './shape-meta.js'

export type HandleStatus = 'active' | 'expired' | 'unknown'

export interface ShapeEntry {
  readonly handle: string
  readonly definition: ShapeDefinition
  readonly expired: boolean
}

export interface ShapeRegistryOptions {
  readonly clock?: MicrosClock
  /**
   * The highest handle microsecond ever issued, if persisted apart from the
   * shapes. Restoring already raises the floor to the newest restored handle;
   * this covers handles whose shapes were since deleted from storage.
   */
  readonly floor?: number
}

/**
 * Which handle serves which definition, in memory. Pure bookkeeping: the
 * caller persists each shape's meta ({@link encodeShapeMeta}) when it is
 * registered or invalidated and rebuilds with {@link ShapeRegistry.restore}.
 *
 * A definition has at most one active handle. Invalidating it retires the
 * handle for good: it stays known as expired (so a request for it can be
 * answered with 409 rather than 400), and the next register of the same
 * definition issues a new one. `forget` drops a retired handle from memory
 * (shape expiry retires many): it then stays 'expired' by the floor rule
 * (`status`), which needs no memory per handle and holds across restarts.
 */
export class ShapeRegistry {
  readonly #issuer: HandleIssuer
  /** definitionKey → active handle. */
  readonly #active = new Map<string, string>()
  /** Every known handle, active or expired. */
  readonly #byHandle = new Map<string, RegistryEntry>()
  /** Handles restore found superseded; see restore. */
  readonly #expiredDuringRestore: string[] = []

  constructor(options: ShapeRegistryOptions = {}) {
    this.#issuer = new HandleIssuer({
      ...(options.clock === undefined ? {} : { clock: options.clock }),
      ...(options.floor === undefined ? {} : { floor: options.floor }),
    })
  }

  /**
   * Rebuilds a registry from stored metas. If two active entries share a
   * definition (a crash between writing a new shape and marking the old one
   * expired), the newer handle stays active and the other becomes expired;
   * {@link ShapeRegistry.expiredDuringRestore} lists those so the caller can
   * persist the change.
   */
  static restore(entries: Iterable<ShapeMeta | ShapeEntry>, options: ShapeRegistryOptions = {}): ShapeRegistry {
    const registry = new ShapeRegistry(options)
    registry.restoreMore(entries)
    return registry
  }

  /**
   * Adds stored metas to a registry restored before (a standby's store found
   * logs made since it prepared), by the same rule as `restore`: of two
   * active entries for one definition the newer handle stays active, the
   * other is expired and listed in `expiredDuringRestore`, whichever call
   * brought it.
   */
  restoreMore(entries: Iterable<ShapeMeta | ShapeEntry>): void {
    // In any order: of two active entries for one definition the newer handle wins whichever comes
    // first, so a restart of 100k shapes needs no sort of their handles.
    for (const entry of entries) {
      const definition = freezeDefinition(entry.definition)
      this.#restoreOne(entry.handle, new RegistryEntry(uncachedDefinitionKey(definition), entry.expired, definition, undefined))
    }
  }

  /**
   * As {@link restoreMore}, for active shapes whose definitions are read only
   * when asked for: each with its key (`definitionKey`) and where its
   * definition comes from then (a restart decodes no meta for this).
   */
  restoreIndexed(entries: Iterable<{ readonly handle: string; readonly key: string; readonly source: DefinitionSource }>): void {
    for (const entry of entries) this.#restoreOne(entry.handle, new RegistryEntry(entry.key, false, undefined, entry.source))
  }

  #restoreOne(handle: string, restored: RegistryEntry): void {
    const at = micros(handle)
    const known = this.#byHandle.size
    // One lookup, not two: a set that adds nothing found the handle there (the restore then fails).
    if (this.#byHandle.set(handle, restored).size === known) throw new Error(`duplicate handle in restore: ${handle}`)
    this.#issuer.observe(at)
    if (restored.expired) return
    const key = restored.key
    const previous = this.#active.get(key)
    if (previous !== undefined && micros(previous) > at) {
      // A newer handle restored before (by this call or an earlier one) stays.
      restored.expired = true
      this.#expiredDuringRestore.push(handle)
      return
    }
    if (previous !== undefined) {
      const old = this.#byHandle.get(previous)
      if (old !== undefined) old.expired = true
      this.#expiredDuringRestore.push(previous)
    }
    this.#active.set(key, handle)
  }

  /** Raises the handle floor to `micros` (a standby's clock when it takes over: every handle its predecessor issued is below it). */
  raiseFloor(micros: number): void {
    this.#issuer.observe(micros)
  }

  get expiredDuringRestore(): readonly string[] {
    return this.#expiredDuringRestore
  }

  /** The highest handle microsecond issued or restored; persist it if expired shapes get deleted. */
  get handleFloor(): number {
    return this.#issuer.floor
  }

  get size(): number {
    return this.#active.size
  }

  /** The active handle for a definition, if any. */
  lookup(def: ShapeDefinition): string | undefined {
    return this.#active.get(definitionKey(def))
  }

  /** The active handle for a definition, issuing a new one if there is none. */
  register(def: ShapeDefinition): string {
    return this.registerEntry(def).handle
  }

  /** As {@link register}, also saying whether the handle is new (and so its meta must be stored). */
  registerEntry(def: ShapeDefinition): { readonly handle: string; readonly created: boolean } {
    const key = definitionKey(def)
    const existing = this.#active.get(key)
    if (existing !== undefined) return { handle: existing, created: false }
    const definition = freezeDefinition(def)
    const handle = this.#issuer.issue(definitionHash(definition))
    this.#active.set(key, handle)
    this.#byHandle.set(handle, new RegistryEntry(key, false, definition, undefined))
    return { handle, created: true }
  }

  /** The definition behind an active handle; undefined for expired or unknown handles. */
  get(handle: string): ShapeDefinition | undefined {
    const entry = this.#byHandle.get(handle)
    return entry === undefined || entry.expired ? undefined : entry.definition
  }

  /**
   * 'active' or 'expired' for a handle this registry holds. Any other
   * well-formed handle at or below the floor is 'expired' too: handles are
   * issued in increasing order and never reused, so one that is not active
   * was retired, by this process or an earlier one (give `floor` the clock
   * at start so an earlier process's handles count). Only a handle that
   * could not have been issued yet, or is not a handle, is 'unknown'.
   */
  status(handle: string): HandleStatus {
    const entry = this.#byHandle.get(handle)
    if (entry !== undefined) return entry.expired ? 'expired' : 'active'
    const parsed = parseHandle(handle)
    return parsed !== undefined && parsed.micros <= this.#issuer.floor ? 'expired' : 'unknown'
  }

  /** Retires an active handle; returns its definition, or undefined if it was not active. */
  invalidate(handle: string): ShapeDefinition | undefined {
    const entry = this.#byHandle.get(handle)
    if (entry === undefined || entry.expired) return undefined
    entry.expired = true
    this.#active.delete(entry.key)
    return entry.definition
  }

  /** Drops an expired handle from memory (its shape was deleted); the floor keeps it from being reissued. */
  forget(handle: string): boolean {
    const entry = this.#byHandle.get(handle)
    if (entry === undefined || !entry.expired) return false
    return this.#byHandle.delete(handle)
  }

  /** Every known shape, active and expired, oldest handle first. */
  entries(): ShapeEntry[] {
    return [...this.#byHandle]
      .map(([handle, e]) => ({ handle, definition: e.definition, expired: e.expired }))
      .sort((a, b) => micros(a.handle) - micros(b.handle))
  }
}

/** Where a restored entry's definition comes from when first asked for (a stored meta, decoded then). */
export interface DefinitionSource {
  readonly definition: ShapeDefinition
}

class RegistryEntry {
  #definition: ShapeDefinition | undefined

  constructor(
    readonly key: string,
    public expired: boolean,
    definition: ShapeDefinition | undefined,
    private readonly source: DefinitionSource | undefined,
  ) {
    this.#definition = definition
  }

  get definition(): ShapeDefinition {
    return (this.#definition ??= freezeDefinition(this.source!.definition))
  }
}

function micros(handle: string): number {
  const at = handleMicros(handle)
  if (at === undefined) throw new Error(`not a valid handle: ${handle}`)
  return at
}
