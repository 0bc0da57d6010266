/**
 * The overlap benchmark's tables and shapes.
 *
 * - `overlap_items`: one row (`id 0`, `value 0`). Fan-out shape `j` is
 *   `value > -(j + 1)`: every one is a distinct where clause and every one
 *   holds that row, so one update of it is a change in all of them. A range
 *   predicate is not one the router can look up in its hash index, so each
 *   shape's clause is evaluated against the change (the general case).
 *   The writer (`../live/writer.ts`) updates `stamp` with `<write>:<monotonic ns>`.
 * - `overlap_create`: rows `1..n`; creation shape `j` is `id = j` (one row
 *   each), so a burst of creations is many small snapshots, not a few big ones.
 */
export const FANOUT_TABLE = 'overlap_items'
export const CREATE_TABLE = 'overlap_create'

export function schemaSql(createRows: number): string[] {
  return [
    `CREATE TABLE ${FANOUT_TABLE} (id int PRIMARY KEY, value int NOT NULL, stamp text NOT NULL)`,
    `INSERT INTO ${FANOUT_TABLE} VALUES (0, 0, '0:0')`,
    `CREATE TABLE ${CREATE_TABLE} (id int PRIMARY KEY, value int NOT NULL, title text NOT NULL)`,
    `INSERT INTO ${CREATE_TABLE} SELECT i, i, 'row ' || i FROM generate_series(1, ${createRows}) AS i`,
  ]
}

export function fanoutWhere(j: number): string {
  return `value > ${-(j + 1)}`
}

export function createWhere(j: number): string {
  return `id = ${j}`
}

export function shapePath(table: string, where: string): string {
  return `/v1/shape?table=${table}&where=${encodeURIComponent(where)}`
}

/** The plain query the creation ceiling runs per shape: the rows the shape's snapshot reads. */
export function createSelectSql(j: number): string {
  return `SELECT id, value, title FROM ${CREATE_TABLE} WHERE ${createWhere(j)}`
}
