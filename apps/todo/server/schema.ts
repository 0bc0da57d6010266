import type pg from 'pg'

/**
 * The app's schema, as numbered migrations. Each runs once, in its own
 * transaction, recorded in `todo_migrations`; never edit one that has shipped,
 * add the next. Ids are uuids the browser may choose itself, so an optimistic
 * row and the synced row it becomes share a key.
 */
export const MIGRATIONS: readonly string[] = [
  `CREATE TABLE lists (
     id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
     name text NOT NULL,
     created_at timestamptz NOT NULL DEFAULT now()
   );
   CREATE TABLE todos (
     id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
     list_id uuid NOT NULL REFERENCES lists (id) ON DELETE CASCADE,
     title text NOT NULL,
     completed boolean NOT NULL DEFAULT false,
     created_at timestamptz NOT NULL DEFAULT now()
   );
   CREATE INDEX todos_list_id ON todos (list_id);`,
  // Sharing: who a list is shared with, by user name (the app has no accounts; a name is who you say you
  // are). The "Shared with me" view follows shapes whose where clause selects through this table.
  `CREATE TABLE list_members (
     list_id uuid NOT NULL REFERENCES lists (id) ON DELETE CASCADE,
     member text NOT NULL,
     added_at timestamptz NOT NULL DEFAULT now(),
     PRIMARY KEY (list_id, member)
   );
   CREATE INDEX list_members_member ON list_members (member);`,
]

/** Any constant works; it only has to be the same in every process that migrates this database. */
const MIGRATION_LOCK_KEY = 7_316_402

/**
 * Brings the database up to the latest migration. Safe to run from several
 * processes at once: an advisory lock held for the transaction makes the
 * others wait and then find nothing left to do.
 */
export async function migrate(pool: pg.Pool): Promise<{ from: number; applied: number }> {
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY])
    await client.query('CREATE TABLE IF NOT EXISTS todo_migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())')
    const { rows } = await client.query<{ version: number | null }>('SELECT max(version) AS version FROM todo_migrations')
    const current = rows[0]?.version ?? 0
    let applied = 0
    for (let version = current + 1; version <= MIGRATIONS.length; version++) {
      await client.query(MIGRATIONS[version - 1]!)
      await client.query('INSERT INTO todo_migrations (version) VALUES ($1)', [version])
      applied++
    }
    await client.query('COMMIT')
    return { from: current, applied }
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  } finally {
    client.release()
  }
}
