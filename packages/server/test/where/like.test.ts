import { describe, expect, it } from 'vitest'
import fc from 'fast-check'
import { compileLike, likeEscape } from '../../src/where/values/like.js'

describe('LIKE patterns (C collation, UTF-8 characters)', () => {
  it.each([
    ['abc', 'abc', true],
    ['abc', 'ab', false],
    ['abc', 'a%', true],
    ['abc', '%c', true],
    ['abc', '%b%', true],
    ['abc', '_b_', true],
    ['abc', '___', true],
    ['abc', '__', false],
    ['abc', '____', false],
    ['', '', true],
    ['', '%', true],
    ['', '_', false],
    ['a%c', 'a\\%c', true],
    ['abc', 'a\\%c', false],
    ['a_c', 'a\\_c', true],
    ['abc', 'a\\_c', false],
    ['a\\c', 'a\\\\c', true],
    ['abc', 'a\\bc', true], // an escaped ordinary character is itself
    ['é𝄞', '__', true], // _ is one character, even outside the BMP
    ['é𝄞x', '%x', true],
    ['aaa', '%%%a', true],
    ['mississippi', '%iss%pi', true],
    ['mississippi', '%iss%ppx', false],
    ['ABC', 'abc', false],
    ['a\nb', 'a_b', true],
  ])('%j LIKE %j is %s', (text, pattern, expected) => {
    expect(compileLike(pattern, false)(text)).toBe(expected)
  })

  it.each([
    ['ABC', 'abc', true],
    ['abc', 'A%', true],
    ['Éa', 'éA', false], // only ASCII letters fold under C
    ['Éa', 'ÉA', true],
  ])('%j ILIKE %j is %s', (text, pattern, expected) => {
    expect(compileLike(pattern, true)(text)).toBe(expected)
  })

  it('a trailing escape is an error only when matching reaches it, as in Postgres', () => {
    const matcher = compileLike('ab\\', false)
    expect(matcher('x')).toBe(false)
    expect(() => matcher('abc')).toThrow('LIKE pattern must not end with escape character')
  })

  it('stays linear-ish on hostile patterns', () => {
    const pattern = `${'%a'.repeat(20)}b`
    const text = 'a'.repeat(5000)
    const started = performance.now()
    expect(compileLike(pattern, false)(text)).toBe(false)
    expect(performance.now() - started).toBeLessThan(500)
  })

  it.each([
    ['a!%b', '!', 'a\\%b'],
    ['a!!b', '!', 'a\\!b'],
    ['a\\b', '!', 'a\\\\b'],
    ['a!\\b', '!', 'a\\\\b'],
    ['a\\b%', '', 'a\\\\b%'],
    ['a\\%', '\\', 'a\\%'],
  ])('like_escape(%j, %j) is %j', (pattern, escape, expected) => {
    expect(likeEscape(pattern, escape)).toBe(expected)
  })

  it('refuses a multi-character escape', () => {
    expect(() => likeEscape('a', 'ab')).toThrow('invalid escape string')
  })
})

/** The pattern as an anchored regular expression over code points (`_` one, `%` any run); undefined for a dangling escape. */
const escape = (c: string): string => c.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
const reference = (pattern: string): RegExp | undefined => {
  let source = '^'
  const chars = Array.from(pattern)
  for (let i = 0; i < chars.length; i++) {
    const c = chars[i] as string
    if (c === '\\') {
      const next = chars[i + 1]
      if (next === undefined) return undefined
      source += escape(next)
      i++
    } else source += c === '%' ? '.*' : c === '_' ? '.' : escape(c)
  }
  return new RegExp(`${source}$`, 'su')
}

describe('LIKE agrees with a regular-expression reference on random patterns', () => {
  it('for 20k pattern/text pairs', () => {
    const unit = fc.constantFrom('a', 'b', '%', '_', '\\', '𝄞', 'é')
    fc.assert(
      fc.property(fc.string({ unit, maxLength: 7 }), fc.string({ unit, maxLength: 8 }), (pattern, text) => {
        const regex = reference(pattern)
        if (regex === undefined) return
        expect(compileLike(pattern, false)(text)).toBe(regex.test(text))
      }),
      { numRuns: 20_000, seed: 7 },
    )
  })
})

describe('long patterns over long texts (the one-pass search of a segment with `_`s, in several 32-bit words)', () => {
  it('agree with the reference, LIKE and ILIKE, with and without astral characters in the text', () => {
    const unit = fc.constantFrom('a', 'a', 'b', 'B', '_', '_', '%')
    const textUnit = fc.constantFrom('a', 'a', 'a', 'b', 'B')
    fc.assert(
      fc.property(fc.string({ unit, maxLength: 90 }), fc.string({ unit: textUnit, maxLength: 140 }), fc.boolean(), (pattern, text, astral) => {
        const subject = astral ? `${text}𝄞${text}` : text
        for (const caseInsensitive of [false, true]) {
          const regex = reference(caseInsensitive ? pattern.toLowerCase() : pattern)
          if (regex === undefined) return
          expect(compileLike(pattern, caseInsensitive)(subject)).toBe(regex.test(caseInsensitive ? subject.toLowerCase() : subject))
        }
      }),
      { numRuns: 3_000, seed: 11 },
    )
  })

  it('a hostile pattern on a long repetitive text gives the right answer (its cost is measured by bench/where/like-probe.ts)', () => {
    const text = 'a'.repeat(100_000)
    expect(compileLike(`%${'_a'.repeat(1_000)}b%`, false)(text)).toBe(false)
    expect(compileLike(`%${'_a'.repeat(1_000)}%`, false)(text)).toBe(true)
    expect(compileLike(`%${'a'.repeat(3_000)}_b`, false)(text)).toBe(false)
  })
})
