import type { Relation, TypeMessage } from './pgoutput-messages.js'
import { UnknownRelationError } from './replication-errors.js'

export interface TypeInfo {
  readonly oid: number
  readonly schema: string
  readonly name: string
}

/**
 * Relation id → the latest Relation message for it, plus the Type messages
 * (pgoutput sends one for a column of a non-built-in type, e.g. an enum, before
 * the first Relation that uses it).
 *
 * pgoutput describes a relation before the first change to it on every
 * connection, and again after its schema changes, so the entry in force when a
 * change is decoded is the one that describes that change's tuple. Entries are
 * replaced, never mutated: a change keeps the `Relation` object it was decoded
 * with even after a later ALTER TABLE.
 *
 * One cache per replication stream; nothing here is module-level, so tests and
 * several streams in one process never share entries.
 */
export class RelationCache {
  private readonly relations = new Map<number, Relation>()
  private readonly types = new Map<number, TypeInfo>()

  /** Stores a relation; returns the one it replaces, if any. */
  set(relation: Relation): Relation | undefined {
    const previous = this.relations.get(relation.id)
    this.relations.set(relation.id, relation)
    return previous
  }

  get(id: number): Relation | undefined {
    return this.relations.get(id)
  }

  /** The relation, or `UnknownRelationError` (a change before its Relation message). */
  require(id: number): Relation {
    const relation = this.relations.get(id)
    if (relation === undefined) throw new UnknownRelationError(id)
    return relation
  }

  delete(id: number): boolean {
    return this.relations.delete(id)
  }

  setType(message: Pick<TypeMessage, 'typeOid' | 'schema' | 'name'>): void {
    this.types.set(message.typeOid, { oid: message.typeOid, schema: message.schema, name: message.name })
  }

  type(oid: number): TypeInfo | undefined {
    return this.types.get(oid)
  }

  relationIds(): number[] {
    return [...this.relations.keys()]
  }

  get size(): number {
    return this.relations.size
  }

  clear(): void {
    this.relations.clear()
    this.types.clear()
  }
}

/** Whether two descriptions of a relation differ in anything a consumer of its tuples relies on. */
export function relationChanged(a: Relation, b: Relation): boolean {
  if (a.schema !== b.schema || a.table !== b.table || a.replicaIdentity !== b.replicaIdentity) return true
  if (a.columns.length !== b.columns.length) return true
  for (let i = 0; i < a.columns.length; i++) {
    const x = a.columns[i]
    const y = b.columns[i]
    if (x === undefined || y === undefined) return true
    if (x.name !== y.name || x.typeOid !== y.typeOid || x.typeMod !== y.typeMod || x.flags !== y.flags) return true
  }
  return false
}
