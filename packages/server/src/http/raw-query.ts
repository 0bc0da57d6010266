/** The query string of a request URL, byte for byte (no decoding): the protocol parsers read it raw. */
export function rawQuery(url: string): string {
  const at = url.indexOf('?')
  return at < 0 ? '' : url.slice(at + 1)
}
