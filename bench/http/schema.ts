/**
 * The HTTP benchmark's table, `http_rows`: the 500 rows of the initial-sync
 * shape (the whole table), each about 200 bytes as a change line, so the
 * `offset=-1` body is about 100 KB.
 */
export const ROWS_TABLE = 'http_rows'
export const INITIAL_ROWS = 500

export function schemaSql(): string[] {
  return [
    `CREATE TABLE ${ROWS_TABLE} (id int PRIMARY KEY, title text NOT NULL, body text NOT NULL, n int NOT NULL, updated_at timestamptz NOT NULL)`,
    `INSERT INTO ${ROWS_TABLE} SELECT i, 'row ' || i, repeat(md5(i::text), 2) || ' ' || repeat('x', 14), i * 7, '2025-01-01T00:00:00Z'::timestamptz + i * interval '1 minute' FROM generate_series(1, ${INITIAL_ROWS}) AS i`,
  ]
}

/** The query string of the initial-sync request (the same for Sluice and the ceiling). */
export const INITIAL_QUERY = `table=${ROWS_TABLE}&offset=-1`
