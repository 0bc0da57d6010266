/**
 * Opening a Shape of either client behind one small interface, so a worker
 * process measures both the same way and imports only the client it measures.
 */
export type ShapeClient = 'ours' | 'official'
export type Row = Record<string, unknown>

/** What a worker needs of either Shape class. */
export interface OpenShape {
  /** Resolves at the first up-to-date. */
  ready(): Promise<void>
  /** The materialised rows by key (the live Map, not a copy). */
  value(): ReadonlyMap<string, Row>
  /** Called when the Shape tells its subscribers the rows changed. */
  subscribe(callback: () => void): void
  stop(): Promise<void>
}

export type Opener = (url: string, table: string, where: string | undefined) => OpenShape

/** Imports `@sluice/client` (ours) or `@electric-sql/client` (official) and returns how to open a Shape with it. */
export async function loadOpener(client: ShapeClient): Promise<Opener> {
  if (client === 'ours') {
    const { Shape, ShapeStream } = await import('@sluice/client')
    return (url, table, where) => {
      const shape = new Shape(new ShapeStream({ url, params: where === undefined ? { table } : { table, where } }))
      return {
        ready: () => shape.ready(),
        value: () => shape.value as ReadonlyMap<string, Row>,
        subscribe: (callback) => void shape.subscribe(callback),
        stop: () => shape.stop(),
      }
    }
  }
  if (client === 'official') {
    const { Shape, ShapeStream } = await import('@electric-sql/client')
    return (url, table, where) => {
      const controller = new AbortController()
      const stream = new ShapeStream({ url, params: where === undefined ? { table } : { table, where }, signal: controller.signal })
      // Its own ShapeStream, typed against its interface with optional members exactOptionalPropertyTypes rejects.
      const shape = new Shape(stream as unknown as ConstructorParameters<typeof Shape>[0])
      return {
        ready: async () => {
          await shape.value
        },
        value: () => shape.currentValue as ReadonlyMap<string, Row>,
        subscribe: (callback) => void shape.subscribe(callback),
        stop: async () => {
          shape.unsubscribeAll()
          controller.abort()
        },
      }
    }
  }
  throw new Error(`unknown client ${String(client)}`)
}

/** sha256 over the rows sorted by key, every value (bigints as text): equal digests, equal rows. */
export function rowsDigest(value: ReadonlyMap<string, Row>, hash: { update(text: string): unknown; digest(encoding: 'hex'): string }): string {
  for (const key of [...value.keys()].sort()) {
    hash.update(key)
    hash.update(JSON.stringify(value.get(key), (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v)))
    hash.update('\n')
  }
  return hash.digest('hex')
}
