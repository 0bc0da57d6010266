import fc from 'fast-check'

/**
 * Hostile requests for the HTTP fuzz test (fuzz.pg.test.ts): query strings built
 * from every docs/protocol.md §2 parameter with values meant to break parsers and
 * resource limits, odd paths, methods, headers and bodies, all as raw bytes.
 *
 * A case also says what a well-behaved server may do besides answering with
 * JSON: `parserMayReject` when the bytes are not valid HTTP/1.1 (Node's parser
 * answers before the app sees anything), `bodyMayNotArrive` when the declared
 * body is longer than what is sent (the server may wait for it), and `oracle`
 * when the request is a clean read whose rows Postgres can compute.
 */

/** The fuzzed table: every oracle clause is over these columns. */
export const FUZZ_TABLE = 'fuzz_items'
/** Rows 1..FUZZ_ROWS; see fuzz.pg.test.ts for their values. */
export const FUZZ_ROWS = 60

/** Stands for the handle of the known-good shape (table=fuzz_items, no where), filled in when the case runs. */
export const KNOWN_HANDLE = 'KNOWNHANDLEMARKER'

export interface OracleQuery {
  readonly where?: string
  readonly params: readonly string[]
  readonly columns?: readonly string[]
}

export interface FuzzCase {
  readonly method: string
  readonly target: Buffer
  readonly headers: ReadonlyArray<readonly [string, Buffer]>
  readonly body?: Buffer
  readonly parserMayReject: boolean
  readonly bodyMayNotArrive: boolean
  readonly sentIfNoneMatch: boolean
  readonly oracle?: OracleQuery
  /** For the failure report: the case in words. */
  readonly label: string
}

/** The keys a POST body may carry (docs/protocol.md §6); any other key in a JSON object body is a 400. */
const BODY_KEYS = new Set(['where', 'params', 'limit', 'offset', 'order_by', 'where_expr', 'order_by_expr', 'subset'])

/** Whether a body is a JSON object with a key a body may not carry (a shape key, say). */
export function bodyNamesForbiddenKey(body: Buffer | undefined): boolean {
  if (body === undefined) return false
  let value: unknown
  try {
    value = JSON.parse(body.toString('utf8'))
  } catch {
    return false
  }
  return typeof value === 'object' && value !== null && !Array.isArray(value) && Object.keys(value).some((key) => !BODY_KEYS.has(key))
}

/** `arbitrary` with probability `p`, else null (fc.option's `freq` counts the other way round). */
function sometimes<T>(arbitrary: fc.Arbitrary<T>, p: number): fc.Arbitrary<T | null> {
  const scale = 100
  return fc.oneof({ arbitrary: fc.constant(null), weight: Math.round((1 - p) * scale) }, { arbitrary, weight: Math.round(p * scale) })
}

// --- where clauses over fuzz_items that Postgres and the server must agree on ----------------------

const smallInt = fc.integer({ min: -5, max: FUZZ_ROWS + 5 })
const cmp = fc.constantFrom('=', '<>', '<', '<=', '>', '>=')

/** An atom; `$?` marks a parameter, numbered when the clause is complete. */
const oracleAtom: fc.Arbitrary<{ text: string; params: string[] }> = fc.oneof(
  fc.tuple(fc.constantFrom('id', 'n'), cmp, smallInt).map(([c, op, v]) => ({ text: `${c} ${op} ${v}`, params: [] })),
  fc.tuple(fc.constantFrom('id', 'n'), cmp, smallInt).map(([c, op, v]) => ({ text: `${c} ${op} $?`, params: [String(v)] })),
  fc.tuple(cmp, fc.integer({ min: 0, max: 20_000 })).map(([op, v]) => ({ text: `price ${op} ${(v / 100).toFixed(2)}`, params: [] })),
  fc.tuple(cmp, fc.integer({ min: 0, max: 20_000 })).map(([op, v]) => ({ text: `price ${op} $?`, params: [(v / 100).toFixed(2)] })),
  smallInt.map((v) => ({ text: `title = 'item ${v}'`, params: [] })),
  smallInt.map((v) => ({ text: `title = $?`, params: [`item ${v}`] })),
  fc.constantFrom("title LIKE 'item 1%'", "title NOT LIKE '%5'", "title ILIKE 'ITEM 2_'", "lower(title) = 'item 3'", "upper(title) <> 'ITEM 4'").map((text) => ({ text, params: [] })),
  fc.constantFrom('flag', 'NOT flag', 'flag = true', 'flag IS NOT TRUE', 'flag IS NULL').map((text) => ({ text, params: [] })),
  fc.constantFrom('n IS NULL', 'n IS NOT NULL', 'price IS NULL', 'coalesce(n, 0) > 5', 'n % 3 = 0', 'id * 2 > n').map((text) => ({ text, params: [] })),
  fc.array(smallInt, { minLength: 1, maxLength: 6 }).map((vs) => ({ text: `id IN (${vs.join(', ')})`, params: [] })),
  fc.array(smallInt, { minLength: 1, maxLength: 4 }).map((vs) => ({ text: `n NOT IN (${vs.join(', ')})`, params: [] })),
  fc.tuple(smallInt, smallInt).map(([a, b]) => ({ text: `id BETWEEN ${a} AND ${b}`, params: [] })),
  fc.integer({ min: 0, max: 6 }).map((k) => ({ text: `'t${k}' = ANY(tags)`, params: [] })),
  fc.integer({ min: 0, max: 6 }).map((k) => ({ text: `tags @> '{t${k}}'`, params: [] })),
  fc.integer({ min: 0, max: 6 }).map((k) => ({ text: `tags @> $?`, params: [`{t${k}}`] })),
  fc.integer({ min: 1, max: 28 }).map((d) => ({ text: `created > '2024-02-${String(d).padStart(2, '0')}T12:00:00Z'`, params: [] })),
  fc.constantFrom('true', 'false', 'NULL::bool', '1 = 1').map((text) => ({ text, params: [] })),
)

const oracleExpr: fc.Arbitrary<{ text: string; params: string[] }> = fc.letrec<{ e: { text: string; params: string[] } }>((tie) => ({
  e: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    oracleAtom,
    fc.tuple(tie('e'), fc.constantFrom('AND', 'OR'), tie('e')).map(([a, op, b]) => ({ text: `(${a.text}) ${op} (${b.text})`, params: [...a.params, ...b.params] })),
    tie('e').map((a) => ({ text: `NOT (${a.text})`, params: a.params })),
  ),
})).e

/** `$?` → `$1..$n`, in order. */
function numberParams(expr: { text: string; params: string[] }): { where: string; params: string[] } {
  let n = 0
  return { where: expr.text.replace(/\$\?/g, () => `$${++n}`), params: expr.params }
}

export const oracleWhere = oracleExpr.map(numberParams)

/**
 * Values past Node's 16 KiB header limit never reach the app (a 431), so they
 * are kept rare: most cases should exercise the server, not the parser.
 */
const HUGE = 1

// --- hostile values -------------------------------------------------------------------------------

const INJECTIONS = [
  '1=1; drop table fuzz_items',
  "1=1; DROP TABLE fuzz_canary; --",
  "id = 1); DELETE FROM fuzz_items; --",
  'pg_sleep(10) IS NULL',
  "id = (SELECT pg_sleep(10))::text::int",
  'id IN (SELECT id FROM fuzz_canary)',
  'EXISTS (SELECT 1)',
  "current_setting('is_superuser') = 'on'",
  "set_config('default_transaction_read_only', 'off', false) = 'x'",
  "pg_read_file('/etc/passwd') = ''",
  "lo_import('/etc/passwd') > 0",
  "title = $$x$$",
  "title = $tag$ ; drop table fuzz_items; $tag$",
  "title = U&'\\0000'",
  "title = U&'\\d800'",
  "title = E'\\xff'",
  "title = E'\\000'",
  "title = E'\\u0000'",
  "title = 'a' /* ; drop table fuzz_items */",
  'id = 1 -- ; drop table fuzz_items',
  'id = 1 /* unterminated',
  "title = 'unterminated",
  'id = 1 UNION SELECT 1',
  'true ORDER BY 1',
  'true LIMIT 1',
  'true FOR UPDATE',
  'id = 1 INTO x',
  'COPY fuzz_items TO STDOUT',
  '(SELECT true)',
  'id = $0',
  'id = $1',
  'id = $99999999999',
  'id = $2147483648',
  'id = 99999999999999999999999999999999',
  'n + 2147483647 > 0',
  'n * 2147483647 > 0',
  'title::int4 > 0',
  'id / 0 = 1',
  'id / (n - n) = 1',
  "created > 'not a date'",
  "tags @> '{{{{'",
  "tags @> '{\"\\\\'",
  'price > 1e400',
  "price = 'NaN'",
  "title = '\u0000'",
  'title = \u0000',
  'id = 1\u0000; drop table fuzz_items',
  '"id" = 1',
  '"ID" = 1',
  '"" = 1',
  'fuzz_items.id = 1',
  'public.fuzz_items.id = 1',
  'xmin = 1',
  'ctid = \'(0,1)\'',
  'tableoid > 0',
  '*',
  '',
  ' ',
  ';',
  ')',
  'ARRAY[1][1] = 1',
  'row(1,2) = row(1,2)',
  'id = ANY(NULL)',
  'CASE WHEN true THEN true END',
  "title COLLATE \"C\" = 'x'",
  "title SIMILAR TO '(a|b)*c'",
  "title ~ '(a*)*b'",
  'id = 1::regclass',
  "'fuzz_items'::regclass IS NOT NULL",
  'nextval(\'x\') > 0',
]

/** Depth-bombs: each nests `n` levels of one construct. */
const nestedWhere: fc.Arbitrary<string> = fc
  .tuple(
    fc.constantFrom(
      (n: number) => `${'('.repeat(n)}id = 1${')'.repeat(n)}`,
      (n: number) => `${'NOT '.repeat(n)}flag`,
      (n: number) => `id = ${'-'.repeat(n)}1`,
      (n: number) => `id = ${'- '.repeat(n)}1`,
      (n: number) => `${'lower('.repeat(n)}title${')'.repeat(n)} = 'a'`,
      (n: number) => `${'ARRAY['.repeat(n)}1${']'.repeat(n)} IS NULL`,
      (n: number) => `id${'::int8'.repeat(n)} = 1`,
      (n: number) => `title${" || 'x'".repeat(n)} = 'y'`,
      (n: number) => `${'id = 1 AND '.repeat(n)}true`,
      (n: number) => `${'id = 1 OR '.repeat(n)}false`,
      (n: number) => `${'(id = 1 AND '.repeat(n)}true${')'.repeat(n)}`,
      (n: number) => `${'CASE WHEN true THEN '.repeat(n)}true${' END'.repeat(n)}`,
      (n: number) => `${'coalesce('.repeat(n)}n${', 1)'.repeat(n)} = 1`,
      (n: number) => `id IN (${Array.from({ length: n }, (_, i) => i).join(',')})`,
      (n: number) => `${'row('.repeat(n)}1${')'.repeat(n)} IS NULL`,
    ),
    fc.oneof({ arbitrary: fc.integer({ min: 1, max: 100 }), weight: 4 }, { arbitrary: fc.integer({ min: 100, max: 1500 }), weight: 3 }, { arbitrary: fc.integer({ min: 1500, max: 6000 }), weight: HUGE }),
  )
  .map(([build, n]) => build(n))


const randomText: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.string({ maxLength: 40 }), weight: 30 },
  { arbitrary: fc.string({ unit: 'binary', maxLength: 40 }), weight: 30 },
  { arbitrary: fc.string({ unit: 'grapheme', maxLength: 20 }), weight: 15 },
  { arbitrary: fc.constantFrom('\u0000', '\uFFFD', '\uD800', '\u202E', 'é', '😀', '\r\n', '\t', ' ', "'", '"', '\\', '%', '&', '=', '#', '?', '+', '[', ']'), weight: 30 },
  { arbitrary: fc.integer({ min: 1000, max: 12_000 }).map((n) => 'x'.repeat(n)), weight: HUGE },
  { arbitrary: fc.integer({ min: 12_000, max: 40_000 }).map((n) => 'x'.repeat(n)), weight: HUGE },
)

const whereValue: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: oracleWhere.map((w) => w.where), weight: 3 },
  { arbitrary: fc.constantFrom(...INJECTIONS), weight: 4 },
  { arbitrary: nestedWhere, weight: 2 },
  { arbitrary: fc.tuple(oracleWhere, fc.constantFrom(...INJECTIONS)).map(([w, i]) => `${w.where} ${i}`), weight: 1 },
  { arbitrary: randomText, weight: 2 },
)

const bigDigits = fc.integer({ min: 19, max: 400 }).map((n) => '9'.repeat(n))

const offsetValue: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom('-1', 'now', '0_0', '0_inf', '0_1', '1_0', '-1_', '-1_0', '-0', '-2', '_', '0_', '_0', '0__0', '0_-1', '1e5_0', '0x10_0', ' 0_0', '0_0 ', '+1_0', '0_INF', 'inf_0', '١_٠', 'NaN_0', 'now_0', '18446744073709551615_18446744073709551615', '18446744073709551616_0', '0_18446744073709551616', '18446744073709551615_inf'),
  fc.tuple(fc.bigInt({ min: -(1n << 70n), max: 1n << 70n }), fc.bigInt({ min: -(1n << 70n), max: 1n << 70n })).map(([a, b]) => `${a}_${b}`),
  fc.tuple(bigDigits, bigDigits).map(([a, b]) => `${a}_${b}`),
  randomText,
)

const handleValue: fc.Arbitrary<string> = fc.oneof(
  fc.constant(KNOWN_HANDLE),
  fc.constantFrom('', 'x', '12345-67890', '0', '-1', '../../etc/passwd', '%00', 'null', 'undefined', '"quoted"'),
  fc.tuple(fc.bigInt({ min: 0n, max: 1n << 64n }), fc.bigInt({ min: 0n, max: 1n << 64n })).map(([a, b]) => `${a}-${b}`),
  randomText,
)

const boolValue: fc.Arbitrary<string> = fc.oneof(fc.constantFrom('true', 'false', '', '1', '0', 'TRUE', 'yes', 'null', ' true'), randomText)

const tableValue: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.constantFrom(FUZZ_TABLE, `public.${FUZZ_TABLE}`, `"${FUZZ_TABLE}"`, `public."${FUZZ_TABLE}"`, `"public"."${FUZZ_TABLE}"`, FUZZ_TABLE.toUpperCase()), weight: 6 },
  {
    arbitrary: fc.constantFrom(
      'nope', 'fuzz_canary', 'fuzz_unlogged', 'fuzz_view', 'fuzz_seq', 'pg_catalog.pg_class', 'pg_class', 'pg_catalog.pg_authid',
      'information_schema.tables', 'information_schema.sql_features', 'pg_toast.pg_toast_1255', 'a.b.c', '.', '..', '"', '""', '"a"b"',
      '"a""b"', 'public.', '.fuzz_items', `"${'x'.repeat(64)}"`, `"${'x'.repeat(63)}"`, 'x'.repeat(64), '"fuzz_items', 'fuzz_items"',
      'fuzz_items; drop table fuzz_items', 'fuzz_items--', 'fuzz_items where 1=1', "fuzz_items' OR '1'='1", '"fuzz\u0000items"',
      'fuzz\u0000items', 'pg_temp.x', 'ＦＵＺＺ', 'fuzz_itemś', '"😀"', '$1', '*',
    ),
    weight: 3,
  },
  { arbitrary: randomText, weight: 2 },
)

const columnsValue: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom('id', 'id,title', 'title,id', 'id,n,price,flag,tags,created,title', '"id"', 'ID', 'id,id', 'id,', ',', ',,,', 'id,,title', 'nope', 'id,nope', 'title', '"', '"id', 'id"', 'id, title', 'xmin,id', 'ctid,id', '*', 'id,"ti""tle"', 'id,ti\u0000tle'),
  { arbitrary: fc.integer({ min: 100, max: 3000 }).map((n) => Array.from({ length: n }, () => 'id').join(',')), weight: HUGE },
  randomText,
)

type Pair = readonly [key: string, value: string]

const paramsPairs: fc.Arbitrary<Pair[]> = fc.oneof(
  { arbitrary: fc.integer({ min: 1, max: 1500 }).map((n) => Array.from({ length: n }, (_, i) => [`params[${i + 1}]`, '1'] as const)), weight: HUGE },
  fc.array(fc.tuple(fc.constantFrom('1', '2', '3', '0', '-1', '01', '+1', 'a', '', '1.5', '99999999999999999999999', '2147483648', ' 1', '1 '), randomText), { maxLength: 4 }).map((entries) => entries.map(([k, v]) => [`params[${k}]`, v] as const)),
  fc.constantFrom<Pair[]>([['params', '1']], [['params[]', '1']], [['params[1][2]', '1']], [['params[1', 'x']], [['params]1[', 'x']], [['params[__proto__]', '1']], [['params[constructor]', '1']]),
)

const subsetPairs: fc.Arbitrary<Pair[]> = fc
  .array(
    fc.tuple(
      fc.constantFrom('subset__where', 'subset__params', 'subset__limit', 'subset__offset', 'subset__order_by', 'subset__where_expr', 'subset__order_by_expr', 'subset[where]', 'subset', 'subset__'),
      fc.oneof(whereValue, fc.constantFrom('{}', '[]', '{"1":"x"}', '{"1":{"a":1}}', '{', 'null', '-1', '0', '1e308', '9007199254740993', 'id DESC', 'id; drop table fuzz_items', 'pg_sleep(1)', '1 NULLS FIRST')),
    ),
    { minLength: 1, maxLength: 4 },
  )
  .map((entries) => entries.map(([k, v]) => [k, v] as const))

/** Bracketed keys nested hundreds deep (`params[1][1][1]…`): the query decoder nests them, nothing may recurse on them. */
const deepKeyPairs: fc.Arbitrary<Pair[]> = fc
  .tuple(fc.constantFrom('params', 'subset', 'table', 'where', 'columns', 'x', 'subset__params'), fc.constantFrom('[1]', '[]', '[where]', '[a]', '[__proto__]'), fc.integer({ min: 2, max: 800 }), randomText)
  .map(([base, level, depth, value]) => [[`${base}${level.repeat(depth)}`, value] as const])

/** Every §2 parameter, each present or not, plus repeats and strangers. */
const queryPairs: fc.Arbitrary<Pair[]> = fc
  .record(
    {
      table: tableValue,
      offset: offsetValue,
      handle: handleValue,
      live: boolValue,
      live_sse: boolValue,
      experimental_live_sse: boolValue,
      cursor: fc.oneof(fc.constantFrom('0', '-1', '', 'abc', '1e9'), bigDigits, fc.bigInt({ min: -(1n << 70n), max: 1n << 70n }).map(String)),
      where: whereValue,
      columns: columnsValue,
      replica: fc.oneof(fc.constantFrom('default', 'full', 'FULL', ''), randomText),
      log: fc.oneof(fc.constantFrom('full', 'changes_only', 'CHANGES_ONLY'), randomText),
      secret: randomText,
      'cache-buster': randomText,
      expired_handle: handleValue,
    },
    { requiredKeys: [] },
  )
  .chain((record) =>
    fc.tuple(
      fc.constant(Object.entries(record) as Pair[]),
      sometimes(paramsPairs, 0.3),
      sometimes(subsetPairs, 0.15),
      sometimes(deepKeyPairs, 0.08),
      fc.array(fc.tuple(fc.oneof(fc.constantFrom('table', 'offset', 'where', 'handle', 'live', 'columns', 'table[]', 'offset[a]', '__proto__', 'constructor', 'hasOwnProperty', '[x]', '=', '&', ''), randomText), randomText), { maxLength: 3 }),
    ),
  )
  .chain(([base, params, subset, deep, extra]) =>
    fc.shuffledSubarray([...base, ...(params ?? []), ...(subset ?? []), ...(deep ?? []), ...extra].map((p) => p as Pair), { minLength: 0 }),
  )

/** A fixed-table query: the defining parameters present, the rest random. */
const plausiblePairs: fc.Arbitrary<Pair[]> = fc
  .tuple(fc.constantFrom(FUZZ_TABLE, `public.${FUZZ_TABLE}`), fc.oneof(fc.constant('-1'), offsetValue), queryPairs)
  .map(([table, offset, rest]) => [['table', table] as const, ['offset', offset] as const, ...rest.filter(([k]) => k !== 'table' && k !== 'offset')])

// --- encoding into a request-target -----------------------------------------------------------------

type Encoding = 'component' | 'raw' | 'broken'

const BROKEN_ESCAPES = ['%zz', '%', '%e9', '%c0%af', '%ed%a0%80', '%00', '%ff%fe', '%%', '%5', '%f0%9f%98', '%E2%80%AE', '%2', '%u0041']

function encodePair([key, value]: Pair, encoding: Encoding, breakAt: number, escape: string): Buffer {
  if (encoding === 'raw') return Buffer.from(`${key}=${value}`, 'utf8')
  const text = `${percentEncode(key)}=${percentEncode(value)}`
  if (encoding === 'component') return Buffer.from(text, 'latin1')
  const at = text.length === 0 ? 0 : breakAt % (text.length + 1)
  return Buffer.from(text.slice(0, at) + escape + text.slice(at), 'latin1')
}

/** encodeURIComponent over the UTF-8 bytes, so a lone surrogate is encoded (as U+FFFD) instead of throwing. */
function percentEncode(text: string): string {
  let out = ''
  for (const byte of Buffer.from(text, 'utf8')) {
    const char = String.fromCharCode(byte)
    out += /[A-Za-z0-9\-_.!~*'()]/.test(char) ? char : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`
  }
  return out
}

/** Bytes outside what llhttp takes in a request-target. */
function hasRiskyTargetBytes(target: Buffer): boolean {
  for (const byte of target) if (byte <= 0x20 || byte >= 0x7f || byte === 0x23) return true
  return false
}

const OTHER_PATHS = [
  '/v1/shape/', '/v1//shape', '/v1/%73hape', '//v1/shape', '/v1/shape/x', '/v1/SHAPE',
  '/v1/shape%00', '/v1/%zz', '/v1/sh%e9ape', '/v1/shape/../shape', '/v1/./shape', '/', '/v1/health', '/v1/health/', '/metrics', '/v1',
  '/%2e%2e/%2e%2e/etc/passwd', 'http://fuzz/v1/shape', '*', '', '/v1/shape;x', '/v1/shape%3Fa', '/v1\\shape',
]

const target: fc.Arbitrary<{ bytes: Buffer; pairs: Pair[] }> = fc
  .tuple(
    fc.oneof({ arbitrary: fc.constant('/v1/shape'), weight: 3 }, { arbitrary: fc.constantFrom(...OTHER_PATHS), weight: 1 }),
    fc.oneof({ arbitrary: plausiblePairs, weight: 3 }, { arbitrary: queryPairs, weight: 2 }),
    fc.constantFrom<Encoding>('component', 'component', 'component', 'component', 'component', 'component', 'raw', 'broken', 'broken'),
    fc.nat(),
    fc.constantFrom(...BROKEN_ESCAPES),
    fc.constantFrom('&', '&', '&', '&&', ';'),
    fc.constantFrom('?', '?', '?', '??', '?&'),
    // Raw bytes that are not UTF-8 (or not text at all), spliced into the request-target somewhere.
    sometimes(fc.tuple(fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 6, min: 0x80, max: 0xff })), 0.08),
  )
  .map(([path, pairs, encoding, breakAt, escape, separator, question, rawBytes]) => {
    const parts = pairs.map((pair, i) => encodePair(pair, encoding, breakAt + i * 7, escape))
    const query = Buffer.concat(parts.flatMap((p, i) => (i === 0 ? [p] : [Buffer.from(separator), p])))
    const bytes = Buffer.concat([Buffer.from(path, 'latin1'), Buffer.from(pairs.length > 0 ? question : ''), query])
    if (rawBytes === null) return { bytes, pairs }
    const at = rawBytes[0] % (bytes.length + 1)
    return { bytes: Buffer.concat([bytes.subarray(0, at), Buffer.from(rawBytes[1]), bytes.subarray(at)]), pairs }
  })

// --- headers and bodies ---------------------------------------------------------------------------

const headerValue: fc.Arbitrary<Buffer> = fc.oneof(
  { arbitrary: randomText.map((s) => Buffer.from(s, 'utf8')), weight: 4 },
  { arbitrary: fc.string({ unit: fc.integer({ min: 0x20, max: 0xff }).map((c) => String.fromCharCode(c)), maxLength: 64 }).map((s) => Buffer.from(s, 'latin1')), weight: 6 },
  { arbitrary: fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)), weight: 1 },
  { arbitrary: fc.integer({ min: 8000, max: 40_000 }).map((n) => Buffer.alloc(n, 'a')), weight: HUGE },
)

const extraHeader: fc.Arbitrary<readonly [string, Buffer]> = fc.oneof(
  { arbitrary: fc.tuple(fc.constantFrom('If-None-Match', 'Origin', 'Accept', 'Cookie', 'Authorization', 'X-Forwarded-For', 'Access-Control-Request-Headers', 'Access-Control-Request-Method', 'Range', 'Accept-Encoding', 'traceparent', 'Content-Encoding', 'X-Unknown'), headerValue), weight: 20 },
  { arbitrary: fc.tuple(fc.constant('If-None-Match'), fc.constantFrom('*', '""', '"', ',,,', 'W/"x"', `"${KNOWN_HANDLE}:-1:0_0"`, '"a", "b", "c"').map((s) => Buffer.from(s))), weight: 4 },
  { arbitrary: fc.tuple(fc.constantFrom('Accept'), fc.constant(Buffer.from('text/event-stream'))), weight: 2 },
  { arbitrary: fc.tuple(fc.constantFrom('Upgrade'), fc.constantFrom('websocket', 'h2c', 'garbage').map((s) => Buffer.from(s))), weight: 1 },
  { arbitrary: fc.tuple(fc.constantFrom('Expect'), fc.oneof(fc.constantFrom('100-continue', '100-Continue', 'garbage', '', '200-ok'), fc.string({ maxLength: 20 })).map((s) => Buffer.from(s))), weight: 1 },
  { arbitrary: fc.tuple(fc.constantFrom('X(bad)', 'Bad Name', 'Ä', ''), fc.constant(Buffer.from('1'))), weight: 1 },
)

const CONTENT_TYPES = [
  'application/json', 'application/json; charset=utf-8', 'application/json; charset=latin1', 'text/plain', 'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x', 'application/octet-stream', 'application/vnd.api+json', '', 'garbage', '*/*', 'application/json, text/plain',
]

/** JSON nested `depth` levels deep, built as text so the generator itself never recurses. */
const deepJson = fc.tuple(fc.integer({ min: 1_000, max: 200_000 }), fc.boolean()).map(([depth, objects]) =>
  objects ? `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}` : `${'['.repeat(depth)}${']'.repeat(depth)}`,
)

const bodyText: fc.Arbitrary<Buffer> = fc.oneof(
  fc.json().map((s) => Buffer.from(s)),
  fc
    .record(
      {
        where: whereValue,
        params: fc.oneof(fc.dictionary(fc.constantFrom('1', '2', '0', 'a', '__proto__'), fc.oneof(fc.string(), fc.integer(), fc.constant(null), fc.constant({}))), fc.constant([1, 2])),
        limit: fc.oneof(fc.integer(), fc.constant(1e308), fc.constant('10'), fc.constant(-1)),
        offset: fc.oneof(fc.integer(), fc.constant(-1), fc.constant(Number.MAX_SAFE_INTEGER + 2)),
        order_by: fc.oneof(fc.constantFrom('id', 'id DESC', 'title; drop table fuzz_items', 'pg_sleep(1)', '1', 'nope'), randomText),
        subset: fc.constantFrom({ where: 'id = 1' }, null, 'x', [1]),
        table: tableValue,
        offset_text: offsetValue,
        // Keys that define the shape or the request's position belong in the URL only: a body naming one is a 400.
        columns: fc.constantFrom('id', 'id,title', 'id,secret'),
        replica: fc.constantFrom('full', 'default'),
        log: fc.constantFrom('full', 'changes_only'),
        handle: fc.constantFrom(KNOWN_HANDLE, '1-2'),
        live: fc.constantFrom('true', true),
        cursor: fc.constantFrom('1', ''),
        secret: fc.constantFrom('guess', ''),
      },
      { requiredKeys: [] },
    )
    .map((o) => Buffer.from(JSON.stringify(o))),
  deepJson.map((s) => Buffer.from(s)),
  fc.constantFrom('{', '}', '{"a":', 'null', '[]', '"x"', '1', '{"__proto__":{"x":1}}', '{"constructor":{"prototype":{}}}', '\u0000', '{"where":"\\ud800"}').map((s) => Buffer.from(s)),
  fc.uint8Array({ maxLength: 200 }).map((a) => Buffer.from(a)),
  fc.integer({ min: 1_100_000, max: 1_300_000 }).map((n) => Buffer.from(`{"where":"${'x'.repeat(n)}"}`)),
)

const METHODS = ['GET', 'GET', 'GET', 'GET', 'GET', 'HEAD', 'POST', 'POST', 'DELETE', 'PUT', 'PATCH', 'OPTIONS']
const ODD_METHODS = ['TRACE', 'PROPFIND', 'get', 'FOO', 'CONNECT', 'SEARCH', 'QUERY']

export const fuzzCase: fc.Arbitrary<FuzzCase> = fc
  .record({
    method: fc.oneof({ arbitrary: fc.constantFrom(...METHODS), weight: 12 }, { arbitrary: fc.constantFrom(...ODD_METHODS), weight: 1 }),
    target,
    headers: fc.array(extraHeader, { maxLength: 3 }),
    body: sometimes(bodyText, 0.3),
    contentType: sometimes(fc.constantFrom(...CONTENT_TYPES), 0.4),
    /** 0: honest; >0: the declared length is that much longer; <0: shorter. */
    lengthLie: fc.oneof({ arbitrary: fc.constant(0), weight: 8 }, { arbitrary: fc.integer({ min: -20, max: 20 }), weight: 1 }),
    host: fc.oneof({ arbitrary: fc.constant<'normal' | 'missing' | 'twice'>('normal'), weight: 50 }, { arbitrary: fc.constantFrom<'normal' | 'missing' | 'twice'>('missing', 'twice'), weight: 1 }),
    chunked: fc.oneof({ arbitrary: fc.constant(false), weight: 15 }, { arbitrary: fc.constant(true), weight: 1 }),
  })
  .map(({ method, target, headers, body, contentType, lengthLie, host, chunked }): FuzzCase => {
    const all: Array<readonly [string, Buffer]> = []
    if (host !== 'missing') all.push(['Host', Buffer.from('fuzz')])
    if (host === 'twice') all.push(['Host', Buffer.from('other')])
    all.push(['Connection', Buffer.from('close')])
    all.push(...headers)
    if (contentType !== null) all.push(['Content-Type', Buffer.from(contentType)])
    let bodyMayNotArrive = false
    // Methods llhttp does not know, and CONNECT, whose request-target must be host:port.
    let parserMayReject = ['get', 'FOO', 'CONNECT'].includes(method) || host !== 'normal' || hasRiskyTargetBytes(target.bytes) || target.bytes[0] !== 0x2f
    if (body !== null) {
      if (chunked) {
        all.push(['Transfer-Encoding', Buffer.from('chunked')])
        // A chunk header that lies about its size, or not: the parser decides.
        const chunk = Buffer.concat([Buffer.from(`${(body.length + lengthLie).toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')])
        parserMayReject = true
        bodyMayNotArrive = true
        return finish(method, target, all, chunk, parserMayReject, bodyMayNotArrive)
      }
      const declared = Math.max(0, body.length + lengthLie)
      all.push(['Content-Length', Buffer.from(String(declared))])
      // Extra bytes after a shorter declared body are a second request to the parser.
      if (lengthLie > 0) bodyMayNotArrive = true
      if (lengthLie < 0) parserMayReject = true
    } else if (lengthLie > 0) {
      // A declared body that is never sent (a GET with content-length: 12, say).
      all.push(['Content-Length', Buffer.from(String(lengthLie))])
      bodyMayNotArrive = true
    }
    // Node's header limit (16 KiB for the request line and all headers) is answered by its parser.
    const headerBytes = target.bytes.length + all.reduce((n, [k, v]) => n + k.length + v.length + 4, 0)
    if (headerBytes > 16 * 1024 - 100) parserMayReject = true
    for (const [name, value] of all) {
      if (!/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(name)) parserMayReject = true
      for (const byte of value) if ((byte < 0x20 && byte !== 0x09) || byte === 0x7f) parserMayReject = true
    }
    return finish(method, target, all, body ?? undefined, parserMayReject, bodyMayNotArrive)
  })

function finish(
  method: string,
  target: { bytes: Buffer; pairs: Pair[] },
  headers: ReadonlyArray<readonly [string, Buffer]>,
  body: Buffer | undefined,
  parserMayReject: boolean,
  bodyMayNotArrive: boolean,
): FuzzCase {
  const label = `${method} ${truncate(target.bytes.toString('latin1'))} headers=${headers.map(([k, v]) => `${k}:${truncate(v.toString('latin1'), 40)}`).join('|')}${body === undefined ? '' : ` body=${truncate(body.toString('latin1'), 80)} (${body.length} bytes)`}`
  return {
    method,
    target: target.bytes,
    headers,
    ...(body === undefined ? {} : { body }),
    parserMayReject,
    bodyMayNotArrive,
    sentIfNoneMatch: headers.some(([k]) => k.toLowerCase() === 'if-none-match'),
    label,
  }
}

/** A clean initial read of fuzz_items with a valid clause: Postgres computes the rows it must return. */
export const oracleCase: fc.Arbitrary<FuzzCase> = fc
  .tuple(oracleWhere, sometimes(fc.constantFrom(['id'], ['id', 'title'], ['n', 'id'], ['id', 'price', 'flag', 'tags', 'created']), 0.5), fc.boolean())
  .map(([{ where, params }, columns, encodeBrackets]) => {
    const pairs: Pair[] = [['table', FUZZ_TABLE], ['offset', '-1'], ['where', where], ...params.map((v, i) => [`params[${i + 1}]`, v] as const)]
    if (columns !== null) pairs.push(['columns', columns.join(',')])
    const query = pairs
      .map(([k, v]) => `${encodeBrackets ? percentEncode(k) : k}=${percentEncode(v)}`)
      .join('&')
    const base = finish('GET', { bytes: Buffer.from(`/v1/shape?${query}`), pairs }, [['Host', Buffer.from('fuzz')], ['Connection', Buffer.from('close')]], undefined, false, false)
    return { ...base, oracle: { where, params, ...(columns === null ? {} : { columns }) } }
  })

function truncate(text: string, max = 160): string {
  const clean = JSON.stringify(text).slice(1, -1)
  return clean.length <= max ? clean : `${clean.slice(0, max)}…(${text.length})`
}
