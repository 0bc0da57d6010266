import { JSDOM } from 'jsdom'
import type { Environment } from 'vitest/environments'

/**
 * A DOM (jsdom) added to Node's globals without replacing any of them.
 *
 * Vitest's own jsdom environment puts the jsdom window's typed arrays, Blob,
 * ReadableStream… over Node's. These tests run the real Sluice server, pg and
 * Node's fetch in the same process as React, and with those replaced a Buffer
 * is no longer a Uint8Array (fastify then sends `{"type":"Buffer",…}` as the
 * body). So only what Node lacks (document, HTMLElement, navigator…) comes
 * from jsdom, and the client code under test sees Node's fetch and streams,
 * as it does in a browser that has both.
 */
const environment: Environment = {
  name: 'dom-over-node',
  viteEnvironment: 'client',
  setup(global: Record<string, unknown>) {
    const dom = new JSDOM('<!DOCTYPE html><html><head></head><body></body></html>', { url: 'http://localhost/', pretendToBeVisual: true })
    const window = dom.window as unknown as Record<string, unknown>
    const added: string[] = []
    // Interfaces are own properties of the window; document, navigator, location… are getters on its prototypes.
    const names = new Set<string>()
    for (let proto: object | null = window; proto !== null && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
      for (const name of Object.getOwnPropertyNames(proto)) names.add(name)
    }
    for (const key of names) {
      if (key in global || key === 'constructor') continue
      let bound: unknown
      Object.defineProperty(global, key, {
        get() {
          const value = window[key]
          // Plain functions (getComputedStyle, requestAnimationFrame…) are called without a receiver.
          if (typeof value !== 'function' || /^[A-Z]/.test(key)) return value
          bound ??= (value as (...args: unknown[]) => unknown).bind(window)
          return bound
        },
        set(value: unknown) {
          window[key] = value
        },
        configurable: true,
      })
      added.push(key)
    }
    return {
      teardown(global: Record<string, unknown>) {
        for (const key of added) delete global[key]
        dom.window.close()
      },
    }
  },
}

export default environment
