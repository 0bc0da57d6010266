/**
 * The client benchmark's tables: one per synced size (`client_rows_<n>`) and
 * one for live updates (`client_live`), all with the same realistic row (an
 * int8 key, text, int4, bool, two timestamptz, a small jsonb document) of
 * about 250 bytes of JSON value per row (about 390 bytes per change line with
 * its key and headers), plus the two columns the live measurement writes:
 *
 * - `seq`: the writer's transaction number (0 before any update);
 * - `stamp_ns`: `CLOCK_MONOTONIC` in ns taken by the writer just before it sent
 *   the transaction (one clock for every process on Linux), so a client process
 *   subtracts it from its own reading when its Shape shows the row.
 *
 * The live writer updates rows in blocks: transaction `seq` updates the
 * `LIVE_ROWS_PER_TX` rows of block `seq % blocks` (ids `block * rowsPerTx + 1`
 * onwards), so a client finds the rows of any transaction by arithmetic.
 */

export const LIVE_TABLE = 'client_live'

export function syncTable(rows: number): string {
  return `client_rows_${rows}`
}

export function tableSql(name: string, rows: number): string[] {
  return [
    `CREATE TABLE ${name} (
       id int8 PRIMARY KEY,
       title text NOT NULL,
       owner text NOT NULL,
       status int4 NOT NULL,
       score int4 NOT NULL,
       active bool NOT NULL,
       created_at timestamptz NOT NULL,
       updated_at timestamptz NOT NULL,
       doc jsonb NOT NULL,
       seq int8 NOT NULL DEFAULT 0,
       stamp_ns int8 NOT NULL DEFAULT 0)`,
    `INSERT INTO ${name}
       SELECT i,
              'Item ' || i,
              'user' || (i % 997),
              i % 5,
              ((i::int8 * 7919) % 100000)::int4,
              i % 3 = 0,
              '2025-01-01T00:00:00Z'::timestamptz + i * interval '1 second',
              '2025-01-01T00:00:00Z'::timestamptz + i * interval '1 second' + interval '123456 microseconds',
              jsonb_build_object('tags', jsonb_build_array('t' || (i % 10), 't' || (i % 7)), 'priority', i % 4),
              0, 0
       FROM generate_series(1, ${rows}) AS i`,
    `ANALYZE ${name}`,
  ]
}

/** Ids of the rows transaction `seq` updates. */
export function blockOf(seq: number, blocks: number, rowsPerTx: number): { first: number; last: number } {
  const block = seq % blocks
  return { first: block * rowsPerTx + 1, last: (block + 1) * rowsPerTx }
}
