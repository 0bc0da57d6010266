/**
 * The live benchmark's table: `live_rows`, one row per shape (`id = k`,
 * shapes `k = <i>`). The writer updates `stamp` with `<run>:<monotonic ns>`;
 * the value always changes, so every update carries it even with
 * `replica=default` (PK + changed columns). A trigger notifies the same
 * change on channel `live_rows`: that is how the ceiling server is woken by
 * the very commit that Sluice replicates. It fires in every phase, Sluice's
 * too, so the writer's cost is the same for both.
 */
export const LIVE_TABLE = 'live_rows'
export const NOTIFY_CHANNEL = 'live_rows'

export function schemaSql(rows: number): string[] {
  return [
    `CREATE TABLE ${LIVE_TABLE} (id int PRIMARY KEY, k int NOT NULL, stamp text NOT NULL)`,
    `INSERT INTO ${LIVE_TABLE} SELECT i, i, '0:0' FROM generate_series(0, ${rows - 1}) AS i`,
    // Each shape's snapshot selects its one row by k: without the index every snapshot would scan the table.
    `CREATE INDEX ON ${LIVE_TABLE} (k)`,
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

/** The shape of live client `k`. */
export function liveShapeQuery(k: number): string {
  return `table=${LIVE_TABLE}&where=${encodeURIComponent(`k = ${k}`)}`
}
