import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'

export interface OsUser {
  readonly name: string
  readonly uid: number
  readonly gid: number
}

function parsePasswdLine(line: string): OsUser | undefined {
  const [name, , uid, gid] = line.split(':')
  if (name === undefined || uid === undefined || gid === undefined) return undefined
  return { name, uid: Number(uid), gid: Number(gid) }
}

/** Looks a user up through NSS (`getent`), falling back to /etc/passwd. */
export function lookupUser(name: string): OsUser | undefined {
  const getent = spawnSync('getent', ['passwd', name], { encoding: 'utf8' })
  if (getent.error === undefined) {
    return getent.status === 0 ? parsePasswdLine(getent.stdout.trim()) : undefined
  }
  try {
    const line = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .find((l) => l.startsWith(`${name}:`))
    return line === undefined ? undefined : parsePasswdLine(line)
  } catch {
    return undefined
  }
}

/**
 * The user the Postgres binaries must run as: undefined means "as ourselves".
 * Postgres refuses to run as root, so root hands the work to the `postgres` user.
 */
export function postgresOsUser(): OsUser | undefined {
  if (process.getuid?.() !== 0) return undefined
  const user = lookupUser('postgres')
  if (user === undefined) {
    throw new Error(
      'startPostgres: running as root, but Postgres refuses to run as root and there is no `postgres` OS user ' +
        'to run it as. Create one (for example `useradd --system --user-group --home-dir /var/lib/postgresql ' +
        '--shell /bin/bash postgres`, or `apt-get install postgresql` which creates it), or run the tests as a non-root user.',
    )
  }
  return user
}
