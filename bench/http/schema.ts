/**
 * The HTTP benchmark's tables.
 *
 * - `http_rows`: the 500 rows of the initial-sync shape (the whole table), each
 *   about 200 bytes as a change line, so the `offset=-1` body is about 100 KB.
 * - `http_live`: one row per live shape (`id = k`, shapes `k = <i>`). The writer
 *   updates `stamp` with `<run>:<monotonic ns>`; the value always changes, so
 *   every update carries it even with `replica=default` (PK + changed columns).
 *   The trigger notifies the same change on channel `http_live`: that is how the
 *   ceiling server is woken by the very commit that Sluice replicates. It fires
 *   in every phase, Sluice's too, so the writer's cost is the same for both.
 */
export const ROWS_TABLE = 'http_rows'
export const LIVE_TABLE = 'http_live'
export const NOTIFY_CHANNEL = 'http_live'
export const INITIAL_ROWS = 500

export function schemaSql(liveRows: number): string[] {
  return [
    `CREATE TABLE ${ROWS_TABLE} (id int PRIMARY KEY, title text NOT NULL, body text NOT NULL, n int NOT NULL, updated_at timestamptz NOT NULL)`,
    `INSERT INTO ${ROWS_TABLE} SELECT i, 'row ' || i, repeat(md5(i::text), 2) || ' ' || repeat('x', 14), i * 7, '2025-01-01T00:00:00Z'::timestamptz + i * interval '1 minute' FROM generate_series(1, ${INITIAL_ROWS}) AS i`,
    `CREATE TABLE ${LIVE_TABLE} (id int PRIMARY KEY, k int NOT NULL, stamp text NOT NULL)`,
    `INSERT INTO ${LIVE_TABLE} SELECT i, i, '0:0' FROM generate_series(0, ${liveRows - 1}) AS i`,
    `CREATE FUNCTION ${LIVE_TABLE}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       PERFORM pg_notify('${NOTIFY_CHANNEL}', json_build_object(
         'id', NEW.id::text, 'k', NEW.k, 'stamp', NEW.stamp,
         'xid', txid_current() % 4294967296,
         'lsn', (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text)::text);
       RETURN NULL;
     END $$`,
    `CREATE TRIGGER ${LIVE_TABLE}_notify AFTER UPDATE ON ${LIVE_TABLE} FOR EACH ROW EXECUTE FUNCTION ${LIVE_TABLE}_notify()`,
  ]
}

/** The query string of the initial-sync request (the same for Sluice and the ceiling). */
export const INITIAL_QUERY = `table=${ROWS_TABLE}&offset=-1`

/** The shape of live client `k`. */
export function liveShapeQuery(k: number): string {
  return `table=${LIVE_TABLE}&where=${encodeURIComponent(`k = ${k}`)}`
}
