import { quoteIdentifier } from '@sluice/protocol'
import { ReplicationPrivilegeError, ServerConfigurationError } from './replication-errors.js'

/** SQLSTATEs we act on (Postgres errcodes.txt). */
export const SqlState = {
  insufficientPrivilege: '42501',
  duplicateObject: '42710',
  undefinedObject: '42704',
  undefinedTable: '42P01',
  objectInUse: '55006',
  objectNotInPrerequisiteState: '55000',
  configurationLimitExceeded: '53400',
} as const

/** The SQLSTATE of a driver error, if it has one. */
export function sqlState(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'string' ? code : undefined
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}

/**
 * Server-side configuration problems that no retry fixes, turned into errors
 * that say which setting to change; anything else comes back unchanged.
 */
export function configurationError(error: unknown): unknown {
  const state = sqlState(error)
  const message = errorMessage(error)
  if (state === SqlState.objectNotInPrerequisiteState && /wal_level/i.test(message)) {
    return new ServerConfigurationError('Set wal_level = logical in postgresql.conf and restart Postgres.', message, { cause: error })
  }
  if (state === SqlState.configurationLimitExceeded && /replication slots/i.test(message)) {
    return new ServerConfigurationError('Raise max_replication_slots in postgresql.conf (restart needed), or drop unused slots.', message, { cause: error })
  }
  if (state === SqlState.configurationLimitExceeded && /wal_senders|walsender/i.test(message)) {
    return new ServerConfigurationError('Raise max_wal_senders in postgresql.conf (restart needed).', message, { cause: error })
  }
  return error
}

/** `ALTER ROLE ... WITH REPLICATION`: what a role needs for slots and replication connections. */
export function replicationRoleError(action: string, role: string, error: unknown): ReplicationPrivilegeError {
  return new ReplicationPrivilegeError(action, role, `ALTER ROLE ${quoteIdentifier(role)} WITH REPLICATION;`, errorMessage(error), { cause: error })
}

export function isPrivilegeError(error: unknown): boolean {
  return sqlState(error) === SqlState.insufficientPrivilege
}
