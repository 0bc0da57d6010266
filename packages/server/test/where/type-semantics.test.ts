import { beforeAll, describe, expect, it } from 'vitest'
import { loadWhereParser } from '../../src/where/index.js'
import { evaluate } from './helpers.js'

beforeAll(async () => {
  await loadWhereParser()
})

type Case = readonly [where: string, row: Record<string, string | null>, expected: boolean | null | string]

function table(name: string, cases: readonly Case[]): void {
  describe(name, () => {
    it.each(cases)('%s on %j is %s', (where, row, expected) => {
      expect(evaluate(where, row)).toBe(expected)
    })
  })
}

table('integers', [
  ['i4 = 7', { i4: '7' }, true],
  ["i4 = '007'", { i4: '7' }, true],
  ['i2 < i8', { i2: '-32768', i8: '9223372036854775807' }, true],
  ['i8 = 9223372036854775807', { i8: '9223372036854775807' }, true],
  ['i8 > 9223372036854775806', { i8: '9223372036854775807' }, true],
  ['i8 = -9223372036854775808', { i8: '-9223372036854775808' }, true],
  // int8 = float8 compares as float8, as in Postgres (9007199254740993 rounds to ...992).
  ['i8 = 9007199254740992::float8', { i8: '9007199254740993' }, true],
  ['i4 + 1 > 0', { i4: '2147483647' }, 'error: numeric_value_out_of_range'],
  ['i2 * 2::int2 > 0', { i2: '32767' }, 'error: numeric_value_out_of_range'],
  ['i2 * 2 = 65534', { i2: '32767' }, true],
  ['i2 * i4 > 0', { i2: '32767', i4: '2' }, true],
  ['i8 + 1 > 0', { i8: '9223372036854775807' }, 'error: numeric_value_out_of_range'],
  ['-i4 > 0', { i4: '-2147483648' }, 'error: numeric_value_out_of_range'],
  ['i4 / -1 > 0', { i4: '-2147483648' }, 'error: numeric_value_out_of_range'],
  ['i4 % -1 = 0', { i4: '-2147483648' }, true],
  ['i4 / 2 = -3', { i4: '-7' }, true],
  ['i4 % 3 = -1', { i4: '-7' }, true],
  ['i4 / 0 = 0', { i4: '1' }, 'error: division_by_zero'],
  ['i8 % 0 = 0', { i8: '1' }, 'error: division_by_zero'],
  ['i4 / 2 = 1.5', { i4: '3' }, false],
  ['i4 / 2.0 = 1.5', { i4: '3' }, true],
  ['i4::int2 = 1', { i4: '70000' }, 'error: numeric_value_out_of_range'],
  ['i4::bool', { i4: '2' }, true],
  ["t::int4 = 12", { t: ' 12 ' }, true],
  ["t::int4 = 12", { t: '1 2' }, 'error: invalid_text_representation'],
])

table('numeric: exact, with Postgres scales and NaN/Infinity ordering', [
  ['n = 1.5', { n: '1.50' }, true],
  ["n::text = '1.50'", { n: '1.50' }, true],
  ['n > 1e20', { n: '100000000000000000001' }, true],
  ['n = 0.1 + 0.2', { n: '0.3' }, true],
  ["(n / 3)::text = '0.33333333333333333333'", { n: '1' }, true],
  ["(n / 3)::text = '0.33333333333333333333'", { n: '1.0' }, true],
  ["(n / 7)::text = '142857.142857142857'", { n: '1000000' }, true],
  ["(n / 7000000)::text = '0.14285714285714285714'", { n: '1000000' }, true],
  ["(n * 1.10)::text = '2.200'", { n: '2.0' }, true],
  ["(n % 0.3)::text = '0.1'", { n: '1.0' }, true],
  ["(n::numeric(5,1))::text = '2.5'", { n: '2.45' }, true],
  ["(n::numeric(5,1))::text = '-2.5'", { n: '-2.45' }, true],
  ['n::numeric(3,1) > 0', { n: '100' }, 'error: numeric_value_out_of_range'],
  ["n = 'NaN'", { n: 'NaN' }, true],
  ["n > 'Infinity'", { n: 'NaN' }, true],
  ["n > 1e1000", { n: 'Infinity' }, true],
  ["n < -1e1000", { n: '-Infinity' }, true],
  ["n + 'Infinity' = 'Infinity'", { n: '5' }, true],
  ["(n - n)::text = 'NaN'", { n: 'Infinity' }, true],
  ['n / 0 > 0', { n: '1' }, 'error: division_by_zero'],
  ["n / 0 = 'NaN'", { n: 'NaN' }, true],
  ['n::int4 = 3', { n: '2.5' }, true],
  ['n::int4 = -3', { n: '-2.5' }, true],
  ['n::int4 = 0', { n: 'NaN' }, 'error: invalid_parameter_value'],
  ['n = 1', { n: '1.000000000000000000000000000000000000001' }, false],
  ['i4 = n', { i4: '2', n: '2.000' }, true],
])

table('float4 / float8: NaN equals NaN and sorts last, -0 = 0', [
  ["f8 = 'NaN'", { f8: 'NaN' }, true],
  ["f8 > 'Infinity'", { f8: 'NaN' }, true],
  ["f8 < 'NaN'", { f8: 'Infinity' }, true],
  ['f8 = 0', { f8: '-0' }, true],
  ["f8::text = '-0'", { f8: '-0' }, true],
  ["f8::text = '1e+23'", { f8: '1e+23' }, false],
  ["f8::text = '9.999999999999999e+22'", { f8: '9.999999999999999e+22' }, true],
  ["f8::text = '0.30000000000000004'", { f8: '0.30000000000000004' }, true],
  ["(f8 * 10)::text = '1e+15'", { f8: '100000000000000' }, true],
  ["f4::text = '1.1'", { f4: '1.1' }, true],
  ["f4 = 1.1", { f4: '1.1' }, false],
  ["f4 = 1.1::float4", { f4: '1.1' }, true],
  ["f4::float8::text = '1.100000023841858'", { f4: '1.1' }, true],
  ["(f4 * 1e6)::text = '1100000.023841858'", { f4: '1.1' }, true],
  ["(f4 * 1e6::float4)::text = '1.1e+06'", { f4: '1.1' }, true],
  ['f8 / 0 > 0', { f8: '1' }, 'error: division_by_zero'],
  ["f8 / 0 IS NOT NULL", { f8: 'NaN' }, true],
  ['f8 * 1e308 > 0', { f8: '1e10' }, 'error: numeric_value_out_of_range'],
  ['f8 * 1e-308 > 0', { f8: '1e-100' }, 'error: numeric_value_out_of_range'],
  ["f8 + 'Infinity' > 0", { f8: '1' }, true],
  ['f8::int4 = 2', { f8: '2.5' }, true],
  ['f8::int4 = 4', { f8: '3.5' }, true],
  ["f8::numeric::text = '0.1'", { f8: '0.1' }, true],
  ["f8::numeric::text = '1.23456789012346'", { f8: '1.2345678901234567' }, true],
  ["f4::numeric::text = '1.1'", { f4: '1.1' }, true],
  ['n::float8 = 0.1::float8', { n: '0.1' }, true],
])

table('text, varchar, bpchar: C collation (code point order), bpchar ignores trailing spaces', [
  ["t < 'b'", { t: 'B' }, true],
  ["t < 'a'", { t: 'Z' }, true],
  ["t > 'z'", { t: 'é' }, true],
  // U+FFFD sorts before U+1D11E in UTF-8 byte order though its UTF-16 unit is larger.
  ["t < '𝄞'", { t: '\ufffd' }, true],
  ["t < 'ab'", { t: 'a' }, true],
  ["t = ''", { t: '' }, true],
  ["t = 'a'", { t: 'a ' }, false],
  ["bc = 'ab'", { bc: 'ab  ' }, true],
  ["bc = 'ab   '", { bc: 'ab  ' }, true],
  ["bc < 'ab!'", { bc: 'ab  ' }, true],
  ["bc::text = 'ab'", { bc: 'ab  ' }, true],
  ["bc = t", { bc: 'ab  ', t: 'ab' }, true],
  ["length(bc) = 2", { bc: 'ab  ' }, true],
  ["octet_length(bc) = 4", { bc: 'ab  ' }, true],
  ["bc LIKE 'ab'", { bc: 'ab  ' }, false],
  ["bc LIKE 'ab  '", { bc: 'ab  ' }, true],
  ["vc = t", { vc: 'x', t: 'x' }, true],
  ["length(t) = 2", { t: 'é𝄞' }, true],
  ["octet_length(t) = 6", { t: 'é𝄞' }, true],
  ["char_length(t) = 1", { t: '𝄞' }, true],
  ["lower(t) = 'abcé'", { t: 'ABCé' }, true],
  ["lower(t) = 'é'", { t: 'É' }, false],
  ["upper(t) = 'ÉA'", { t: 'Éa' }, true],
  ["t::varchar(2) = 'ab'", { t: 'abc' }, true],
  ["t::char(4)::text = 'ab'", { t: 'ab' }, true],
  ["octet_length(t::char(4)) = 4", { t: 'ab' }, true],
  ["t::char = 'a'", { t: 'abc' }, true],
])

table('bool', [
  ['b', { b: 't' }, true],
  ['b', { b: 'true' }, true],
  ['NOT b', { b: 'f' }, true],
  ['b > false', { b: 't' }, true],
  ["b = 'yes'", { b: 't' }, true],
  ["b::text = 'true'", { b: 't' }, true],
  ["b::int4 = 1", { b: 't' }, true],
  ["t::bool", { t: ' OFF ' }, false],
  ["t::bool", { t: 'tr' }, true],
  ["t::bool", { t: 'o' }, 'error: invalid_text_representation'],
])

table('uuid', [
  ["u = 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", { u: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' }, true],
  ["u = '{a0eebc999c0b4ef8bb6d6bb9bd380a11}'", { u: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' }, true],
  ["u = 'a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11'", { u: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' }, true],
  ["u < 'b0000000-0000-0000-0000-000000000000'", { u: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' }, true],
  ["u::text = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", { u: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' }, true],
])

table('date, time, timestamp, timestamptz: microseconds, BC, infinities', [
  ["d = '2024-02-29'", { d: '2024-02-29' }, true],
  ["d < '0001-01-01'", { d: '0044-03-15 BC' }, true],
  ["d > '5874897-12-30'", { d: '5874897-12-31' }, true],
  ["d > '5874897-12-31'", { d: 'infinity' }, true],
  ["d < '4713-11-24 BC'", { d: '-infinity' }, true],
  ["d::text = '0044-03-15 BC'", { d: '0044-03-15 BC' }, true],
  ["ts > '2024-01-01 00:00:00.000001'", { ts: '2024-01-01 00:00:00.000002' }, true],
  ["ts = '2024-01-01T00:00:00.5'", { ts: '2024-01-01 00:00:00.5' }, true],
  ["ts < 'infinity'", { ts: '294276-12-31 23:59:59.999999' }, true],
  ["ts::text = '0044-03-15 12:00:00 BC'", { ts: '0044-03-15 12:00:00 BC' }, true],
  ["ts::timestamp(0) = '2024-01-01 00:00:01'", { ts: '2024-01-01 00:00:00.5' }, true],
  ["tz = '2024-01-01 01:00:00+01'", { tz: '2024-01-01 00:00:00+00' }, true],
  ["tz::text = '2024-01-01 00:00:00.123456+00'", { tz: '2024-01-01 00:00:00.123456+00' }, true],
  ['tz = ts', { tz: '2024-01-01 00:00:00+00', ts: '2024-01-01 00:00:00' }, true],
  ["d = ts", { d: '2024-01-01', ts: '2024-01-01 00:00:00' }, true],
  ["d < ts", { d: '2024-01-01', ts: '2024-01-01 00:00:00.000001' }, true],
  // A date past the timestamp range still compares (after every finite timestamp).
  ["d > ts", { d: '5874897-12-31', ts: '294276-12-31 23:59:59' }, true],
  ["d < ts", { d: '5874897-12-31', ts: 'infinity' }, true],
  ["d::timestamp IS NULL", { d: '5874897-12-31' }, 'error: datetime_field_overflow'],
  ["ts::date = '2024-01-01'", { ts: '2024-01-01 23:59:59.999999' }, true],
  ["ts::date = '0044-03-15 BC'", { ts: '0044-03-15 12:00:00 BC' }, true],
  ["ts::time = '12:30:00'", { ts: '2024-01-01 12:30:00' }, true],
  ["ts::time IS NULL", { ts: 'infinity' }, true],
  ["tm = '24:00:00'", { tm: '24:00:00' }, true],
  ["tm > '23:59:59.999999'", { tm: '24:00:00' }, true],
  ["tm::text = '00:00:00.5'", { tm: '00:00:00.5' }, true],
])

table('interval: compared by span (a month is 30 days)', [
  ["iv = '30 days'", { iv: 'P1M' }, true],
  ["iv = '24 hours'", { iv: 'P1D' }, true],
  ["iv > '1 day'", { iv: 'PT24H0.000001S' }, true],
  ["iv < '0'", { iv: 'PT-0.5S' }, true],
  ["iv::text = 'P1Y2M3DT4H5M6.5S'", { iv: 'P1Y2M3DT4H5M6.5S' }, true],
  ["(iv + iv)::text = 'P2DT-2H'", { iv: 'P1DT-1H' }, true],
  ["(-iv)::text = 'P-1DT1H'", { iv: 'P1DT-1H' }, true],
  ["iv::text = 'PT0S'", { iv: 'PT0S' }, true],
  ["tm::interval = '1 hour'", { tm: '01:00:00' }, true],
])

table('enums compare by declared order, not by text', [
  ["mood > 'sad'", { mood: 'ok' }, true],
  ["mood < 'ok'", { mood: 'happy' }, false],
  ["mood::text < 'ok'", { mood: 'happy' }, true],
  ["mood = ANY ('{ok,happy}')", { mood: 'happy' }, true],
  ["t::mood = 'ok'", { t: 'ok' }, true],
  ["t::mood = 'ok'", { t: 'OK' }, 'error: invalid_text_representation'],
])

table('json and jsonb', [
  ['jb = \'{"b": 1, "a": [1.0, true]}\'', { jb: '{"a": [1, true], "b": 1}' }, true],
  ['jb = \'{"a": 1, "a": 2}\'', { jb: '{"a": 2}' }, true],
  ['jb = \'1\'', { jb: '[1]' }, false],
  ['jb <> \'"x"\'', { jb: '"x"' }, false],
  ['jb::text = \'{"a": 1, "bb": [1.50, null]}\'', { jb: '{"bb": [1.50, null], "a": 1}' }, true],
  ['j::jsonb = \'{"a":1}\'', { j: '{ "a" : 1.0 }' }, true],
  ["j::text = '{ \"a\" : 1 }'", { j: '{ "a" : 1 }' }, true],
  ['jb::numeric = 2', { jb: '2.0' }, true],
  ['jb::numeric = 2', { jb: '"2"' }, 'error: invalid_parameter_value'],
  ['t::jsonb IS NULL', { t: '{"a":' }, 'error: invalid_text_representation'],
  ['t::jsonb IS NOT NULL', { t: '"\\u0000"' }, 'error: untranslatable_character'],
])

table('arrays: literals, equality (with bounds), containment, ordering', [
  ["ai = '{1,2,NULL}'", { ai: '{1,2,NULL}' }, true],
  ["ai = ARRAY[1,2]", { ai: '{1,2}' }, true],
  ["ai = '[0:1]={1,2}'", { ai: '{1,2}' }, false],
  ["ai = '{{1,2},{3,4}}'", { ai: '{{1,2},{3,4}}' }, true],
  ["ai = '{1,2,3,4}'", { ai: '{{1,2},{3,4}}' }, false],
  ["ai @> '{4,1}'", { ai: '{{1,2},{3,4}}' }, true],
  ["ai @> '{1,NULL}'", { ai: '{1,NULL}' }, false],
  ["ai @> '{}'", { ai: '{}' }, true],
  ["ai <@ '{1,2,3}'", { ai: '{3,3,1}' }, true],
  ["ai && '{5,NULL}'", { ai: '{NULL,5}' }, true],
  ["ai && '{}'", { ai: '{1}' }, false],
  ["ai < '{1,3}'", { ai: '{1,2,9}' }, true],
  ["ai > '{1,2}'", { ai: '{1,2,NULL}' }, true],
  ["ai < '{1,NULL}'", { ai: '{1,2}' }, true],
  ["at @> ARRAY['a b']", { at: '{"a b",c}' }, true],
  ["at = '{\"\",NULL,\"NULL\"}'", { at: '{"",NULL,"NULL"}' }, true],
  [String.raw`at::text = '{"a b","\\","x\"y"}'`, { at: String.raw`{"a b","\\","x\"y"}` }, true],
  [String.raw`at = ARRAY['a b', '\', 'x"y']`, { at: String.raw`{"a b","\\","x\"y"}` }, true],
  ["ai::text = '[0:1]={1,2}'", { ai: '[0:1]={1,2}' }, true],
  ["ai::int8[] = '{1,2}'", { ai: '{1,2}' }, true],
  ["t::int4[] = '{1,2}'", { t: '{ 1 , 2 }' }, true],
  ["'{1,2}'::int4[] = ARRAY[1,2]", {}, true],
  ["ARRAY[[1,2],[3,4]] = ai", { ai: '{{1,2},{3,4}}' }, true],
  ["ARRAY[i4, NULL] = '{1,NULL}'", { i4: '1' }, true],
])
