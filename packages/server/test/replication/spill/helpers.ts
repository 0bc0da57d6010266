import { readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import fc from 'fast-check'
import type { Change, Relation, StreamedChange, TupleValue } from '../../../src/replication/index.js'
import { UNCHANGED_TOAST } from '../../../src/replication/index.js'

export const SOAK = process.env['SOAK'] === '1'

export function relation(id: number, table: string, columns: readonly string[], keyColumns: readonly number[] = [0]): Relation {
  return {
    id,
    schema: 'public',
    table,
    replicaIdentity: 'default',
    columns: columns.map((name, i) => ({ name, typeOid: 25, typeMod: -1, isKey: keyColumns.includes(i), flags: keyColumns.includes(i) ? 1 : 0 })),
    keyColumns,
  }
}

/** Two descriptions of table 16384 (DDL inside a transaction), and two other tables. */
export const ITEMS_V1 = relation(16384, 'items', ['id', 'name', 'note'])
export const ITEMS_V2 = relation(16384, 'items', ['id', 'name', 'note', 'extra'])
export const TAGS = relation(16390, 'tags', ['id', 'tag'])
export const EMPTY = relation(16400, 'empty', [], [])
export const RELATIONS: readonly Relation[] = [ITEMS_V1, ITEMS_V2, TAGS, EMPTY]

/** Postgres text: any well-formed Unicode (no lone surrogates), short, long, multi-byte at the length boundaries. */
export const valueArb: fc.Arbitrary<TupleValue> = fc.oneof(
  { weight: 2, arbitrary: fc.constant(null) },
  { weight: 1, arbitrary: fc.constant(UNCHANGED_TOAST) },
  { weight: 1, arbitrary: fc.constant('') },
  { weight: 4, arbitrary: fc.string({ unit: 'binary', maxLength: 12 }) },
  { weight: 2, arbitrary: fc.string({ unit: fc.constantFrom('a', 'é', '€', '😀', '\u0000', '\n'), maxLength: 130 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme-ascii', minLength: 240, maxLength: 260 }) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 3 }).map((k) => 'x'.repeat(83 + k) + '€'.repeat(56)) },
)

export const tupleArb: fc.Arbitrary<TupleValue[]> = fc.array(valueArb, { maxLength: 5 })

export const relationArb: fc.Arbitrary<Relation> = fc.constantFrom(...RELATIONS)

export const changeArb: fc.Arbitrary<Change> = fc.oneof(
  fc.record({ kind: fc.constant('insert' as const), relation: relationArb, newTuple: tupleArb }),
  fc.record({
    kind: fc.constant('update' as const),
    relation: relationArb,
    newTuple: tupleArb,
    oldTuple: fc.option(tupleArb, { nil: undefined }),
    oldTupleKind: fc.constantFrom(undefined, 'key' as const, 'full' as const),
    unchangedToast: fc.array(fc.nat(1663), { maxLength: 3 }),
  }),
  fc.record({ kind: fc.constant('delete' as const), relation: relationArb, oldTuple: tupleArb, oldTupleKind: fc.constantFrom('key' as const, 'full' as const) }),
  fc.record({ kind: fc.constant('truncate' as const), relations: fc.array(relationArb, { maxLength: 3 }), cascade: fc.boolean(), restartIdentity: fc.boolean() }),
).map((change) => ({ ...change }) as Change) // fc.record makes null-prototype objects; the assembler makes plain ones

export function insert(rel: Relation, ...values: TupleValue[]): Change {
  return { kind: 'insert', relation: rel, newTuple: values }
}

export function streamed(subxid: number, changes: readonly Change[]): StreamedChange[] {
  return changes.map((change) => ({ subxid, change }))
}

/** Spill files in `dir` with their sizes. */
export function spillFiles(dir: string): Map<string, number> {
  const files = new Map<string, number>()
  for (const name of readdirSync(dir)) if (name.endsWith('.spill')) files.set(name, statSync(join(dir, name)).size)
  return files
}

export function totalSize(files: Map<string, number>): number {
  let total = 0
  for (const size of files.values()) total += size
  return total
}

/** Every batch of an iteration, in order. */
export async function collect<T>(iterable: AsyncIterable<readonly T[]>): Promise<{ items: T[]; batches: number[] }> {
  const items: T[] = []
  const batches: number[] = []
  for await (const batch of iterable) {
    batches.push(batch.length)
    for (const item of batch) items.push(item)
  }
  return { items, batches }
}

/** Deep equality plus: every change references the very Relation objects it was appended with. */
export function sameRelations(got: readonly Change[], want: readonly Change[]): boolean {
  if (got.length !== want.length) return false
  for (let i = 0; i < got.length; i++) {
    const g = got[i]!
    const w = want[i]!
    if (g.kind !== w.kind) return false
    if (g.kind === 'truncate' && w.kind === 'truncate') {
      if (g.relations.length !== w.relations.length || g.relations.some((r, j) => r !== w.relations[j])) return false
    } else if (g.kind !== 'truncate' && w.kind !== 'truncate' && g.relation !== w.relation) {
      return false
    }
  }
  return true
}
