/** CPU time of a process and all its descendants (nginx's workers, varnishd's cache process), from /proc. */
import { readFileSync, readdirSync } from 'node:fs'
import { processCpuMs } from '../pipeline/proc.js'

function children(pid: number): number[] {
  const out: number[] = []
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const text = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim()
      if (text !== '') out.push(...text.split(' ').map(Number))
    }
  } catch {
    // Gone meanwhile.
  }
  return out
}

export function treeCpuMs(pid: number): number {
  let total = processCpuMs(pid) ?? 0
  for (const child of children(pid)) total += treeCpuMs(child)
  return total
}
