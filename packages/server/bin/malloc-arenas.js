// Runs `sluice start` again in place (execve: the same pid) with
// MALLOC_ARENA_MAX set, before anything else happens in the process. glibc
// gives every thread that allocates an arena of its own, up to 8 per core, and
// each arena keeps the pages its surviving chunks sit on: V8's helper threads
// and the thread pool, busy while thousands of shapes are made and removed,
// leave several MiB resident for good. The variable is read once, as the
// allocator starts; mallopt from the running server (heap-trim.ts
// `limitMallocArenas`) comes after V8's threads already took their arenas.
// A MALLOC_ARENA_MAX in the environment stands; where the native addon cannot
// load, or exec fails, the process goes on as it is. SLUICE_MALLOC_REEXEC=0
// turns it off.
import { createRequire } from 'node:module'
import { getSystemErrorName } from 'node:util'

/** As `MALLOC_ARENAS` in src/defaults.ts: the main thread's arena and one that the other threads share. */
export const ARENAS = '2'

/** Whether `argv` (after the script) runs the server, not `--help` or `--version`. */
export function startsServer(argv) {
  return !argv.some((a) => a === '--help' || a === '-h' || a === 'help' || a === '--version' || a === '-v' || a === 'version')
}

/**
 * Re-executes the process with the arena cap set; returns when it does not
 * (already set, turned off, not the server, or no addon with execSelf at
 * `addonPath()`). The addon is loaded straight from its file: no module of
 * the package needs to be built, and little runs before the exec.
 */
export function execWithArenaCap(argv, env, addonPath) {
  if (env.MALLOC_ARENA_MAX !== undefined || env.SLUICE_MALLOC_REEXEC === '0' || !startsServer(argv)) return
  if (process.platform !== 'linux') return
  let addon
  try {
    addon = createRequire(import.meta.url)(addonPath())
  } catch {
    // The optional package is missing, or its addon was not built.
    return
  }
  if (typeof addon.execSelf !== 'function') return
  const args = [process.argv0, ...process.execArgv, ...process.argv.slice(1)]
  const vars = Object.entries({ ...env, MALLOC_ARENA_MAX: ARENAS }).flatMap(([k, v]) => (v === undefined ? [] : [`${k}=${v}`]))
  const errno = addon.execSelf(process.execPath, args, vars)
  process.stderr.write(`sluice: could not restart with MALLOC_ARENA_MAX=${ARENAS} (execve: ${getSystemErrorName(-errno)}); going on without\n`)
}
