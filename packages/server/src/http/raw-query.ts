import { decodeQueryString } from '@sluice/protocol'

/** The query string of a request URL, byte for byte (no decoding): the protocol parsers read it raw. */
export function rawQuery(url: string): string {
  const at = url.indexOf('?')
  return at < 0 ? '' : url.slice(at + 1)
}

/** Query keys whose values never reach a log: the shape API's secret, under either name. */
const SECRET_KEYS = new Set(['secret', 'api_secret'])

/**
 * The URL as logs may show it: the value of every `secret`/`api_secret`
 * parameter replaced, right or wrong. Each key is decoded by the same parser
 * the secret check reads the query with (percent-encoding, `+`, brackets), so
 * whatever that check takes for the secret is hidden too.
 */
export function urlForLog(url: string): string {
  const at = url.indexOf('?')
  if (at < 0) return url
  const parts = url.slice(at + 1).split('&')
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!
    const eq = part.indexOf('=')
    const key = eq < 0 ? part : part.slice(0, eq)
    const names = Object.keys(decodeQueryString(`${key}=`))
    if (names.some((name) => SECRET_KEYS.has(name.trim().toLowerCase()))) parts[i] = `${key}=[redacted]`
  }
  return `${url.slice(0, at)}?${parts.join('&')}`
}
