/** A postgresql.conf value; booleans become on/off. */
export type PostgresSettingValue = string | number | boolean

export type PostgresSettings = Readonly<Record<string, PostgresSettingValue>>

/**
 * Baked into the template cluster. Logical replication on with room for many
 * slots and walsenders (each test may open several); fsync and full-page writes
 * off because a throwaway cluster never needs to survive a machine crash.
 *
 * synchronous_commit stays ON on purpose: logical decoding (walsender and
 * pg_logical_slot_get_changes alike) only reads WAL that has been flushed, so
 * with it off a committed row reaches a replication consumer up to a few
 * wal_writer_delay periods later, and "insert, then expect the change" tests
 * turn flaky. With fsync off a flush is a plain write(), so keeping it on cost
 * nothing measurable here (~2k single-row commits/s either way).
 *
 * UTC so timestamptz text is the same on every machine.
 */
export const TEST_CLUSTER_SETTINGS: PostgresSettings = {
  wal_level: 'logical',
  max_replication_slots: 32,
  max_wal_senders: 32,
  fsync: false,
  synchronous_commit: true,
  full_page_writes: false,
  listen_addresses: '127.0.0.1',
  timezone: 'UTC',
  log_timezone: 'UTC',
}

function formatValue(value: PostgresSettingValue): string {
  if (typeof value === 'boolean') return value ? 'on' : 'off'
  if (typeof value === 'number') return String(value)
  return `'${value.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`
}

/** postgresql.conf lines; appended to the file, so they override anything earlier in it. */
export function formatSettings(settings: PostgresSettings): string {
  return Object.entries(settings)
    .map(([name, value]) => {
      if (!/^[A-Za-z_][A-Za-z0-9_.]*$/.test(name)) throw new TypeError(`startPostgres: invalid setting name ${JSON.stringify(name)}`)
      return `${name} = ${formatValue(value)}\n`
    })
    .join('')
}
