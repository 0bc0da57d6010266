/**
 * configureYoungGc: the decision (a flag Node was started with stands; otherwise parallel
 * scavenges only above two cores), and its effect on V8, seen in a child
 * process's own GC trace: after the call no scavenge has helper-thread work.
 */
import { spawnSync } from 'node:child_process'
import { availableParallelism } from 'node:os'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { youngGcSetting } from '../../src/young-gc.js'

const MODULE = pathToFileURL(fileURLToPath(new URL('../../src/young-gc.ts', import.meta.url))).href

describe('youngGcSetting', () => {
  it('keeps parallel scavenges above two cores and turns them off at two or fewer', () => {
    expect(youngGcSetting([], 1)).toEqual({ parallelScavenge: false, source: 'auto' })
    expect(youngGcSetting([], 2)).toEqual({ parallelScavenge: false, source: 'auto' })
    expect(youngGcSetting([], 3)).toEqual({ parallelScavenge: true, source: 'auto' })
    expect(youngGcSetting(['--max-old-space-size=4096', '--enable-source-maps'], 2)).toEqual({ parallelScavenge: false, source: 'auto' })
  })

  it('leaves a flag Node was started with in force, in any spelling V8 takes, the last one winning', () => {
    for (const on of ['--parallel-scavenge', '--parallel_scavenge', '-parallel-scavenge']) {
      expect(youngGcSetting([on], 2)).toEqual({ parallelScavenge: true, source: 'flag' })
    }
    for (const off of ['--no-parallel-scavenge', '--noparallel-scavenge', '--no_parallel_scavenge', '-no-parallel-scavenge']) {
      expect(youngGcSetting(['--expose-gc', off], 64)).toEqual({ parallelScavenge: false, source: 'flag' })
    }
    expect(youngGcSetting(['--no-parallel-scavenge', '--parallel-scavenge'], 2)).toEqual({ parallelScavenge: true, source: 'flag' })
    expect(youngGcSetting(['--parallel-scavenge', '--no-parallel-scavenge'], 64)).toEqual({ parallelScavenge: false, source: 'flag' })
    // Not the flag: names that merely contain it.
    expect(youngGcSetting(['--parallel-scavenge-extra', '--trace-parallel-scavenge'], 2)).toEqual({ parallelScavenge: false, source: 'auto' })
  })
})

/** Helper-thread milliseconds of each scavenge in a child that calls configureYoungGc(cores), or none if `cores` is undefined. */
function helperMsPerScavenge(cores: number | undefined): number[] {
  const code = `
    const { configureYoungGc } = await import(${JSON.stringify(MODULE)})
    ${cores === undefined ? '' : `console.log('setting ' + JSON.stringify(configureYoungGc(${cores})))`}
    console.log('start')
    let keep = []
    for (let k = 0; k < 2e6; k++) { keep.push({ k, s: 'x' + k }); if (keep.length > 200000) keep = [] }
  `
  const env = { ...process.env }
  delete env.NODE_OPTIONS
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--trace-gc-nvp', '--input-type=module', '-e', code], { encoding: 'utf8', env })
  expect(r.status, r.stderr).toBe(0)
  const after = r.stdout.slice(r.stdout.indexOf('start\n'))
  if (cores !== undefined) expect(r.stdout).toContain(`setting {"parallelScavenge":${cores > 2},"source":"auto"}`)
  const ms = [...after.matchAll(/gc=s .*?background\.scavenge\.parallel=([\d.]+)/g)].map((m) => Number(m[1]))
  expect(ms.length).toBeGreaterThan(5)
  return ms
}

describe('configureYoungGc', () => {
  it('makes every later scavenge a main-thread one on two cores', () => {
    expect(helperMsPerScavenge(2).every((ms) => ms === 0)).toBe(true)
    // The same work with V8's default shares scavenges with helpers wherever there is a second core.
    if (availableParallelism() >= 2) expect(helperMsPerScavenge(undefined).some((ms) => ms > 0)).toBe(true)
  })
})
