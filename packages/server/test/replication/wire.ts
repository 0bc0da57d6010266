/**
 * Builds pgoutput byte buffers by hand for the decoder tests: each method
 * appends one wire primitive, big-endian, as the protocol documentation lists
 * them. Deliberately not an encoder of our message types, so a test states
 * the bytes rather than round-tripping our own assumptions.
 */
export class Wire {
  private readonly parts: Buffer[] = []

  static of(type: string): Wire {
    return new Wire().char(type)
  }

  char(c: string): this {
    return this.u8(c.charCodeAt(0))
  }

  u8(value: number): this {
    this.parts.push(Buffer.from([value]))
    return this
  }

  i16(value: number): this {
    const b = Buffer.alloc(2)
    b.writeInt16BE(value)
    this.parts.push(b)
    return this
  }

  i32(value: number): this {
    const b = Buffer.alloc(4)
    b.writeInt32BE(value)
    this.parts.push(b)
    return this
  }

  u32(value: number): this {
    const b = Buffer.alloc(4)
    b.writeUInt32BE(value)
    this.parts.push(b)
    return this
  }

  u64(value: bigint): this {
    const b = Buffer.alloc(8)
    b.writeBigUInt64BE(value)
    this.parts.push(b)
    return this
  }

  i64(value: bigint): this {
    const b = Buffer.alloc(8)
    b.writeBigInt64BE(value)
    this.parts.push(b)
    return this
  }

  cstring(value: string): this {
    this.parts.push(Buffer.from(value, 'utf8'), Buffer.from([0]))
    return this
  }

  raw(bytes: Buffer | Uint8Array): this {
    this.parts.push(Buffer.from(bytes))
    return this
  }

  /** TupleData: Int16 count, then per column n / u / t+Int32 length+bytes / b+... */
  tuple(values: ReadonlyArray<string | null | 'UNCHANGED' | { binary: Buffer }>): this {
    this.i16(values.length)
    for (const value of values) {
      if (value === null) this.char('n')
      else if (value === 'UNCHANGED') this.char('u')
      else if (typeof value === 'string') {
        const bytes = Buffer.from(value, 'utf8')
        this.char('t').i32(bytes.length).raw(bytes)
      } else this.char('b').i32(value.binary.length).raw(value.binary)
    }
    return this
  }

  build(): Buffer {
    return Buffer.concat(this.parts)
  }
}

export interface ColumnSpec {
  readonly name: string
  readonly typeOid: number
  readonly typeMod?: number
  readonly key?: boolean
}

/** A Relation message ('R'), with an xid prefix when `xid` is given (streamed). */
export function relationBytes(
  id: number,
  schema: string,
  table: string,
  columns: readonly ColumnSpec[],
  options: { identity?: string; xid?: number } = {},
): Buffer {
  const w = Wire.of('R')
  if (options.xid !== undefined) w.u32(options.xid)
  w.u32(id).cstring(schema).cstring(table).char(options.identity ?? 'f').i16(columns.length)
  for (const c of columns) w.u8(c.key === true ? 1 : 0).cstring(c.name).u32(c.typeOid).i32(c.typeMod ?? -1)
  return w.build()
}
