/**
 * The pipeline benchmark's tables, shape sets and WAL workloads, shared by the
 * orchestrator (`run.ts`) and the pipeline process (`worker.ts`).
 *
 * One table, `bench_items`, carries a column per exclusive shape set, so one
 * WAL workload serves them all: with `k1k = id % 1000` each change matches
 * exactly one of the 1k shapes `k1k = 0..999`, with `k100k = id % 100000`
 * exactly one of the 100k shapes, and so on. `title` carries a token
 * `TOK0000..TOK0999` for the 1k `ILIKE '%tok0042%'` shapes (again exactly one
 * match per change, but found by evaluating every shape's pattern).
 *
 * Overlapping shapes live on their own table, `bench_overlap`, with a smaller
 * workload: each of its changes matches all 1k shapes `owner = 'x' AND id > k`
 * (k = 0..999), so 2k changes already make 2M shape-log entries.
 */
import type { ShapeDefinitionParams } from '@sluice/protocol'

export const ITEMS = 'bench_items'
export const OVERLAP = 'bench_overlap'
export const SMALL = 'bench_small'

export const SCHEMA_SQL = [
  `CREATE TABLE ${ITEMS} (
    id bigint PRIMARY KEY,
    k1 int NOT NULL,
    k1k int NOT NULL,
    k10k int NOT NULL,
    k100k int NOT NULL,
    title text NOT NULL,
    payload text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
  )`,
  `CREATE TABLE ${OVERLAP} (
    id bigint PRIMARY KEY,
    owner text NOT NULL,
    title text NOT NULL,
    payload text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
  )`,
  `CREATE TABLE ${SMALL} (
    id bigint PRIMARY KEY,
    k int NOT NULL,
    title text NOT NULL,
    payload text NOT NULL
  )`,
  `INSERT INTO ${SMALL} SELECT i, i % 1000, 'small ' || i, repeat('s', 80) FROM generate_series(1, 500) AS i`,
  // One row of the workload: every k column derived from the id, a title token
  // for the ILIKE shapes, ~90 bytes of payload (a change line is ~330 bytes of JSON).
  `CREATE FUNCTION bench_insert(i bigint) RETURNS void LANGUAGE sql AS $$
    INSERT INTO ${ITEMS} (id, k1, k1k, k10k, k100k, title, payload)
    VALUES (i, 0, i % 1000, i % 10000, i % 100000,
            'Item TOK' || lpad((i % 1000)::text, 4, '0') || ' of the pipeline benchmark',
            md5(i::text) || md5((i + 1)::text) || ' filler')
  $$`,
  // The workload in groups of ten changes: 7 inserts, 2 updates (payload and
  // timestamp only, so a row stays in its shapes), 1 delete of a row inserted
  // in the same group. With per_tx = 1 every change commits on its own; with
  // per_tx = 100 ten groups share a transaction. Ids start at start_id.
  `CREATE PROCEDURE bench_workload(tbl text, start_id bigint, changes int, per_tx int) LANGUAGE plpgsql AS $$
  DECLARE
    n int := 0;
    g bigint := start_id;
  BEGIN
    WHILE n < changes LOOP
      FOR j IN 0..9 LOOP
        EXIT WHEN n >= changes;
        IF j < 7 THEN
          IF tbl = '${ITEMS}' THEN
            PERFORM bench_insert(g + j);
          ELSE
            INSERT INTO ${OVERLAP} (id, owner, title, payload)
            VALUES (g + j, 'x', 'Overlap ' || (g + j), md5((g + j)::text) || md5((g + j + 1)::text) || ' filler');
          END IF;
        ELSIF j < 9 THEN
          EXECUTE format('UPDATE %I SET payload = md5(payload), updated_at = now() WHERE id = $1', tbl) USING g + j - 7;
        ELSE
          EXECUTE format('DELETE FROM %I WHERE id = $1', tbl) USING g + 2;
        END IF;
        n := n + 1;
        IF n % per_tx = 0 THEN
          COMMIT;
        END IF;
      END LOOP;
      g := g + 10;
    END LOOP;
    COMMIT;
  END
  $$`,
]

/** A set of shapes registered together. */
export interface ShapeSet {
  readonly id: string
  readonly title: string
  readonly table: string
  readonly count: number
  /** Whether the router finds the shapes through its index (O(1) per change) or evaluates each. */
  readonly indexed: boolean
  /** Shapes each change of the set's workload lands in. */
  readonly matchesPerChange: number
  /** The i-th shape's where clause. */
  where(i: number): string
}

function exclusive(id: string, column: string, count: number): ShapeSet {
  return {
    id,
    title: `${count.toLocaleString('en-US')} shape${count > 1 ? 's' : ''} \`${column} = const\``,
    table: ITEMS,
    count,
    indexed: true,
    matchesPerChange: 1,
    where: (i) => `${column} = ${i}`,
  }
}

export const SHAPE_SETS: Readonly<Record<string, ShapeSet>> = {
  eq1: exclusive('eq1', 'k1', 1),
  eq1k: exclusive('eq1k', 'k1k', 1_000),
  eq10k: exclusive('eq10k', 'k10k', 10_000),
  eq100k: exclusive('eq100k', 'k100k', 100_000),
  ilike1k: {
    id: 'ilike1k',
    title: "1,000 shapes `title ILIKE '%tokNNNN%'`",
    table: ITEMS,
    count: 1_000,
    indexed: false,
    matchesPerChange: 1,
    where: (i) => `title ILIKE '%tok${String(i).padStart(4, '0')}%'`,
  },
  overlap1k: {
    id: 'overlap1k',
    title: "1,000 overlapping shapes `owner = 'x' AND id > k`",
    table: OVERLAP,
    count: 1_000,
    indexed: true,
    matchesPerChange: 1_000,
    where: (i) => `owner = 'x' AND id > ${i}`,
  },
  small1k: {
    id: 'small1k',
    title: '1,000 shapes `k = const` on a 500-row table',
    table: SMALL,
    count: 1_000,
    indexed: true,
    matchesPerChange: 1,
    where: (i) => `k = ${i}`,
  },
}

export function shapeParams(set: ShapeSet, i: number): ShapeDefinitionParams {
  return { table: { schema: 'public', name: set.table }, where: set.where(i), params: [], replica: 'default', log: 'full' }
}

export function parseLsnText(text: string): bigint {
  const [hi, lo] = text.split('/')
  return (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`)
}

export function formatLsnText(lsn: bigint): string {
  return `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`
}
