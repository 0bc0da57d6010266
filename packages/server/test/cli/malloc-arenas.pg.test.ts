// `sluice start` runs itself again in place with MALLOC_ARENA_MAX set (bin/malloc-arenas.js), so that
// glibc caps the arenas of every thread, V8's helpers included: the process a supervisor started keeps
// its pid, its arguments and its standard descriptors, and a MALLOC_ARENA_MAX of the user's stands.
import { readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { BIN, cleanEnv, sluice } from './sluice-run.js'

const dirs = useTempDir('arenas')
const cluster = usePostgres()

/** The environment the process image now running was started with, and its arguments. */
function procOf(pid: number): { env: string[]; argv: string[] } {
  const split = (file: string): string[] => readFileSync(`/proc/${pid}/${file}`, 'utf8').split('\0').filter((s) => s !== '')
  return { env: split('environ'), argv: split('cmdline') }
}

describe('malloc arena cap at start', () => {
  it('runs the server again in the same process with MALLOC_ARENA_MAX=2, node flags and arguments kept; a MALLOC_ARENA_MAX of the user stands', async () => {
    const dir = await dirs.make()
    const args = ['start', '--database-url', cluster.url, '--storage-dir', dir, '--port', '0', '--slot', 'arenas_slot', '--publication', 'arenas_pub']
    const nodeArgs = ['--max-old-space-size=512']
    const run = sluice(args, { nodeArgs })
    const [, httpUrl] = await run.waitFor(/HTTP: +(http:\/\/127\.0\.0\.1:\d+)/)
    // The banner came through the pipe the child was started with, from the pid it was started as.
    const pid = run.child.pid!
    const { env, argv } = procOf(pid)
    expect(argv).toEqual([process.execPath, ...nodeArgs, BIN, ...args])
    expect(env).toContain('MALLOC_ARENA_MAX=2')
    // Nothing else of the environment changed.
    const given = Object.entries(cleanEnv()).map(([k, v]) => `${k}=${v}`)
    expect(env.filter((e) => !e.startsWith('MALLOC_ARENA_MAX=')).sort()).toEqual(given.sort())
    expect((await fetch(`${httpUrl}/v1/health`)).status).toBe(200)
    run.child.kill('SIGTERM')
    expect(await run.exited).toEqual({ code: 0, signal: null })

    const mine = sluice(args, { env: { MALLOC_ARENA_MAX: '4' } })
    await mine.waitFor(/HTTP: +(http:\/\/127\.0\.0\.1:\d+)/)
    const own = procOf(mine.child.pid!)
    expect(own.argv).toEqual([process.execPath, BIN, ...args])
    expect(own.env.filter((e) => e.startsWith('MALLOC_ARENA_MAX='))).toEqual(['MALLOC_ARENA_MAX=4'])
    mine.child.kill('SIGTERM')
    expect(await mine.exited).toEqual({ code: 0, signal: null })
    await cluster.dropReplicationSlots()
  })

  it('survives the restart under a sampling profiler (a profiler tick pending at the exec does not end the new image) and writes its profile', async () => {
    const dir = await dirs.make()
    const profiles = await dirs.make()
    const args = ['start', '--database-url', cluster.url, '--storage-dir', dir, '--port', '0', '--slot', 'arenas_prof_slot', '--publication', 'arenas_prof_pub']
    // Ticks every 50 µs: one is all but certain to be pending when the process runs execve.
    const run = sluice(args, { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${profiles}`, '--cpu-prof-interval=50'] })
    const [, httpUrl] = await run.waitFor(/HTTP: +(http:\/\/127\.0\.0\.1:\d+)/)
    expect(procOf(run.child.pid!).env).toContain('MALLOC_ARENA_MAX=2')
    expect((await fetch(`${httpUrl}/v1/health`)).status).toBe(200)
    run.child.kill('SIGTERM')
    expect(await run.exited).toEqual({ code: 0, signal: null })
    // Named CPU.<date>.<time>.<pid>.<thread>.<n>.cpuprofile; a worker thread of the server writes its own.
    const pid = run.child.pid!
    const written = readdirSync(profiles).filter((f) => f.endsWith('.cpuprofile'))
    const main = written.filter((f) => f.split('.')[3] === String(pid) && f.split('.')[4] === '0')
    expect(main, written.join(' ')).toHaveLength(1)
    const profile = JSON.parse(readFileSync(join(profiles, main[0]!), 'utf8')) as { samples: number[] }
    expect(profile.samples.length).toBeGreaterThan(100)
    await cluster.dropReplicationSlots()
  })
})
