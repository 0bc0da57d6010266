import { scanSync } from 'libpg-query'

/**
 * Rewrites each `$n` of `sql` to its position in `values`, appending the value
 * on first use, so the parameters a query sends are exactly those it uses,
 * numbered densely: Postgres cannot type an untyped parameter no clause
 * mentions (`where=id = $2` with `params[1]` and `params[2]` would fail), and a
 * query joining two clauses needs one numbering. The lexer finds the parameter
 * tokens, never a `$1` inside a string literal or a quoted name.
 */
export function renumberParams(sql: string, valueOf: (n: number) => string | undefined, values: string[]): string {
  const renumbered = new Map<number, number>()
  // Token positions are byte offsets into the UTF-8 text.
  const bytes = Buffer.from(sql, 'utf8')
  let out = ''
  let at = 0
  for (const token of scanSync(sql).tokens) {
    if (token.tokenName !== 'PARAM') continue
    const n = Number(token.text.slice(1))
    let index = renumbered.get(n)
    if (index === undefined) {
      const value = valueOf(n)
      // The compiler refuses a clause naming a param it was not given, so this is a bug of ours.
      if (value === undefined) throw new Error(`no value for parameter $${n} of ${JSON.stringify(sql)}`)
      values.push(value)
      index = values.length
      renumbered.set(n, index)
    }
    out += `${bytes.toString('utf8', at, token.start)}$${index}`
    at = token.end
  }
  return out + bytes.toString('utf8', at)
}
