/**
 * The fan-out benchmark's table: `FANOUT_ROWS` rows that transactions update,
 * plus row 0, which every transaction updates last with `end:<write>` in
 * `mark`, so a client knows it holds the whole transaction when it sees that
 * marker (the rows of a transaction reach it in commit order). Write numbers
 * are zero-padded to a fixed width: the ceiling swaps them in its copy of a
 * body without changing its length.
 */
export const FANOUT_TABLE = 'fanout_items'
/** The largest transaction the benchmark writes, in rows. */
export const FANOUT_ROWS = 1_000
/** Bytes of filler per row: rows about the size of a small application row. */
export const PAD_BYTES = 100
export const WRITE_DIGITS = 6
export const END_MARK = 'end:'

export function schemaSql(): string[] {
  return [
    `DROP TABLE IF EXISTS ${FANOUT_TABLE}`,
    `CREATE TABLE ${FANOUT_TABLE} (id int PRIMARY KEY, mark text NOT NULL, pad text NOT NULL)`,
    `INSERT INTO ${FANOUT_TABLE} SELECT g, 'seed', repeat('s', ${PAD_BYTES}) FROM generate_series(0, ${FANOUT_ROWS}) g`,
  ]
}

export function writeMark(write: number): string {
  return String(write).padStart(WRITE_DIGITS, '0')
}

export const SHAPE_QUERY = `table=${FANOUT_TABLE}`
