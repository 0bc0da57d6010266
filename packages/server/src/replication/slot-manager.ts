import { parseLsn } from '@sluice/protocol'
import {
  SqlState,
  configurationError,
  isPrivilegeError,
  replicationRoleError,
  sqlState,
} from './pg-error-mapping.js'
import { DEFAULT_SLOT_NAME, validateSlotName } from './pg-names.js'
import type { Queryable } from './queryable.js'
import { SlotMismatchError, SlotNotFoundError } from './replication-errors.js'

export const SLOT_PLUGIN = 'pgoutput'

export interface SlotInfo {
  readonly name: string
  readonly plugin: string | undefined
  readonly slotType: 'logical' | 'physical'
  readonly database: string | undefined
  readonly temporary: boolean
  readonly active: boolean
  readonly activePid: number | undefined
  /** Oldest WAL the slot still needs. */
  readonly restartLsn: bigint | undefined
  /** Where streaming resumes: everything committed before it was acknowledged. */
  readonly confirmedFlushLsn: bigint | undefined
  /** `pg_current_wal_lsn() - restart_lsn`: WAL kept on disk for this slot (undefined on a standby). */
  readonly retainedWalBytes: bigint | undefined
  /** 'reserved' | 'extended' | 'unreserved' | 'lost' (Postgres ≥ 13). */
  readonly walStatus: string | undefined
}

export interface SlotManagerOptions {
  /** Default `sluice_slot`; lower-case letters, digits and underscores. */
  readonly name?: string
}

export interface EnsureSlotResult {
  readonly created: boolean
  readonly slot: SlotInfo
}

const SLOT_QUERY = `
SELECT slot_name::text AS name,
       plugin::text AS plugin,
       slot_type::text AS slot_type,
       database::text AS database,
       temporary,
       active,
       active_pid,
       restart_lsn::text AS restart_lsn,
       confirmed_flush_lsn::text AS confirmed_flush_lsn,
       wal_status::text AS wal_status,
       CASE WHEN pg_is_in_recovery() OR restart_lsn IS NULL THEN NULL
            ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::text END AS retained_wal_bytes,
       current_database()::text AS current_database
  FROM pg_replication_slots
 WHERE slot_name = $1`

/**
 * The permanent logical replication slot Sluice streams from. A permanent slot
 * survives disconnects and restarts of both sides: Postgres keeps the WAL after
 * `confirmed_flush_lsn` for it, so nothing committed is missed however long we
 * are away. The flip side is that a slot nobody reads holds WAL forever, which
 * is why `info()` reports the retained bytes.
 */
export class SlotManager {
  readonly name: string

  constructor(
    private readonly db: Queryable,
    options: SlotManagerOptions = {},
  ) {
    this.name = validateSlotName(options.name ?? DEFAULT_SLOT_NAME)
  }

  /**
   * Creates the slot (pgoutput, permanent) unless it exists; an existing slot
   * must be a pgoutput slot of this database. Creating a slot waits for
   * transactions open at that moment to finish (Postgres needs a consistent
   * starting point).
   */
  async ensure(): Promise<EnsureSlotResult> {
    const existing = await this.info()
    if (existing !== undefined) return { created: false, slot: this.check(existing, await this.currentDatabase()) }
    let created = true
    try {
      // Alone in its own query: inside a multi-statement query the function fails.
      await this.db.query('SELECT pg_create_logical_replication_slot($1, $2)', [this.name, SLOT_PLUGIN])
    } catch (error) {
      created = false
      if (sqlState(error) !== SqlState.duplicateObject) throw await this.translate(error)
      // Created concurrently by another process: use theirs.
    }
    const slot = await this.info()
    if (slot === undefined) throw new SlotNotFoundError(this.name)
    return { created, slot: this.check(slot, await this.currentDatabase()) }
  }

  /** The slot's state, or undefined if it does not exist. */
  async info(): Promise<SlotInfo | undefined> {
    const { rows } = await this.db.query(SLOT_QUERY, [this.name])
    const row = rows[0]
    return row === undefined ? undefined : toSlotInfo(row)
  }

  /** Where streaming will resume. Throws `SlotNotFoundError` if there is no slot. */
  async confirmedFlushLsn(): Promise<bigint> {
    const slot = await this.require()
    if (slot.confirmedFlushLsn === undefined) throw new SlotMismatchError(this.name, 'it has no confirmed_flush_lsn (not a logical slot)')
    return slot.confirmedFlushLsn
  }

  /** Bytes of WAL Postgres keeps for this slot. */
  async retainedWalBytes(): Promise<bigint> {
    return (await this.require()).retainedWalBytes ?? 0n
  }

  /** Drops the slot; false if it did not exist. Fails while a connection streams from it. */
  async drop(): Promise<boolean> {
    try {
      await this.db.query('SELECT pg_drop_replication_slot($1)', [this.name])
      return true
    } catch (error) {
      if (sqlState(error) === SqlState.undefinedObject) return false
      throw await this.translate(error)
    }
  }

  private async require(): Promise<SlotInfo> {
    const slot = await this.info()
    if (slot === undefined) throw new SlotNotFoundError(this.name)
    return slot
  }

  private check(slot: SlotInfo, database: string): SlotInfo {
    if (slot.slotType !== 'logical') throw new SlotMismatchError(this.name, 'it is a physical slot')
    if (slot.plugin !== SLOT_PLUGIN) throw new SlotMismatchError(this.name, `it uses the output plugin ${slot.plugin ?? 'none'}, not ${SLOT_PLUGIN}`)
    if (slot.database !== database) {
      throw new SlotMismatchError(this.name, `it belongs to database ${slot.database ?? '?'}, not ${database}; choose another slot name`)
    }
    return slot
  }

  private async currentDatabase(): Promise<string> {
    const { rows } = await this.db.query('SELECT current_database()::text AS db')
    return String(rows[0]?.['db'])
  }

  private async translate(error: unknown): Promise<unknown> {
    if (isPrivilegeError(error)) {
      const { rows } = await this.db.query('SELECT current_user::text AS role')
      return replicationRoleError(`manage the replication slot "${this.name}"`, String(rows[0]?.['role']), error)
    }
    return configurationError(error)
  }
}

function toSlotInfo(row: Record<string, unknown>): SlotInfo {
  return {
    name: String(row['name']),
    plugin: optionalString(row['plugin']),
    slotType: row['slot_type'] === 'physical' ? 'physical' : 'logical',
    database: optionalString(row['database']),
    temporary: row['temporary'] === true,
    active: row['active'] === true,
    activePid: typeof row['active_pid'] === 'number' ? row['active_pid'] : undefined,
    restartLsn: optionalLsn(row['restart_lsn']),
    confirmedFlushLsn: optionalLsn(row['confirmed_flush_lsn']),
    retainedWalBytes: typeof row['retained_wal_bytes'] === 'string' ? BigInt(row['retained_wal_bytes']) : undefined,
    walStatus: optionalString(row['wal_status']),
  }
}

function optionalString(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined
}

function optionalLsn(value: unknown): bigint | undefined {
  return typeof value === 'string' ? parseLsn(value) : undefined
}
