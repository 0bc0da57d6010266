import { type RelationName, formatRelation, quoteIdentifier } from '@sluice/protocol'
import { SqlState, configurationError, errorMessage, isPrivilegeError, sqlState } from './pg-error-mapping.js'
import { DEFAULT_PUBLICATION_NAME, validatePublicationName } from './pg-names.js'
import type { Queryable } from './queryable.js'
import { PublicationNotFoundError, ReplicationPrivilegeError, TableNotFoundError } from './replication-errors.js'

export interface PublicationManagerOptions {
  /** Default `sluice_publication`; any identifier (it is always quoted). */
  readonly name?: string
}

export interface AddTableResult {
  /** False when the table was published already (by us or by FOR ALL TABLES / TABLES IN SCHEMA). */
  readonly added: boolean
  /** True when this call switched the table to REPLICA IDENTITY FULL. */
  readonly replicaIdentitySet: boolean
}

/** Postgres's pg_class.relreplident for REPLICA IDENTITY FULL. */
const IDENTITY_FULL = 'f'

/**
 * The publication that decides which tables' changes reach the slot. It starts
 * empty; a table joins it when the first shape on that table needs it, so a
 * database with hundreds of tables only decodes the ones someone syncs.
 *
 * Every published table is REPLICA IDENTITY FULL: updates and deletes then carry
 * the whole old row, which the router needs to tell whether a row left a shape
 * and to fill unchanged TOAST values (docs/protocol.md §3.2, §9). It is set before
 * the table joins the publication, so no change of a published table ever
 * arrives without its old row.
 *
 * All operations are idempotent and safe to race with another process doing
 * the same.
 */
export class PublicationManager {
  readonly name: string

  constructor(
    private readonly db: Queryable,
    options: PublicationManagerOptions = {},
  ) {
    this.name = validatePublicationName(options.name ?? DEFAULT_PUBLICATION_NAME)
  }

  /**
   * Creates the (empty) publication unless it exists. It publishes changes of
   * partitions under their partitioned table (`publish_via_partition_root`), the
   * relation a shape names; an existing publication without it gets it set.
   */
  async ensure(): Promise<{ created: boolean }> {
    if (await this.exists()) {
      const { rows } = await this.db.query('SELECT pubviaroot AS root FROM pg_publication WHERE pubname = $1', [this.name])
      if (rows[0]?.['root'] === false) {
        await this.db.query(`ALTER PUBLICATION ${quoteIdentifier(this.name)} SET (publish_via_partition_root = true)`)
      }
      return { created: false }
    }
    try {
      await this.db.query(`CREATE PUBLICATION ${quoteIdentifier(this.name)} WITH (publish_via_partition_root = true)`)
      return { created: true }
    } catch (error) {
      if (sqlState(error) === SqlState.duplicateObject) return { created: false }
      if (isPrivilegeError(error)) {
        const { role, database } = await this.whoAmI()
        throw new ReplicationPrivilegeError(
          `create the publication ${quoteIdentifier(this.name)}`,
          role,
          `GRANT CREATE ON DATABASE ${quoteIdentifier(database)} TO ${quoteIdentifier(role)};`,
          errorMessage(error),
          { cause: error },
        )
      }
      throw configurationError(error)
    }
  }

  async exists(): Promise<boolean> {
    const { rows } = await this.db.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [this.name])
    return rows.length > 0
  }

  /**
   * Makes `schema.table` publish its changes with full old rows: sets
   * REPLICA IDENTITY FULL (if it is not), then adds it to the publication (if
   * it is not in it), creating the publication if needed.
   */
  async addTable(schema: string, table: string): Promise<AddTableResult> {
    const relation = { schema, name: table }
    await this.ensure()
    const identity = await this.replicaIdentity(relation)
    let replicaIdentitySet = false
    if (identity !== IDENTITY_FULL) {
      await this.alter(`ALTER TABLE ${formatRelation(relation)} REPLICA IDENTITY FULL`, relation, `set REPLICA IDENTITY FULL on table ${formatRelation(relation)}`)
      replicaIdentitySet = true
    }
    // A partitioned table's changes are decoded on its partitions, each by its own replica identity, which
    // the parent's does not set: every partition (those created since, too) is made FULL as well.
    for (const partition of await this.partitionsNotFull(relation)) {
      await this.alter(`ALTER TABLE ${formatRelation(partition)} REPLICA IDENTITY FULL`, partition, `set REPLICA IDENTITY FULL on partition ${formatRelation(partition)}`)
      replicaIdentitySet = true
    }
    if (await this.publishes(relation)) return { added: false, replicaIdentitySet }
    try {
      await this.alter(
        `ALTER PUBLICATION ${quoteIdentifier(this.name)} ADD TABLE ${formatRelation(relation)}`,
        relation,
        `add table ${formatRelation(relation)} to the publication ${quoteIdentifier(this.name)}`,
      )
    } catch (error) {
      // Added concurrently: that is the state we wanted.
      if (sqlState(error) === SqlState.duplicateObject) return { added: false, replicaIdentitySet }
      throw error
    }
    return { added: true, replicaIdentitySet }
  }

  /** Removes a table from the publication; false if it was not in it. Its replica identity stays. */
  async removeTable(schema: string, table: string): Promise<boolean> {
    const relation = { schema, name: table }
    if (!(await this.publishes(relation))) return false
    try {
      await this.alter(
        `ALTER PUBLICATION ${quoteIdentifier(this.name)} DROP TABLE ${formatRelation(relation)}`,
        relation,
        `remove table ${formatRelation(relation)} from the publication ${quoteIdentifier(this.name)}`,
      )
      return true
    } catch (error) {
      if (sqlState(error) === SqlState.undefinedObject) return false
      throw error
    }
  }

  /** Tables the publication covers, in schema/name order. */
  async tables(): Promise<RelationName[]> {
    const { rows } = await this.db.query(
      'SELECT schemaname::text AS schema, tablename::text AS name FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2',
      [this.name],
    )
    return rows.map((row) => ({ schema: String(row['schema']), name: String(row['name']) }))
  }

  /** Drops the publication; false if it did not exist. */
  async drop(): Promise<boolean> {
    const { rows } = await this.db.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [this.name])
    if (rows.length === 0) return false
    await this.db.query(`DROP PUBLICATION IF EXISTS ${quoteIdentifier(this.name)}`)
    return true
  }

  private async publishes(relation: RelationName): Promise<boolean> {
    const { rows } = await this.db.query(
      'SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3',
      [this.name, relation.schema, relation.name],
    )
    if (rows.length > 0) return true
    if (!(await this.exists())) throw new PublicationNotFoundError(this.name, 'dropped while in use')
    return false
  }

  /** The partitions (at any depth) of a partitioned table whose replica identity is not FULL; none for a plain table. */
  private async partitionsNotFull(relation: RelationName): Promise<RelationName[]> {
    const { rows } = await this.db.query(
      `SELECT pn.nspname::text AS schema, pc.relname::text AS name
         FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace,
              pg_catalog.pg_partition_tree(c.oid::pg_catalog.regclass) pt
         JOIN pg_catalog.pg_class pc ON pc.oid = pt.relid JOIN pg_catalog.pg_namespace pn ON pn.oid = pc.relnamespace
        WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'p' AND pt.relid <> c.oid AND pc.relreplident <> 'f'
        ORDER BY pt.level, 1, 2`,
      [relation.schema, relation.name],
    )
    return rows.map((row) => ({ schema: String(row['schema']), name: String(row['name']) }))
  }

  private async replicaIdentity(relation: RelationName): Promise<string> {
    const { rows } = await this.db.query(
      `SELECT c.relreplident::text AS identity
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`,
      [relation.schema, relation.name],
    )
    const row = rows[0]
    if (row === undefined) throw new TableNotFoundError(relation.schema, relation.name)
    return String(row['identity'])
  }

  /** Runs an ALTER that needs ownership, turning "must be owner" into an actionable error; `action` completes "Role x cannot …". */
  private async alter(sql: string, relation: RelationName, action: string): Promise<void> {
    try {
      await this.db.query(sql)
    } catch (error) {
      if (sqlState(error) === SqlState.undefinedTable) throw new TableNotFoundError(relation.schema, relation.name, { cause: error })
      if (!isPrivilegeError(error)) throw error
      const { role } = await this.whoAmI()
      const table = formatRelation(relation)
      const publication = quoteIdentifier(this.name)
      const fix = /publication/i.test(errorMessage(error))
        ? `ALTER PUBLICATION ${publication} OWNER TO ${quoteIdentifier(role)};`
        : `ALTER TABLE ${table} OWNER TO ${quoteIdentifier(role)}; ` +
          `or, as its owner: ALTER TABLE ${table} REPLICA IDENTITY FULL; ALTER PUBLICATION ${publication} ADD TABLE ${table};`
      throw new ReplicationPrivilegeError(action, role, fix, errorMessage(error), { cause: error })
    }
  }

  private async whoAmI(): Promise<{ role: string; database: string }> {
    const { rows } = await this.db.query('SELECT current_user::text AS role, current_database()::text AS database')
    return { role: String(rows[0]?.['role']), database: String(rows[0]?.['database']) }
  }
}
