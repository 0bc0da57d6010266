import { describe, expect, it } from 'vitest'
import {
  formatRelation,
  parseColumnList,
  parseIdentifier,
  parseRelation,
  quoteIdentifier,
} from '../src/index.js'

const TOO_LONG = 'Identifier is too long (max length is 63)'
const ZERO = 'Invalid zero-length delimited identifier'

describe('parseIdentifier', () => {
  const valid: Array<[string, string]> = [
    ['foobar', 'foobar'],
    ['FooBar', 'foobar'],
    ['_x', '_x'],
    ['a1$', 'a1$'],
    ['Ünïcödé', 'Ünïcödé'], // only ASCII letters are downcased
    ['"FooBar"', 'FooBar'],
    ['" "', ' '],
    ['"a.b"', 'a.b'],
    ['"Foo""Bar"', 'Foo"Bar'],
    ['""""', '"'],
    ['"a,b"', 'a,b'],
    ['"a"""b"', 'a""b'], // a run of three passes and unescapes pairwise, as in Electric
    ['a'.repeat(63), 'a'.repeat(63)],
    [`"${'A'.repeat(63)}"`, 'A'.repeat(63)],
    ['é'.repeat(63), 'é'.repeat(63)], // 126 bytes, 63 characters
  ]

  it.each(valid)('parses %j as %j', (text, expected) => {
    expect(parseIdentifier(text)).toEqual({ ok: true, value: expected })
  })

  const invalid: Array<[string, string]> = [
    ['', ZERO],
    ['""', ZERO],
    ['"', ZERO],
    ['Foo"Bar"', 'Invalid unquoted identifier contains special characters: Foo"Bar"'],
    [' ', 'Invalid unquoted identifier contains special characters:  '],
    ['foob@r', 'Invalid unquoted identifier contains special characters: foob@r'],
    ['1abc', 'Invalid unquoted identifier contains special characters: 1abc'],
    ['a-b', 'Invalid unquoted identifier contains special characters: a-b'],
    ['"Foo"Bar"', 'Invalid identifier with unescaped quote: Foo"Bar'],
    ['""x"', 'Invalid identifier with unescaped quote: "x'],
    ['"x""', 'Invalid identifier with unescaped quote: x"'],
    ['a'.repeat(64), TOO_LONG],
    [`"${'a'.repeat(64)}"`, TOO_LONG],
    [`"${'""'.repeat(64)}"`, TOO_LONG],
  ]

  it.each(invalid)('rejects %j: %s', (text, error) => {
    expect(parseIdentifier(text)).toEqual({ ok: false, error })
  })

  it('counts grapheme clusters, not code units, against the limit', () => {
    const family = '\u{1F468}\u200D\u{1F469}\u200D\u{1F467}' // one grapheme, 8 code units
    expect(parseIdentifier(`"${family.repeat(63)}"`).ok).toBe(true)
    expect(parseIdentifier(`"${family.repeat(64)}"`)).toEqual({ ok: false, error: TOO_LONG })
  })
})

describe('parseRelation', () => {
  const valid: Array<[string, string, string]> = [
    ['foo', 'public', 'foo'],
    ['Foo', 'public', 'foo'],
    ['foo.bar', 'foo', 'bar'],
    ['"foo"."bar"', 'foo', 'bar'],
    ['"foo.woah"."bar"', 'foo.woah', 'bar'],
    ['"foo".bar', 'foo', 'bar'],
    ['"Foo"."Bar"', 'Foo', 'Bar'],
    ['some_schema."issues for 3c8_0_abc"', 'some_schema', 'issues for 3c8_0_abc'],
    ['"we""ird.sch"."t""b.l"', 'we"ird.sch', 't"b.l'],
    ['"a.b.c"', 'public', 'a.b.c'],
    ['"public"', 'public', 'public'],
  ]

  it.each(valid)('parses %j', (text, schema, name) => {
    expect(parseRelation(text)).toEqual({ ok: true, value: { schema, name } })
  })

  const invalid: Array<[string, string]> = [
    ['foo.bar.baz', 'Invalid relation identifier, too many delimiters: foo.bar.baz'],
    ['a."b".c', 'Invalid relation identifier, too many delimiters: a."b".c'],
    ['"foo"."bar', 'Invalid unquoted identifier contains special characters: "bar'],
    ['foo.', ZERO],
    ['.foo', ZERO],
    ['.', ZERO],
    ['Foo"Bar', 'Invalid unquoted identifier contains special characters: Foo"Bar'],
    ['foo. bar', 'Invalid unquoted identifier contains special characters:  bar'],
    [`${'s'.repeat(64)}.t`, TOO_LONG],
  ]

  it.each(invalid)('rejects %j', (text, error) => {
    expect(parseRelation(text)).toEqual({ ok: false, error })
  })
})

describe('parseColumnList', () => {
  const valid: Array<[string, string[]]> = [
    ['id', ['id']],
    ['id,name', ['id', 'name']],
    ['"PoT@To",PoTaTo', ['PoT@To', 'potato']],
    ['"PoTaTo,sunday",foo', ['PoTaTo,sunday', 'foo']],
    ['"fo""o",bar', ['fo"o', 'bar']],
    ['"id","title","Created At"', ['id', 'title', 'Created At']],
    ['"a,""b"",c",d', ['a,"b",c', 'd']],
    ['b,a,b', ['b', 'a', 'b']], // order and duplicates kept; the server sorts
  ]

  it.each(valid)('parses %j', (text, expected) => {
    expect(parseColumnList(text)).toEqual({ ok: true, value: expected })
  })

  const invalid: Array<[string, string]> = [
    ['', ZERO],
    ['foo,', ZERO],
    [',foo', ZERO],
    ['a,,b', ZERO],
    // An odd quote count: the comma before `"name"` splits, so `"id` is the culprit.
    ['"id,"name"', 'Invalid unquoted identifier contains special characters: "id'],
    ['id, name', 'Invalid unquoted identifier contains special characters:  name'],
    ['"a"b', 'Invalid unquoted identifier contains special characters: "a"b'],
  ]

  it.each(invalid)('rejects %j', (text, error) => {
    expect(parseColumnList(text)).toEqual({ ok: false, error })
  })
})

describe('quoting', () => {
  it('quotes and round-trips', () => {
    expect(quoteIdentifier('we"ird')).toBe('"we""ird"')
    expect(formatRelation({ schema: 'public', name: 'Is"sues' })).toBe('"public"."Is""sues"')
    for (const name of ['Foo', 'a.b', 'x"y', ' ', 'é']) {
      expect(parseIdentifier(quoteIdentifier(name))).toEqual({ ok: true, value: name })
    }
  })
})
