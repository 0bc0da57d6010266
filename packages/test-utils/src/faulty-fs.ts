import { systemError, errnoOf } from './system-error.js'

/**
 * A fault-injecting wrapper around any filesystem-like object whose methods
 * follow node:fs conventions. It knows nothing about the code under test: the
 * only conventions it relies on are node's own:
 *   - a method named `*Sync` reports failure by throwing;
 *   - any other method whose last argument is a function is callback-style;
 *   - any other method reports failure by returning a rejected promise.
 */

/** Names of the function-valued properties of `T` (optional ones included). */
export type FsMethodName<T> = {
  [K in keyof T]-?: NonNullable<T[K]> extends (...args: never[]) => unknown ? K : never
}[keyof T] &
  string

/** Errno codes a test typically injects; any code the OS knows is accepted. */
export type FaultCode =
  | 'ENOSPC'
  | 'EIO'
  | 'EDQUOT'
  | 'EROFS'
  | 'EACCES'
  | 'EPERM'
  | 'ENOENT'
  | 'EEXIST'
  | 'EBADF'
  | 'EMFILE'
  | 'ENFILE'
  | 'EINTR'
  | 'EAGAIN'
  | 'EBUSY'
  | 'ENOTEMPTY'
  | (string & {})

/** Receives a call's arguments exactly as the caller passed them. */
export type ArgsMatcher = (args: readonly unknown[]) => boolean

export interface FailOptions {
  code: FaultCode
  /** How many matching calls fail (failNext only); default 1. */
  times?: number
  /** Only calls for which this returns true are affected (and counted against `times`). */
  match?: ArgsMatcher
  /**
   * 'before' (default): the real operation never happens, as when the kernel
   * refuses it. 'after': it happens, and the error is reported anyway, as when
   * a rename reached the disk but the caller saw EIO.
   */
  when?: 'before' | 'after'
}

export interface TornWriteOptions {
  /** Bytes of the data that really reach the file; default 'half'. Clamped to the data's size. */
  bytes?: number | 'half' | ((total: number) => number)
  /** Error reported after the partial write; default 'EIO'. */
  code?: FaultCode
  /** How many writes are torn; default 1. */
  times?: number
  match?: ArgsMatcher
  /** Which write methods to tear; default writeSync, writevSync, write, writev. */
  methods?: readonly string[]
}

/** A registered fault; `hits` counts the calls it has affected. */
export interface FaultRule {
  readonly hits: number
  /** False once used up or removed. */
  readonly active: boolean
  remove(): void
}

export interface FaultRules<T> {
  /** The next `times` matching calls of `method` ('*' = any method) fail with `code`. */
  failNext(method: FsMethodName<T> | '*', options: FailOptions): FaultRule
  /** Every matching call of `method` fails until the rule is removed or `clear()` is called. */
  failAlways(method: FsMethodName<T> | '*', options: Omit<FailOptions, 'times'>): FaultRule
  /** The next write writes only a prefix of its data at its position, then fails. */
  tornWrite(options?: TornWriteOptions): FaultRule
  /** Removes every rule: from now on every call goes straight to the real filesystem. */
  clear(): void
  /** Calls of `method` through the wrapper so far, failed ones included. */
  calls(method: FsMethodName<T>): number
  callCounts(): Record<string, number>
  resetCalls(): void
}

export interface FaultyFs<T> {
  /** Same methods as the real filesystem; unknown properties pass through untouched. */
  readonly fs: T
  readonly rules: FaultRules<T>
}

const DEFAULT_TORN_METHODS = ['writeSync', 'writevSync', 'write', 'writev'] as const

type RealFunction = (...args: unknown[]) => unknown
type CallMode = 'sync' | 'promise' | 'callback'

interface Rule {
  readonly kind: 'fail' | 'torn'
  readonly methods: ReadonlySet<string> | '*'
  readonly code: string
  readonly match: ArgsMatcher | undefined
  readonly when: 'before' | 'after'
  readonly bytes: number | 'half' | ((total: number) => number)
  remaining: number
  hits: number
  active: boolean
}

function callModeOf(method: string, args: readonly unknown[]): CallMode {
  if (method.endsWith('Sync')) return 'sync'
  return typeof args[args.length - 1] === 'function' ? 'callback' : 'promise'
}

function syscallOf(method: string): string {
  return method.endsWith('Sync') ? method.slice(0, -'Sync'.length) : method
}

const TWO_PATH_METHODS = /^(rename|copyFile|link|symlink|cp)(Sync)?$/

function pathsOf(method: string, args: readonly unknown[]): [string | undefined, string | undefined] {
  const first = typeof args[0] === 'string' ? args[0] : undefined
  const second = TWO_PATH_METHODS.test(method) && typeof args[1] === 'string' ? args[1] : undefined
  return [first, second]
}

function prefixLength(total: number, bytes: Rule['bytes']): number {
  const wanted = bytes === 'half' ? Math.floor(total / 2) : typeof bytes === 'function' ? bytes(total) : bytes
  return Math.max(0, Math.min(total, Math.floor(wanted)))
}

interface TornPlan {
  readonly args: unknown[]
  readonly length: number
}

function asBytes(view: ArrayBufferView, offset: number, length: number): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset + offset, length)
}

/** Arguments for the real `write`/`writeSync` that write only a prefix, at the caller's position. */
function tornWritePlan(args: readonly unknown[], bytes: Rule['bytes']): TornPlan | undefined {
  const [fd, data, a, b, c] = args
  let view: Uint8Array
  let position: unknown
  if (typeof data === 'string') {
    // write(fd, string, position?, encoding?)
    view = Buffer.from(data, typeof b === 'string' ? (b as BufferEncoding) : 'utf8')
    position = a ?? null
  } else if (ArrayBuffer.isView(data)) {
    if (a !== null && typeof a === 'object') {
      // write(fd, buffer, { offset, length, position })
      const o = a as { offset?: number; length?: number; position?: number | null }
      const offset = o.offset ?? 0
      view = asBytes(data, offset, o.length ?? data.byteLength - offset)
      position = o.position ?? null
    } else {
      // write(fd, buffer, offset?, length?, position?)
      const offset = typeof a === 'number' ? a : 0
      view = asBytes(data, offset, typeof b === 'number' ? b : data.byteLength - offset)
      position = c ?? null
    }
  } else {
    return undefined
  }
  const length = prefixLength(view.byteLength, bytes)
  return { args: [fd, view.subarray(0, length), 0, length, position], length }
}

/** Arguments for the real `writev`/`writevSync` that write only a prefix of the concatenated buffers. */
function tornWritevPlan(args: readonly unknown[], bytes: Rule['bytes']): TornPlan | undefined {
  const [fd, buffers, position] = args
  if (!Array.isArray(buffers)) return undefined
  const views = buffers.filter((b): b is ArrayBufferView => ArrayBuffer.isView(b))
  const total = views.reduce((sum, v) => sum + v.byteLength, 0)
  let left = prefixLength(total, bytes)
  const length = left
  const prefix: Uint8Array[] = []
  for (const view of views) {
    if (left === 0) break
    const take = Math.min(left, view.byteLength)
    prefix.push(asBytes(view, 0, take))
    left -= take
  }
  return { args: [fd, prefix, position ?? null], length }
}

/**
 * Wraps `realFs` so a test can make chosen calls fail the way a full or failing
 * disk makes them fail. Faults are decided per call, in the order rules were added.
 */
export function createFaultyFs<T extends object>(realFs: T): FaultyFs<T> {
  const target = realFs as Record<PropertyKey, unknown>
  let rules: Rule[] = []
  const counts = new Map<string, number>()
  const wrappers = new Map<string, { real: unknown; wrapper: RealFunction }>()

  const takeRule = (method: string, args: readonly unknown[]): Rule | undefined => {
    const rule = rules.find(
      (r) => r.active && (r.methods === '*' || r.methods.has(method)) && (r.match === undefined || r.match(args)),
    )
    if (rule === undefined) return undefined
    rule.hits++
    rule.remaining--
    if (rule.remaining <= 0) {
      rule.active = false
      rules = rules.filter((r) => r !== rule)
    }
    return rule
  }

  const callReal = (real: RealFunction, args: readonly unknown[]): unknown => real.apply(realFs, args as unknown[])

  const report = (mode: CallMode, args: readonly unknown[], error: Error): unknown => {
    if (mode === 'sync') throw error
    if (mode === 'promise') return Promise.reject(error)
    process.nextTick(args[args.length - 1] as (err: Error) => void, error)
    return undefined
  }

  /** Runs the real call (really `realArgs`), then reports `error` however the method reports errors. */
  const runThenFail = (mode: CallMode, real: RealFunction, realArgs: readonly unknown[] | undefined, args: readonly unknown[], error: Error): unknown => {
    if (mode === 'sync') {
      if (realArgs !== undefined) callReal(real, realArgs)
      throw error
    }
    if (mode === 'promise') {
      const done = realArgs === undefined ? Promise.resolve() : Promise.resolve(callReal(real, realArgs))
      return done.then(() => {
        throw error
      })
    }
    const callback = args[args.length - 1] as (err: unknown) => void
    if (realArgs === undefined) {
      process.nextTick(callback, error)
      return undefined
    }
    // A real failure of the partial operation wins: it is what the caller would have seen first.
    callReal(real, [...realArgs, (realError: unknown) => callback(realError ?? error)])
    return undefined
  }

  const invoke = (method: string, real: RealFunction, args: unknown[]): unknown => {
    counts.set(method, (counts.get(method) ?? 0) + 1)
    const rule = takeRule(method, args)
    if (rule === undefined) return callReal(real, args)
    const mode = callModeOf(method, args)
    const error = systemError(rule.code, syscallOf(method), ...pathsOf(method, args))
    const ownArgs = mode === 'callback' ? args.slice(0, -1) : args
    if (rule.kind === 'torn') {
      const plan = method.startsWith('writev') ? tornWritevPlan(ownArgs, rule.bytes) : tornWritePlan(ownArgs, rule.bytes)
      if (plan === undefined) return report(mode, args, error)
      return runThenFail(mode, real, plan.length > 0 ? plan.args : undefined, args, error)
    }
    if (rule.when === 'after') return runThenFail(mode, real, ownArgs, args, error)
    return report(mode, args, error)
  }

  const wrapperFor = (method: string, real: RealFunction): RealFunction => {
    const cached = wrappers.get(method)
    if (cached !== undefined && cached.real === real) return cached.wrapper
    const wrapper = (...args: unknown[]): unknown => invoke(method, real, args)
    wrappers.set(method, { real, wrapper })
    return wrapper
  }

  const get = (prop: PropertyKey): unknown => {
    const value = Reflect.get(target, prop)
    if (typeof prop !== 'string' || typeof value !== 'function') return value
    return wrapperFor(prop, value as RealFunction)
  }

  // The proxy's own target is an empty object rather than `realFs`, so a frozen
  // port (whose non-writable properties a proxy could not replace) still works.
  const fs = new Proxy(Object.create(null) as object, {
    get: (_t, prop) => get(prop),
    has: (_t, prop) => Reflect.has(target, prop),
    ownKeys: () => Reflect.ownKeys(target),
    getOwnPropertyDescriptor: (_t, prop) => {
      const descriptor = Reflect.getOwnPropertyDescriptor(target, prop)
      if (descriptor === undefined) return undefined
      return { configurable: true, enumerable: descriptor.enumerable ?? true, writable: false, value: get(prop) }
    },
    set: () => false,
    defineProperty: () => false,
    deleteProperty: () => false,
  }) as T

  const checkCode = (code: string): void => {
    if (errnoOf(code) === undefined) throw new TypeError(`createFaultyFs: ${code} is not an errno code on ${process.platform}`)
  }

  const add = (rule: Rule): FaultRule => {
    checkCode(rule.code)
    rules.push(rule)
    return {
      get hits() {
        return rule.hits
      },
      get active() {
        return rule.active
      },
      remove() {
        rule.active = false
        rules = rules.filter((r) => r !== rule)
      },
    }
  }

  const methodsOf = (method: string): Rule['methods'] => (method === '*' ? '*' : new Set([method]))

  const faultRules: FaultRules<T> = {
    failNext(method, options) {
      return add({
        kind: 'fail',
        methods: methodsOf(method),
        code: options.code,
        match: options.match,
        when: options.when ?? 'before',
        bytes: 0,
        remaining: options.times ?? 1,
        hits: 0,
        active: true,
      })
    },
    failAlways(method, options) {
      return add({
        kind: 'fail',
        methods: methodsOf(method),
        code: options.code,
        match: options.match,
        when: options.when ?? 'before',
        bytes: 0,
        remaining: Number.POSITIVE_INFINITY,
        hits: 0,
        active: true,
      })
    },
    tornWrite(options = {}) {
      return add({
        kind: 'torn',
        methods: new Set(options.methods ?? DEFAULT_TORN_METHODS),
        code: options.code ?? 'EIO',
        match: options.match,
        when: 'before',
        bytes: options.bytes ?? 'half',
        remaining: options.times ?? 1,
        hits: 0,
        active: true,
      })
    },
    clear() {
      for (const rule of rules) rule.active = false
      rules = []
    },
    calls(method) {
      return counts.get(method) ?? 0
    },
    callCounts() {
      return Object.fromEntries(counts)
    },
    resetCalls() {
      counts.clear()
    },
  }

  return { fs, rules: faultRules }
}
