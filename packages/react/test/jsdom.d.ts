// The two members of jsdom the test environment uses (jsdom ships no types; @types/jsdom tracks a newer major).
declare module 'jsdom' {
  export class JSDOM {
    constructor(html?: string, options?: { url?: string; pretendToBeVisual?: boolean })
    readonly window: { close(): void }
  }
}
