import { describe, expect, it } from 'vitest'
import {
  BEFORE_ALL,
  LAST_VIRTUAL,
  ParamMessage,
  type ParamErrors,
  type ShapeRequest,
  decodeQueryString,
  invalidRequest,
  parseDeleteRequest,
  parseShapeRequest,
  readSecret,
} from '../src/index.js'

function ok(query: string, options?: Parameters<typeof parseShapeRequest>[1]): ShapeRequest {
  const result = parseShapeRequest(query, options)
  if (!result.ok) throw new Error(`expected ${query} to parse, got ${JSON.stringify(result.errors)}`)
  return result.value
}

function errors(query: string, options?: Parameters<typeof parseShapeRequest>[1]): ParamErrors {
  const result = parseShapeRequest(query, options)
  if (result.ok) throw new Error(`expected ${query} to fail`)
  return result.errors
}

const T = 'table=items'

describe('parseShapeRequest: a valid initial request', () => {
  it('fills defaults', () => {
    expect(ok(`${T}&offset=-1`)).toEqual({
      shape: { table: { schema: 'public', name: 'items' }, params: [], replica: 'default', log: 'full' },
      offset: BEFORE_ALL,
      live: false,
      liveSse: false,
    })
  })

  it('reads every definition key', () => {
    const request = ok(
      'table=app."Issues"&offset=-1&where=%22Title%22%20%3D%20%241%20AND%20n%20%3E%20%242' +
        '&params%5B1%5D=a%2Fb&params%5B2%5D=7&columns=%22id%22,%22Title%22,n' +
        '&queryable_columns=id,n&replica=full&log=changes_only',
    )
    expect(request.shape).toEqual({
      table: { schema: 'app', name: 'Issues' },
      where: '"Title" = $1 AND n > $2',
      params: ['a/b', '7'],
      columns: ['id', 'Title', 'n'],
      queryableColumns: ['id', 'n'],
      replica: 'full',
      log: 'changes_only',
    })
  })

  it('ignores unknown and client-only parameters', () => {
    const request = ok(
      `${T}&offset=-1&cache-buster=123&expired_handle=h-1&custom=x&experimental_compaction=maybe&subset=`,
    )
    // expired_handle is no part of the shape: it is kept apart, only to answer a client whose table went away.
    expect(request).toEqual({ ...ok(`${T}&offset=-1`), expiredHandle: 'h-1' })
  })

  it('keeps the retired handle a refetch names (expired_handle, else the handle at -1 or now), apart from the shape', () => {
    expect(ok(`${T}&offset=-1&expired_handle=1-2`).expiredHandle).toBe('1-2')
    expect(ok(`${T}&offset=-1&handle=3-4`).expiredHandle).toBe('3-4')
    expect(ok(`${T}&offset=now&handle=3-4&expired_handle=1-2`).expiredHandle).toBe('1-2')
    expect(ok(`${T}&offset=0_0&handle=3-4`)).not.toHaveProperty('expiredHandle')
    expect(ok(`${T}&offset=-1&expired_handle=`)).not.toHaveProperty('expiredHandle')
  })

  it('drops the handle at -1 and now, where it only busts caches', () => {
    expect(ok(`${T}&offset=-1&handle=123-456`).handle).toBeUndefined()
    expect(ok(`${T}&offset=now&handle=123-456`).handle).toBeUndefined()
    expect(ok(`${T}&offset=now`).offset).toBe('now')
  })

  it('accepts a decoded query object as well as a string', () => {
    expect(parseShapeRequest(decodeQueryString(`${T}&offset=0_inf&handle=h`))).toEqual(
      parseShapeRequest(`${T}&offset=0_inf&handle=h`),
    )
    expect(ok(`${T}&offset=0_inf&handle=h`).offset).toEqual(LAST_VIRTUAL)
  })

  it('keeps the raw cursor', () => {
    expect(ok(`${T}&offset=5_0&handle=h&live=true&cursor=`).cursor).toBe('')
    expect(ok(`${T}&offset=5_0&handle=h&live=true&cursor=1234`).cursor).toBe('1234')
    expect(ok(`${T}&offset=5_0&handle=h&live=true`).cursor).toBeUndefined()
  })
})

describe('parseShapeRequest: booleans are true unless literally "false"', () => {
  const live: Array<[string, boolean]> = [
    ['', false],
    ['&live=false', false],
    ['&live=true', true],
    ['&live', true],
    ['&live=', true],
    ['&live=0', true],
    ['&live=no', true],
    ['&live=FALSE', true],
    ['&live=False', true],
    ['&live[x]=1', true],
  ]

  it.each(live)('live%s → %s', (suffix, expected) => {
    expect(ok(`${T}&offset=1_0&handle=h${suffix}`).live).toBe(expected)
  })

  const sse: Array<[string, boolean]> = [
    ['&live_sse=true', true],
    ['&live_sse', true],
    ['&live_sse=1', true],
    ['&live_sse=false', false],
    ['&live_sse=false&experimental_live_sse=true', false], // the new name wins
    ['&live_sse=true&experimental_live_sse=true', true],
    ['&experimental_live_sse=true', true],
    ['&experimental_live_sse=1', true],
    ['&experimental_live_sse=false', false],
    ['&experimental_live_sse=0', false],
    ['&experimental_live_sse=', false],
  ]

  it.each(sse)('live_sse via %s → %s', (suffix, expected) => {
    expect(ok(`${T}&offset=1_0&handle=h&live=true${suffix}`).liveSse).toBe(expected)
  })

  it('casts a lone experimental_live_sse strictly, as Electric does', () => {
    expect(errors(`${T}&offset=1_0&handle=h&live=true&experimental_live_sse=yes`)).toEqual({
      live_sse: ['is invalid'],
    })
  })
})

describe('parseShapeRequest: validation stages and Electric error texts', () => {
  const cases: Array<[string, string, ParamErrors]> = [
    ['offset missing', T, { offset: ["can't be blank"] }],
    ['offset empty', `${T}&offset=`, { offset: ["can't be blank"] }],
    ['offset blank', `${T}&offset=%20%20`, { offset: ["can't be blank"] }],
    ['offset malformed', `${T}&offset=abc`, { offset: ['has invalid format'] }],
    ['offset -1_5', `${T}&offset=-1_5&handle=h`, { offset: ['has invalid format'] }],
    ['offset above u64', `${T}&offset=18446744073709551616_0&handle=h`, { offset: ['has invalid format'] }],
    ['offset as a map', `${T}&offset[a]=1`, { offset: ['is invalid'] }],
    ['handle missing', `${T}&offset=0_0`, { handle: ["can't be blank when offset != -1"] }],
    ['handle blank', `${T}&offset=0_0&handle=`, { handle: ["can't be blank when offset != -1"] }],
    ['live at -1', `${T}&offset=-1&live=true`, { live: ["can't be true when offset == -1"] }],
    ['bare live at -1', `${T}&offset=-1&live`, { live: ["can't be true when offset == -1"] }],
    ['live at now', `${T}&offset=now&live=true`, { live: ["can't be true when offset is 'now'"] }],
    ['sse without live', `${T}&offset=0_0&handle=h&live_sse=true`, { live_sse: ["can't be true unless live is also true"] }],
    ['table missing', 'offset=-1', { table: ["can't be blank"] }],
    ['table empty', 'table=&offset=-1', { table: ["can't be blank"] }],
    ['table as a map', 'table[x]=a&offset=-1', { table: ['is invalid'] }],
    [
      'table with too many dots',
      'table=a.b.c&offset=-1',
      { table: ['Invalid relation identifier, too many delimiters: a.b.c'] },
    ],
    [
      'table with special characters',
      'table=it%40ms&offset=-1',
      { table: ['Invalid unquoted identifier contains special characters: it@ms'] },
    ],
    ['table too long', `table=${'t'.repeat(64)}&offset=-1`, { table: ['Identifier is too long (max length is 63)'] }],
    ['replica invalid', `${T}&offset=-1&replica=partial`, { replica: ['is invalid'] }],
    ['replica wrong case', `${T}&offset=-1&replica=FULL`, { replica: ['is invalid'] }],
    ['log invalid', `${T}&offset=-1&log=all`, { log: ['is invalid'] }],
    ['where as a list', `${T}&offset=-1&where[]=x`, { where: ['is invalid'] }],
    ['columns malformed', `${T}&offset=-1&columns=id,`, { columns: ['Invalid zero-length delimited identifier'] }],
    [
      'columns with an odd quote',
      `${T}&offset=-1&columns=%22id,%22name%22`,
      { columns: ['Invalid unquoted identifier contains special characters: "id'] },
    ],
    [
      'queryable_columns malformed',
      `${T}&offset=-1&queryable_columns=a%20b`,
      { queryable_columns: ['Invalid unquoted identifier contains special characters: a b'] },
    ],
    ['params as a string', `${T}&offset=-1&where=x=$1&params=a`, { params: ['is invalid'] }],
    ['params as a list', `${T}&offset=-1&where=x=$1&params[]=a`, { params: ['is invalid'] }],
    ['params nested', `${T}&offset=-1&where=x=$1&params[1][2]=a`, { params: ['is invalid'] }],
    // Casting reports every field at once, with offset's blank check; later stages wait.
    [
      'several cast errors',
      'table=a.b.c&replica=x&log=y&columns=,',
      {
        offset: ["can't be blank"],
        columns: ['Invalid zero-length delimited identifier'],
        replica: ['is invalid'],
        log: ['is invalid'],
      },
    ],
    ['offset is checked before the table', 'offset=zz', { offset: ['has invalid format'] }],
    ['handle is checked before live', `${T}&offset=0_0&live=true&live_sse=true`, { handle: ["can't be blank when offset != -1"] }],
    ['live is checked before the table', 'table=a.b.c&offset=-1&live', { live: ["can't be true when offset == -1"] }],
  ]

  it.each(cases)('%s', (_name, query, expected) => {
    expect(errors(query)).toEqual(expected)
  })

  it('produces the exact 400 body through SluiceError', () => {
    expect(JSON.stringify(invalidRequest(errors('table=items&offset=x')).toBody())).toBe(
      '{"message":"Invalid request","errors":{"offset":["has invalid format"]}}',
    )
  })
})

describe('parseShapeRequest: where-clause params', () => {
  const W = `${T}&offset=-1&where=a%20%3D%20%241`

  const valid: Array<[string, string[]]> = [
    ['', []],
    ['&params[1]=x', ['x']],
    ['&params%5B1%5D=x&params%5B2%5D=y', ['x', 'y']],
    ['&params[2]=y&params[1]=x', ['x', 'y']],
    ['&params[1]=', ['']],
    ['&params[1]=a%26b%3Dc', ['a&b=c']],
    ['&params[01]=x', ['x']], // Elixir reads "01" as 1
    ['&params[%2B1]=x', ['x']], // a bare + would decode to a space
    [
      Array.from({ length: 12 }, (_, i) => `&params[${i + 1}]=v${i + 1}`).join(''),
      Array.from({ length: 12 }, (_, i) => `v${i + 1}`),
    ],
  ]

  it.each(valid)('params%s', (suffix, expected) => {
    expect(ok(`${W}${suffix}`).shape?.params).toEqual(expected)
  })

  const invalid: Array<[string, string]> = [
    ['&params[a]=x', 'Parameters can only use numbers as keys'],
    ['&params[1]=x&params[b]=y', 'Parameters can only use numbers as keys'],
    ['&params[1.0]=x', 'Parameters can only use numbers as keys'],
    ['&params[%201]=x', 'Parameters can only use numbers as keys'],
    ['&params[2]=x', 'Parameters must be numbered sequentially, starting from 1'],
    ['&params[0]=x', 'Parameters must be numbered sequentially, starting from 1'],
    ['&params[1]=x&params[3]=y', 'Parameters must be numbered sequentially, starting from 1'],
    ['&params[-1]=x', 'Parameters must be numbered sequentially, starting from 1'],
    ['&params[1]=x&params[01]=y', 'Parameters must be numbered sequentially, starting from 1'],
  ]

  it.each(invalid)('params%s → %s', (suffix, message) => {
    expect(errors(`${W}${suffix}`)).toEqual({ params: [message] })
  })

  it('ignores params without a where clause, as Electric does', () => {
    expect(ok(`${T}&offset=-1&params[x]=1`).shape?.params).toEqual([])
    expect(ok(`${T}&offset=-1&where=&params[9]=1`).shape?.params).toEqual([])
  })

  it('checks params after the table', () => {
    expect(errors('table=a.b.c&offset=-1&where=x&params[z]=1')).toEqual({
      table: ['Invalid relation identifier, too many delimiters: a.b.c'],
    })
  })
})

describe('parseShapeRequest: columns and table with awkward names', () => {
  it.each<[string, string[]]>([
    ['columns=%22id%22,%22Created%20At%22', ['id', 'Created At']],
    ['columns=%22a,b%22,c', ['a,b', 'c']],
    ['columns=%22say%20%22%22hi%22%22%22,ID', ['say "hi"', 'id']],
    ['columns[]=Id&columns[]=x', ['Id', 'x']], // a list is taken verbatim
    ['columns=', []],
  ])('%s', (param, expected) => {
    const shape = ok(`${T}&offset=-1&${param}`).shape
    if (expected.length === 0) expect(shape?.columns).toBeUndefined()
    else expect(shape?.columns).toEqual(expected)
  })

  it('rejects an empty name in a column list', () => {
    expect(errors(`${T}&offset=-1&columns[]=a&columns[]=`)).toEqual({ columns: ['Invalid zero-length identifier'] })
  })

  it.each<[string, string, string]>([
    ['some_schema.%22issues%20for%2042_0_abc%22', 'some_schema', 'issues for 42_0_abc'],
    ['%22My.Schema%22.%22My%20%22%22Table%22%22%22', 'My.Schema', 'My "Table"'],
    ['PUBLIC.Items', 'public', 'items'],
    ['%22%C3%9Cml%C3%A4ut%22', 'public', 'Ümläut'],
  ])('table=%s', (param, schema, name) => {
    expect(ok(`table=${param}&offset=-1`).shape?.table).toEqual({ schema, name })
  })
})

describe('parseShapeRequest: predefined shape', () => {
  it('needs no table and ignores definition keys', () => {
    const request = ok('offset=-1&table=a.b.c&where=x', { predefinedShape: true })
    expect(request.shape).toBeUndefined()
    expect(request.offset).toBe(BEFORE_ALL)
  })

  it('still validates the rest', () => {
    expect(errors('offset=0_0', { predefinedShape: true })).toEqual({ handle: ["can't be blank when offset != -1"] })
  })
})

describe('parseShapeRequest: subset snapshots', () => {
  const B = `${T}&offset=5_0&handle=h&log=changes_only`

  it('is absent without subset keys', () => {
    expect(ok(B).subset).toBeUndefined()
  })

  it('reads subset__* keys', () => {
    const subset = ok(
      `${B}&subset__where=a%20%3E%20%241&subset__params=%7B%221%22%3A%225%22%7D&subset__limit=10` +
        '&subset__offset=0&subset__order_by=a%20DESC&subset__where_expr=%7B%7D',
    ).subset
    expect(subset).toEqual({ where: 'a > $1', params: { 1: '5' }, limit: 10, offset: 0, orderBy: 'a DESC' })
  })

  it('turns JSON scalars into text and accepts the bracketed form', () => {
    expect(ok(`${B}&subset__params=${encodeURIComponent('{"1":5,"2":true,"3":null,"4":"x"}')}`).subset?.params).toEqual({
      1: '5',
      2: 'true',
      3: '',
      4: 'x',
    })
    expect(ok(`${B}&subset__params[1]=a`).subset?.params).toEqual({ 1: 'a' })
  })

  it('exists as soon as any subset key does', () => {
    expect(ok(`${B}&subset__where_expr=x`).subset).toEqual({ params: {} })
  })

  const invalid: Array<[string, ParamErrors]> = [
    ['&subset__limit=0&subset__order_by=a', { subset: { limit: ['must be greater than 0'] } }],
    ['&subset__limit=-3&subset__order_by=a', { subset: { limit: ['must be greater than 0'] } }],
    ['&subset__offset=-1&subset__order_by=a', { subset: { offset: ['must be greater than or equal to 0'] } }],
    ['&subset__limit=x&subset__order_by=a', { subset: { limit: ['is invalid'] } }],
    ['&subset__limit=1.5&subset__order_by=a', { subset: { limit: ['is invalid'] } }],
    ['&subset__limit=5', { subset: { order_by: ['order_by is required when limit or offset is present'] } }],
    ['&subset__offset=5', { subset: { order_by: ['order_by is required when limit or offset is present'] } }],
    [
      '&subset__limit=0',
      {
        subset: {
          limit: ['must be greater than 0'],
          order_by: ['order_by is required when limit or offset is present'],
        },
      },
    ],
    ['&subset__params=%7Bnope', { subset: { params: ['params must be valid JSON'] } }],
    ['&subset__params=%5B1%5D', { subset: { params: ['params must be a JSON object'] } }],
    ['&subset__params=null', { subset: { params: ['params must be a JSON object'] } }],
    ['&subset__params=%7B%221%22%3A%7B%7D%7D', { subset: { params: ['is invalid'] } }],
  ]

  it.each(invalid)('%s', (suffix, expected) => {
    expect(errors(`${B}${suffix}`)).toEqual(expected)
  })

  it('validates the subset only once the shape is valid', () => {
    expect(errors(`${T}&offset=5_0&subset__limit=0`)).toEqual({ handle: ["can't be blank when offset != -1"] })
  })

  it('merges a POST body into the subset', () => {
    const body = { where: 'a > $1', params: { 1: 7 }, limit: 5, order_by: 'a', where_expr: { type: 'ref' } }
    expect(ok(`${B}&subset__offset=2`, { body }).subset).toEqual({
      where: 'a > $1',
      params: { 1: '7' },
      limit: 5,
      offset: 2,
      orderBy: 'a',
    })
  })

  it('accepts a {"subset": {...}} wrapper', () => {
    const request = ok(`${B}&replica=full`, { body: { subset: { limit: 3, order_by: 'id' } } })
    expect(request.subset).toEqual({ params: {}, limit: 3, orderBy: 'id' })
    expect(request.shape?.replica).toBe('full')
  })

  it('leaves an empty body to the shape', () => {
    expect(ok(B, { body: {} }).subset).toBeUndefined()
  })

  // The shape and the position come from the URL alone, so an auth proxy that pins them there cannot be bypassed.
  const notInBody = ParamMessage.notInBody
  // (`where` and `params` in a body are the subset's, ANDed with the shape's own where clause.)
  const urlKeys = ['table', 'columns', 'replica', 'log', 'queryable_columns', 'handle', 'live', 'live_sse', 'cursor', 'secret', 'expired_handle', 'anything']
  it.each(urlKeys)('refuses %s in a body, beside a subset or alone', (key) => {
    expect(errors(B, { body: { [key]: 'x' } })).toEqual({ [key]: [notInBody] })
    expect(errors(B, { body: { where: 'a > 1', [key]: 'x' } })).toEqual({ [key]: [notInBody] })
    expect(errors(B, { body: { subset: { where: 'a > 1' }, [key]: 'x' } })).toEqual({ [key]: [notInBody] })
  })

  it('refuses a body that would replace the shape named in the URL, naming every key', () => {
    expect(errors(`${T}&where=id%3D1&offset=-1&log=changes_only`, { body: { table: 'secrets', where: 'true', subset: { where: 'true' } } })).toEqual({
      table: [notInBody],
      subset: { where: [ParamMessage.twiceInBody] },
    })
  })

  it('refuses a subset parameter given twice', () => {
    expect(errors(`${B}&subset__where=a%3E1`, { body: { where: 'a > 2' } })).toEqual({ subset: { where: [ParamMessage.inUrlAndBody] } })
    expect(errors(B, { body: { limit: 1, subset: { limit: 2, order_by: 'a' } } })).toEqual({ subset: { limit: [ParamMessage.twiceInBody] } })
  })

  it('refuses a key inside `subset` that is not a subset parameter (a misspelt where must not return every row)', () => {
    expect(errors(B, { body: { subset: { wher: '1=1', limit: 5, order_by: 'id' } } })).toEqual({ subset: { wher: [notInBody] } })
    expect(errors(B, { body: { subset: { table: 'x', where: 'a > 1', live: true } } })).toEqual({ subset: { table: [notInBody], live: [notInBody] } })
  })

  it('rejects a subset that is not an object', () => {
    expect(errors(B, { body: { subset: 'x' } })).toEqual({ subset: ['is invalid'] })
  })
})

describe('parseDeleteRequest', () => {
  it('takes a bare handle', () => {
    expect(parseDeleteRequest('handle=123-456')).toEqual({ ok: true, value: { handle: '123-456' } })
  })

  it('takes a definition, with or without a handle', () => {
    const result = parseDeleteRequest('table=Foo&handle=h&replica=full')
    expect(result).toEqual({
      ok: true,
      value: {
        handle: 'h',
        shape: { table: { schema: 'public', name: 'foo' }, params: [], replica: 'full', log: 'full' },
      },
    })
  })

  it('needs one or the other', () => {
    expect(parseDeleteRequest('')).toEqual({
      ok: false,
      errors: { handle: ["can't be blank when shape definition is missing"] },
    })
  })

  it('reports cast and table errors', () => {
    expect(parseDeleteRequest('table=a.b.c')).toEqual({
      ok: false,
      errors: { table: ['Invalid relation identifier, too many delimiters: a.b.c'] },
    })
    expect(parseDeleteRequest('handle=h&replica=x')).toEqual({ ok: false, errors: { replica: ['is invalid'] } })
    expect(parseDeleteRequest('table=t&live=yes')).toEqual({ ok: false, errors: { live: ['is invalid'] } })
  })
})

describe('readSecret', () => {
  it.each<[string, string | undefined]>([
    ['secret=s3cr3t', 's3cr3t'],
    ['api_secret=old', 'old'],
    ['secret=new&api_secret=old', 'new'],
    ['secret=', ''],
    ['secret=a%2Bb+c', 'a+b c'],
    ['', undefined],
    ['secret[x]=1', undefined],
  ])('%s', (query, expected) => {
    expect(readSecret(query)).toBe(expected)
  })
})
