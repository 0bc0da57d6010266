// `npm run start:server` and `npm start` as a user runs them from a checkout: scripts/run.mjs builds what
// is not built yet (turbo's cache makes a repeat a no-op) and starts compiled JavaScript, not the
// TypeScript sources through tsx. A preloaded hook (record-modules.mjs) lists every module the server
// process loads.
import { type ChildProcess, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { chmod } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import { afterEach, describe, expect, it } from 'vitest'

const ROOT = fileURLToPath(new URL('../../../../', import.meta.url))
const RECORDER = fileURLToPath(new URL('./record-modules.mjs', import.meta.url))
const dirs = useTempDir('start-compiled')
const cluster = usePostgres()

const children: ChildProcess[] = []
const slots: string[] = []
afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) process.kill(-c.pid!, 'SIGKILL')
  for (const slot of slots.splice(0)) {
    await cluster.query('SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active', [slot])
  }
})

interface Started {
  readonly child: ChildProcess
  readonly match: RegExpExecArray
  readonly exited: Promise<number | null>
  output(): string
}

/** Runs `node scripts/run.mjs <task> ...args` with the recorder preloaded; resolves once stdout matches `ready`. */
function runTask(task: string, args: readonly string[], env: Record<string, string>, ready: RegExp): Promise<Started> {
  const clean: NodeJS.ProcessEnv = {}
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('SLUICE_') && k !== 'DATABASE_URL' && k !== 'NODE_OPTIONS') clean[k] = v
  const child = spawn(process.execPath, [join(ROOT, 'scripts', 'run.mjs'), task, ...args], {
    cwd: ROOT,
    env: { ...clean, NODE_OPTIONS: `--import=${pathToFileURL(RECORDER).href}`, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    // A group of its own, so a failed test can kill the task and the server it started.
    detached: true,
  })
  children.push(child)
  let out = ''
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()))
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()))
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  return new Promise((resolve, reject) => {
    const check = (): void => {
      const match = ready.exec(out)
      if (match !== null) {
        child.stdout!.off('data', check)
        resolve({ child, match, exited, output: () => out })
      }
    }
    child.stdout!.on('data', check)
    void exited.then((code) => reject(new Error(`${task} exited (${code}) before ${ready}:\n${out}`)))
  })
}

async function storageDir(): Promise<string> {
  const dir = await dirs.make('store')
  await chmod(dir, 0o755)
  return dir
}

/** What the recorder saw, with the checks every compiled start must pass. */
function expectCompiled(recordFile: string, entry: string): void {
  const urls = readFileSync(recordFile, 'utf8').split('\n').filter((u) => u !== '')
  const href = (path: string): string => pathToFileURL(join(ROOT, path)).href
  expect(urls).toContain(href(entry))
  // No TypeScript source and no tsx: everything ran as compiled JavaScript.
  expect(urls.filter((u) => /\.tsx?$/.test(u) || /\/tsx[@/]/.test(u))).toEqual([])
  const server = urls.filter((u) => u.startsWith(href('packages/server/dist/')))
  if (entry.endsWith('sluice.mjs')) {
    // The bundle holds the server, storage and protocol: none of their modules is loaded on its own.
    expect(server).toEqual([href(entry)])
    for (const pkg of ['storage', 'protocol']) expect(urls.filter((u) => u.startsWith(href(`packages/${pkg}/`)))).toEqual([])
    // The packages that find files beside their code stay outside it.
    expect(urls).toContain(href('packages/sendfile/dist/index.js'))
    return
  }
  // The CLI imports the server's modules by path, the demo through its index: dist/ either way.
  expect(server.length).toBeGreaterThan(10)
  for (const pkg of ['storage', 'protocol']) expect(urls).toContain(href(`packages/${pkg}/dist/index.js`))
}

describe('a start from a checkout runs compiled JavaScript', () => {
  it('npm run start:server builds and runs the bundle of dist/ (dist/sluice.mjs), no tsx; SLUICE_UNBUNDLED=1 runs dist/main.js and the packages\' dist/', async () => {
    const dir = await storageDir()
    const record = join(dir, 'modules.txt')
    slots.push('start_compiled_server')
    const started = await runTask(
      'server',
      ['--port', '0', '--database-url', cluster.url, '--storage-dir', join(dir, 'data'), '--slot', 'start_compiled_server'],
      { RECORD_MODULES_FILE: record },
      /HTTP: +(http:\/\/127\.0\.0\.1:\d+)/,
    )
    const url = started.match[1]!
    expect((await fetch(`${url}/v1/health`)).status).toBe(200)
    process.kill(started.child.pid!, 'SIGTERM')
    expect(await started.exited).toBe(0)
    expectCompiled(record, 'packages/server/dist/sluice.mjs')

    // The build is current now (the task built it): the same start, module by module.
    const unbundled = join(dir, 'unbundled.txt')
    slots.push('start_compiled_unbundled')
    const again = await runTask(
      'server',
      ['--port', '0', '--database-url', cluster.url, '--storage-dir', join(dir, 'data2'), '--slot', 'start_compiled_unbundled'],
      { RECORD_MODULES_FILE: unbundled, SLUICE_UNBUNDLED: '1' },
      /HTTP: +(http:\/\/127\.0\.0\.1:\d+)/,
    )
    expect((await fetch(`${again.match[1]!}/v1/health`)).status).toBe(200)
    process.kill(again.child.pid!, 'SIGTERM')
    expect(await again.exited).toBe(0)
    expectCompiled(unbundled, 'packages/server/dist/main.js')
  }, 300_000)

  it("npm start builds and runs the demo's compiled server (apps/todo/dist-server) on the compiled packages, no tsx", async () => {
    const dir = await storageDir()
    const record = join(dir, 'modules.txt')
    slots.push('start_compiled_demo')
    const started = await runTask(
      'start',
      ['--port', '0', '--database-url', cluster.url, '--storage-dir', join(dir, 'data'), '--slot', 'start_compiled_demo', '--publication', 'start_compiled_demo'],
      { RECORD_MODULES_FILE: record, TODO_PORT: '0', TODO_HOST: '127.0.0.1' },
      /open (http:\/\/127\.0\.0\.1:\d+)/,
    )
    const page = await fetch(started.match[1]!)
    expect(page.status).toBe(200)
    expect(await page.text()).toContain('<div id="root">')
    process.kill(started.child.pid!, 'SIGTERM')
    expect(await started.exited).toBe(0)
    expectCompiled(record, 'apps/todo/dist-server/demo.js')
  }, 300_000)
})
