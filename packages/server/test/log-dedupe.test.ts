import { describe, expect, it } from 'vitest'
import { type DedupeTimers, LogDedupe, errorKey } from '../src/log-dedupe.js'

/** Timers that fire only when the test says the window has passed. */
function manualTimers(): DedupeTimers & { fire(): void; readonly pending: number } {
  const due = new Set<() => void>()
  const handles = new Map<object, () => void>()
  return {
    setTimeout(callback) {
      const handle = {}
      handles.set(handle, callback)
      due.add(callback)
      return handle
    },
    clearTimeout(handle) {
      const callback = handles.get(handle as object)
      if (callback !== undefined) due.delete(callback)
      handles.delete(handle as object)
    },
    fire() {
      const now = [...due]
      due.clear()
      handles.clear()
      for (const callback of now) callback()
    },
    get pending() {
      return due.size
    },
  }
}

type Line = { data: Record<string, unknown>; message: string }

function recorder(): { lines: Line[]; write: (data: Record<string, unknown>, message: string) => void } {
  const lines: Line[] = []
  return { lines, write: (data, message) => lines.push({ data, message }) }
}

describe('LogDedupe', () => {
  it('writes the first occurrence, counts the repeats, and writes one summary line per window with the count', () => {
    const timers = manualTimers()
    const dedupe = new LogDedupe({ windowMs: 10_000, timers })
    const { lines, write } = recorder()
    const err = new Error('ENOSPC: no space left on device, write')
    for (let i = 0; i < 400; i++) dedupe.log(errorKey('storage error', err), write, { err, attempt: i }, 'storage error')
    expect(lines).toEqual([{ data: { err, attempt: 0 }, message: 'storage error' }])
    expect(dedupe.pendingRepeats).toBe(399)

    timers.fire()
    expect(lines).toHaveLength(2)
    // The summary carries the last occurrence's fields.
    expect(lines[1]).toEqual({ data: { err, attempt: 399, repeated: 399, windowMs: 10_000 }, message: 'storage error (repeated 399 times)' })

    // Still failing in the next window: counted again, one more summary.
    dedupe.log(errorKey('storage error', err), write, { err, attempt: 400 }, 'storage error')
    expect(lines).toHaveLength(2)
    timers.fire()
    expect(lines[2]!.message).toBe('storage error (repeated 1 time)')

    // A window without repeats ends silently and forgets the key: the next occurrence is written in full.
    timers.fire()
    expect(lines).toHaveLength(3)
    expect(timers.pending).toBe(0)
    dedupe.log(errorKey('storage error', err), write, { err, attempt: 401 }, 'storage error')
    expect(lines[3]).toEqual({ data: { err, attempt: 401 }, message: 'storage error' })
  })

  it('keeps different errors apart: each is written once and summarised on its own', () => {
    const timers = manualTimers()
    const dedupe = new LogDedupe({ windowMs: 1000, timers })
    const { lines, write } = recorder()
    const full = Object.assign(new Error('commit the journal failed'), { code: 'disk_full' })
    const io = Object.assign(new Error('commit the journal failed'), { code: 'io_error' })
    const lost = new Error('connection lost')
    for (let i = 0; i < 3; i++) {
      dedupe.log(errorKey('storage error', full), write, { err: full }, 'storage error')
      dedupe.log(errorKey('storage error', io), write, { err: io }, 'storage error')
      dedupe.log(errorKey('replication disconnected', lost), write, { err: lost, retryInMs: 100 + i }, 'replication disconnected')
    }
    expect(lines.map((l) => l.message)).toEqual(['storage error', 'storage error', 'replication disconnected'])
    timers.fire()
    expect(lines.slice(3).map((l) => [l.message, l.data['repeated']])).toEqual([
      ['storage error (repeated 2 times)', 2],
      ['storage error (repeated 2 times)', 2],
      ['replication disconnected (repeated 2 times)', 2],
    ])
  })

  it('flush() writes what is counted at once and forgets every key (a fault cleared, the process stops)', () => {
    const timers = manualTimers()
    const dedupe = new LogDedupe({ windowMs: 1000, timers })
    const { lines, write } = recorder()
    const err = new Error('EIO')
    for (let i = 0; i < 5; i++) dedupe.log(errorKey('storage error', err), write, { err }, 'storage error')
    dedupe.log(errorKey('other', err), write, { err }, 'other')
    dedupe.flush()
    expect(lines.map((l) => l.message)).toEqual(['storage error', 'other', 'storage error (repeated 4 times)'])
    expect(timers.pending).toBe(0)
    expect(dedupe.pendingRepeats).toBe(0)
    dedupe.log(errorKey('storage error', err), write, { err }, 'storage error')
    expect(lines).toHaveLength(4)
  })

  it('keys errors by message, class, code and text, not by the fields that vary', () => {
    const a = Object.assign(new Error('x'), { code: 'disk_full' })
    expect(errorKey('m', a)).toBe(errorKey('m', Object.assign(new Error('x'), { code: 'disk_full' })))
    expect(errorKey('m', a)).not.toBe(errorKey('m', Object.assign(new Error('x'), { code: 'io_error' })))
    expect(errorKey('m', a)).not.toBe(errorKey('n', a))
    expect(errorKey('m', a)).not.toBe(errorKey('m', Object.assign(new TypeError('x'), { code: 'disk_full' })))
    expect(errorKey('m', 'text')).toBe(errorKey('m', 'text'))
  })

  it('counts errors that differ only in their numbers as one (the next journal segment, a watermark)', () => {
    const open = (generation: string) => Object.assign(new Error(`commit the journal failed: ENOSPC: open '/s/journal/${generation}.jnl'; durable watermark stays at 2207`), { code: 'disk_full' })
    expect(errorKey('storage error', open('00000005'))).toBe(errorKey('storage error', open('00000006')))
    expect(errorKey('storage error', open('00000005'))).not.toBe(errorKey('storage error', new Error('commit the journal failed: EIO')))
  })
})
