/**
 * The start values that fix how V8 lays out a number field of the objects a
 * store keeps one of per log (100k and more), before the constructor sets the
 * real value. A field's layout follows its first value, and a later value that
 * does not fit it changes its class's layout: V8 then migrates every object
 * made before on its next use (a runtime call and fresh heap numbers per
 * object), which after an open was every log's first append.
 *
 * DOUBLE_FIELD (`-0`, the one number literal V8 never keeps as a small
 * integer): a double field, a heap number of the object's own that writes
 * update in place. For fields that take values past small integers on the
 * append path (LSN low halves, store-wide sequence numbers, arena handles):
 * an append writes them without allocating.
 *
 * TAGGED_FIELD (`undefined`, then a number): a tagged field, which keeps a
 * small integer in the object itself and any other number as a heap number
 * made when written. For fields that hold small integers nearly always
 * (positions in a log's files, offsets in an arena slab, inodes): no heap
 * number per field and log, which a double field costs even holding 0; a
 * third of a restored shape's heap objects were those boxes, each copied by
 * the scavenges of a start.
 */
export const DOUBLE_FIELD = -0
export const TAGGED_FIELD = undefined as unknown as number
