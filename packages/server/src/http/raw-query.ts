/** The query string of a request URL, byte for byte (no decoding): the protocol parsers read it raw. */
export function rawQuery(url: string): string {
  const at = url.indexOf('?')
  return at < 0 ? '' : url.slice(at + 1)
}

/** Query keys whose values never reach a log: the shape API's secret, under either name. */
const SECRET_KEYS = new Set(['secret', 'api_secret'])

/**
 * The URL as logs may show it: the value of every `secret`/`api_secret`
 * parameter (however its key is encoded or bracketed) replaced, right or wrong.
 */
export function urlForLog(url: string): string {
  const at = url.indexOf('?')
  if (at < 0) return url
  const parts = url.slice(at + 1).split('&')
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!
    const eq = part.indexOf('=')
    const key = decodeKey(eq < 0 ? part : part.slice(0, eq))
    const bracket = key.indexOf('[')
    if (SECRET_KEYS.has(bracket < 0 ? key : key.slice(0, bracket))) parts[i] = `${eq < 0 ? part : part.slice(0, eq)}=[redacted]`
  }
  return `${url.slice(0, at)}?${parts.join('&')}`
}

function decodeKey(key: string): string {
  try {
    return decodeURIComponent(key.replaceAll('+', ' ')).trim().toLowerCase()
  } catch {
    return key.toLowerCase()
  }
}
