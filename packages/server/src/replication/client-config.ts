import type pg from 'pg'
import { DISPLAY_SETTINGS, startupOptions } from './display-settings.js'
import { SqlState, configurationError, errorMessage, replicationRoleError, sqlState } from './pg-error-mapping.js'
import { PublicationNotFoundError, ReplicationError, SlotNotFoundError } from './replication-errors.js'
import type { ReplicationClientOptions } from './replication-client.js'
import { toError } from './replication-stream.js'

/*
 * The replication connection's pg configuration, and what its failures mean.
 */

/** The session settings go in the `options` startup parameter, after any the caller set. */
export function buildClientConfig(options: ReplicationClientOptions): pg.ClientConfig {
  const base: pg.ClientConfig = typeof options.connection === 'string' ? { connectionString: options.connection } : { ...options.connection }
  const settings = startupOptions({ ...DISPLAY_SETTINGS, ...options.settings })
  return {
    ...base,
    options: base.options === undefined ? settings : `${base.options} ${settings}`,
    application_name: options.applicationName ?? base.application_name ?? 'sluice_replication',
    // A dead peer is noticed by TCP too, not only by our liveness check.
    keepAlive: true,
  }
}

function roleOf(config: pg.ClientConfig): string {
  if (config.user !== undefined) return config.user
  if (config.connectionString !== undefined) {
    try {
      const user = decodeURIComponent(new URL(config.connectionString).username)
      if (user !== '') return user
    } catch {
      // Not a URL (a key=value string): fall through.
    }
  }
  return 'the replication role'
}

/** Server errors that name a cause get our typed, actionable errors. */
export function translateStreamError(error: Error, config: pg.ClientConfig, publicationNames: readonly string[], slotName: string): Error {
  if (error instanceof ReplicationError) return error
  const state = sqlState(error)
  const message = errorMessage(error)
  if (state === SqlState.insufficientPrivilege) return replicationRoleError('open a replication connection', roleOf(config), error)
  if (state === SqlState.undefinedObject && /publication/i.test(message)) {
    return new PublicationNotFoundError(publicationNames.join(', '), message)
  }
  if (state === SqlState.undefinedObject && /replication slot/i.test(message)) return new SlotNotFoundError(slotName)
  return toError(configurationError(error))
}
