import { ServerError } from '../errors.js'
import type { Queryable } from '../replication/queryable.js'
import type { Relation } from '../replication/pgoutput-messages.js'
import type { WhereColumn } from '../where/index.js'
import type { TableDescription } from './change-encoder.js'

/**
 * What the pipeline needs to know about one table, read from the Postgres
 * catalog in one query: columns (as pgoutput publishes them: attnum order, no
 * dropped or generated columns), their types with domains, enums and arrays
 * resolved, the primary key and the replica identity.
 */

export interface TableColumn {
  readonly name: string
  readonly attnum: number
  /** atttypid: for a domain column the domain's OID, as pgoutput sends it. */
  readonly typeOid: number
  /** atttypmod (-1 when none). */
  readonly typeMod: number
  /** pg_type.typname of the column type: `_int4` for an int4[] column, an enum's or domain's own name. */
  readonly typeName: string
  /**
   * The type as SQL names it whatever the session's search_path: schema and
   * name, each quoted where it needs to be (`pg_catalog.int4`, `app."Status"`).
   * Absent from tables built by hand (tests), which then use `typeName`.
   */
  readonly typeSql?: string
  /** Arrays (including domains over arrays): the element typname (`int4`); for arrays of domains or enums the element's own name. */
  readonly elementTypeName?: string
  /** When the array element is a domain: the element's base typname, recursively resolved. */
  readonly elementBaseTypeName?: string
  /** 0 for non-arrays; for arrays max(attndims, 1) (attndims is 0 for a domain over an array, docs/protocol.md §7's caveat). */
  readonly dims: number
  readonly notNull: boolean
  /** 0-based position in the primary key. */
  readonly pkIndex?: number
  /** For an enum column, an array of an enum, or a domain over either: the labels in enumsortorder. */
  readonly enumValues?: readonly string[]
  /**
   * For a domain: the base type's typname, recursively resolved (`_int4` for a
   * domain over int4[]); for an array of a domain: the element's base typname.
   */
  readonly baseTypeName?: string
  /** pg_type.typcategory of the column type (a domain has its base type's category). */
  readonly typeCategory: string
  /**
   * The column's collation when it is nondeterministic (equal strings that
   * differ in bytes: case- or accent-insensitive ICU collations): where
   * clauses compare text byte for byte and refuse to compare such a column.
   */
  readonly nondeterministicCollation?: string
  /**
   * Whether `col::text` prints what the type's output function prints (what
   * pgoutput sends). False where a cast function to text differs: boolean
   * (`true` vs `t`), bpchar (trailing blanks trimmed), inet/cidr (`/32` added),
   * domains over these, and any user-defined function cast to text; and for
   * xml, whose binary cast keeps the stored text while its output function
   * drops an `<?xml …?>` declaration.
   */
  readonly castToTextIsOutput: boolean
}

export type TableKind = 'table' | 'partitioned'
export type ReplicaIdentitySetting = 'default' | 'nothing' | 'full' | 'index'

export interface TableInfo {
  readonly oid: number
  readonly schema: string
  readonly name: string
  /** relkind r or p; anything else is not loadable. */
  readonly kind: TableKind
  readonly replicaIdentity: ReplicaIdentitySetting
  /** attnum order, no dropped columns, no generated columns (pgoutput does not publish them). */
  readonly columns: readonly TableColumn[]
  /** Primary-key column names in key order; [] when none. */
  readonly primaryKey: readonly string[]
}

export type TableCatalogErrorCode = 'unsupported_relation' | 'catalog_inconsistent'

export class TableCatalogError extends ServerError<TableCatalogErrorCode> {
  override readonly name: string = 'TableCatalogError'
  constructor(code: TableCatalogErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options)
  }
}

/**
 * The relation exists but cannot be replicated: not a table or partitioned table
 * (a view, a sequence, a foreign table…), or a table Postgres will not publish
 * (a system catalog, an unlogged or temporary table).
 */
export class TableNotSupportedError extends TableCatalogError {
  override readonly name = 'TableNotSupportedError'
  constructor(
    readonly schema: string,
    readonly table: string,
    /** pg_class.relkind */
    readonly relkind: string,
    /** Why a table of a supported kind is still refused; the relkind decides otherwise. */
    reason?: string,
  ) {
    super(
      'unsupported_relation',
      `${JSON.stringify(schema)}.${JSON.stringify(table)} is ${reason ?? `a ${RELKIND_NAMES[relkind] ?? `relation of kind '${relkind}'`}, not a table; only tables and partitioned tables can be synced`}`,
    )
  }
}

/**
 * Postgres's FirstNormalObjectId: relations below it were created by initdb
 * (pg_catalog, information_schema). Postgres refuses to publish them, and
 * Sluice must not even try: adding a table first sets REPLICA IDENTITY FULL on it,
 * which would alter an information_schema table before the publication refused it.
 */
const FIRST_NORMAL_OBJECT_ID = 16384

const PERSISTENCE_REFUSALS: Readonly<Record<string, string>> = {
  u: 'an unlogged table; Postgres does not replicate unlogged tables',
  t: 'a temporary table; Postgres does not replicate temporary tables',
}

const RELKIND_NAMES: Readonly<Record<string, string>> = {
  v: 'view',
  m: 'materialized view',
  f: 'foreign table',
  S: 'sequence',
  c: 'composite type',
  i: 'index',
  I: 'partitioned index',
  t: 'TOAST table',
}

const REPLICA_IDENTITIES: Readonly<Record<string, ReplicaIdentitySetting>> = { d: 'default', n: 'nothing', f: 'full', i: 'index' }

/** The table's primary-key column names in key order (JSON array, or null): for both catalog queries, so they compare alike. */
function primaryKeySql(relationOid: string): string {
  return `(SELECT pg_catalog.json_agg(a.attname ORDER BY k.ord)
      FROM pg_catalog.pg_index i
      CROSS JOIN LATERAL pg_catalog.unnest(i.indkey::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
      WHERE i.indrelid = ${relationOid} AND i.indisprimary)`
}

/**
 * One query: the relation, its columns, the closure of the types they use
 * (domains down to their base types, true arrays down to their elements; a
 * true array is the `typarray` of its element, which leaves out int2vector and
 * friends whose text is not an array literal) and the primary key. Everything
 * is schema-qualified so a hostile search_path changes nothing, and returned
 * as one JSON text so the driver's type parsers play no part.
 */
/**
 * The relation's replica identity as decoding sees it. Changes of a
 * partitioned table are decoded on its partitions, each by its own setting
 * (pgoutput sends a DEFAULT partition's old rows with only their key
 * columns), and a partition created later starts at DEFAULT: so a partitioned
 * table counts as FULL only while every partition is, and the catalog watch
 * sees a new DEFAULT partition as a change of the table.
 */
function replidentSql(c: string): string {
  return `CASE WHEN ${c}.relkind = 'p' AND EXISTS (SELECT FROM pg_catalog.pg_partition_tree(${c}.oid::pg_catalog.regclass) pt
      JOIN pg_catalog.pg_class pc ON pc.oid = pt.relid WHERE pc.relreplident <> 'f') THEN 'd' ELSE ${c}.relreplident::pg_catalog.text END`
}

function catalogQuery(condition: string): string {
  return `WITH RECURSIVE rel AS (
  SELECT c.oid, n.nspname, c.relname, c.relkind, c.relpersistence, ${replidentSql('c')} AS relreplident
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  WHERE ${condition}
), cols AS (
  SELECT a.attnum, a.attname, a.atttypid, a.atttypmod, a.attndims, a.attnotnull, a.attcollation
  FROM pg_catalog.pg_attribute a JOIN rel ON a.attrelid = rel.oid
  WHERE a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
), types AS (
  SELECT t.oid, t.typname, t.typtype, t.typcategory, t.typbasetype, t.typelem,
    (t.typelem <> 0 AND t.typlen = -1 AND EXISTS (SELECT FROM pg_catalog.pg_type e WHERE e.oid = t.typelem AND e.typarray = t.oid)) AS is_array
  FROM pg_catalog.pg_type t WHERE t.oid IN (SELECT atttypid FROM cols)
  UNION
  SELECT t.oid, t.typname, t.typtype, t.typcategory, t.typbasetype, t.typelem,
    (t.typelem <> 0 AND t.typlen = -1 AND EXISTS (SELECT FROM pg_catalog.pg_type e WHERE e.oid = t.typelem AND e.typarray = t.oid))
  FROM types p JOIN pg_catalog.pg_type t
    ON (p.typtype = 'd' AND t.oid = p.typbasetype) OR (p.typtype <> 'd' AND p.is_array AND t.oid = p.typelem)
)
SELECT pg_catalog.json_build_object(
  'oid', rel.oid::pg_catalog.int8,
  'schema', rel.nspname,
  'name', rel.relname,
  'relkind', rel.relkind::pg_catalog.text,
  'relpersistence', rel.relpersistence::pg_catalog.text,
  'replident', rel.relreplident::pg_catalog.text,
  'columns', (SELECT pg_catalog.json_agg(pg_catalog.json_build_array(attnum, attname, atttypid::pg_catalog.int8, atttypmod, attndims, attnotnull,
      (SELECT pg_catalog.quote_ident(tn.nspname) OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(ty.typname)
       FROM pg_catalog.pg_type ty JOIN pg_catalog.pg_namespace tn ON tn.oid = ty.typnamespace WHERE ty.oid = atttypid),
      (SELECT co.collname FROM pg_catalog.pg_collation co WHERE co.oid = attcollation AND NOT co.collisdeterministic)) ORDER BY attnum) FROM cols),
  'types', (SELECT pg_catalog.json_agg(pg_catalog.json_build_array(
      t.oid::pg_catalog.int8, t.typname, t.typtype::pg_catalog.text, t.typcategory::pg_catalog.text, t.typbasetype::pg_catalog.int8,
      CASE WHEN t.is_array THEN t.typelem::pg_catalog.int8 END,
      CASE WHEN t.typtype = 'e' THEN (SELECT pg_catalog.json_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid) END,
      EXISTS (SELECT FROM pg_catalog.pg_cast k WHERE k.castsource = t.oid AND k.casttarget = 'pg_catalog.text'::pg_catalog.regtype
        AND (k.castmethod = 'f' OR t.oid = 'pg_catalog.xml'::pg_catalog.regtype))
    )) FROM types t),
  'primary_key', ${primaryKeySql('rel.oid')}
)::pg_catalog.text AS info
FROM rel`
}

const BY_NAME = catalogQuery('n.nspname = $1 AND c.relname = $2')
const BY_OID = catalogQuery('c.oid = $1::pg_catalog.int8::pg_catalog.oid')

/** The table `schema`.`name` (matched exactly, case-sensitive); undefined when there is no such relation. */
export async function loadTable(db: Queryable, table: { readonly schema: string; readonly name: string }): Promise<TableInfo | undefined> {
  // Postgres text cannot hold a NUL, so no relation is named with one; asked anyway, it raises an encoding error.
  if (table.schema.includes('\0') || table.name.includes('\0')) return undefined
  const { rows } = await db.query(BY_NAME, [table.schema, table.name])
  return fromRows(rows)
}

/** The table with this OID; undefined when there is none. */
export async function loadTableByOid(db: Queryable, oid: number): Promise<TableInfo | undefined> {
  if (!validOid(oid)) return undefined
  const { rows } = await db.query(BY_OID, [String(oid)])
  return fromRows(rows)
}

/**
 * The by-OID catalog query as plain SQL (the OID, an integer checked here, in
 * place of the parameter), for callers that send it in one round trip with other
 * statements; read its result with `tableFromCatalogRows`.
 */
export function tableByOidSql(oid: number): string {
  if (!validOid(oid)) throw new TableCatalogError('catalog_inconsistent', `${oid} is not a table OID`)
  return catalogQuery(`c.oid = ${oid}::pg_catalog.int8::pg_catalog.oid`)
}

/** The table in the rows of `tableByOidSql`; undefined when there is none. */
export function tableFromCatalogRows(rows: ReadonlyArray<Record<string, unknown>>): TableInfo | undefined {
  return fromRows(rows)
}

function validOid(oid: number): boolean {
  return Number.isInteger(oid) && oid > 0 && oid <= 0xffff_ffff
}

type ColumnRow = [
  attnum: number,
  name: string,
  typeOid: number,
  typeMod: number,
  attndims: number,
  notNull: boolean,
  typeSql: string,
  nondeterministicCollation: string | null,
]
type TypeRow = [
  oid: number,
  name: string,
  typtype: string,
  category: string,
  baseOid: number,
  elementOid: number | null,
  labels: string[] | null,
  functionCastToText: boolean,
]
interface RawInfo {
  oid: number
  schema: string
  name: string
  relkind: string
  relpersistence: string
  replident: string
  columns: ColumnRow[] | null
  types: TypeRow[] | null
  primary_key: string[] | null
}

function fromRows(rows: ReadonlyArray<Record<string, unknown>>): TableInfo | undefined {
  const text = rows[0]?.['info']
  if (text === undefined) return undefined
  if (typeof text !== 'string') throw new TableCatalogError('catalog_inconsistent', 'the catalog query returned no JSON text')
  return buildInfo(JSON.parse(text) as RawInfo)
}

function buildInfo(raw: RawInfo): TableInfo {
  const kind = raw.relkind === 'r' ? 'table' : raw.relkind === 'p' ? 'partitioned' : undefined
  if (kind === undefined) throw new TableNotSupportedError(raw.schema, raw.name, raw.relkind)
  if (raw.oid < FIRST_NORMAL_OBJECT_ID) {
    throw new TableNotSupportedError(raw.schema, raw.name, raw.relkind, 'a system table; Postgres does not replicate system tables')
  }
  const persistence = PERSISTENCE_REFUSALS[raw.relpersistence]
  if (persistence !== undefined) throw new TableNotSupportedError(raw.schema, raw.name, raw.relkind, persistence)
  const types = new Map<number, TypeRow>()
  for (const row of raw.types ?? []) types.set(row[0], row)
  const typeOf = (oid: number): TypeRow => {
    const row = types.get(oid)
    if (row === undefined) throw new TableCatalogError('catalog_inconsistent', `type ${oid} of ${JSON.stringify(raw.name)} is missing from the catalog`)
    return row
  }
  /** Follows a domain down to its (non-domain) base type. */
  const baseOf = (row: TypeRow): TypeRow => {
    let current = row
    for (let depth = 0; current[2] === 'd'; depth++) {
      if (depth > 100) throw new TableCatalogError('catalog_inconsistent', `domain ${JSON.stringify(row[1])} does not resolve to a base type`)
      current = typeOf(current[4])
    }
    return current
  }

  const primaryKey = raw.primary_key ?? []
  const columns = (raw.columns ?? []).map(([attnum, name, typeOid, typeMod, attndims, notNull, typeSql, nondeterministic]): TableColumn => {
    const type = typeOf(typeOid)
    const isDomain = type[2] === 'd'
    const base = baseOf(type)
    const pk = primaryKey.indexOf(name)
    const common = {
      name,
      attnum,
      typeOid,
      typeMod,
      typeName: type[1],
      typeSql,
      notNull,
      typeCategory: type[3],
      ...(nondeterministic !== null && nondeterministic !== undefined ? { nondeterministicCollation: nondeterministic } : {}),
      ...(pk >= 0 ? { pkIndex: pk } : {}),
    }
    const elementOid = base[5]
    if (elementOid !== null) {
      const element = typeOf(elementOid)
      const elementBase = baseOf(element)
      const elementIsDomain = element[2] === 'd'
      const labels = elementBase[6]
      const baseTypeName = isDomain ? base[1] : elementIsDomain ? elementBase[1] : undefined
      return {
        ...common,
        elementTypeName: element[1],
        ...(elementIsDomain ? { elementBaseTypeName: elementBase[1] } : {}),
        dims: Math.max(attndims, 1),
        ...(labels !== null ? { enumValues: labels } : {}),
        ...(baseTypeName !== undefined ? { baseTypeName } : {}),
        // array_out prints each element with its output function.
        castToTextIsOutput: true,
      }
    }
    const labels = base[6]
    return {
      ...common,
      dims: 0,
      ...(labels !== null ? { enumValues: labels } : {}),
      ...(isDomain ? { baseTypeName: base[1] } : {}),
      // A cast to text from a domain is looked up on its base type; composites and enums go through I/O.
      castToTextIsOutput: !base[7],
    }
  })
  const names = new Set(columns.map((c) => c.name))
  for (const column of primaryKey) {
    if (!names.has(column)) throw new TableCatalogError('catalog_inconsistent', `primary-key column ${JSON.stringify(column)} is not a published column`)
  }
  return {
    oid: raw.oid,
    schema: raw.schema,
    name: raw.name,
    kind,
    replicaIdentity: REPLICA_IDENTITIES[raw.replident] ?? 'default',
    columns,
    primaryKey,
  }
}

/**
 * Columns for `compileWhere`: a domain evaluates as its base type, an enum
 * carries its labels, an array is its element type (the element's base for an
 * array of a domain) with `dims`. The exception is a domain over an enum (or
 * an array of one), which Postgres cannot compare at all: it is left opaque.
 */
/** One frozen list per table description: a restart compiles every stored shape of a table against it (see compileWhereSync). */
const whereColumnsOf = new WeakMap<TableInfo, readonly WhereColumn[]>()

export function whereColumns(info: TableInfo): readonly WhereColumn[] {
  let list = whereColumnsOf.get(info)
  if (list === undefined) {
    list = Object.freeze(whereColumnsUncached(info))
    whereColumnsOf.set(info, list)
  }
  return list
}

function whereColumnsUncached(info: TableInfo): WhereColumn[] {
  return info.columns.map((column): WhereColumn => {
    const isArray = column.dims > 0
    // Postgres cannot compare a domain over an enum with anything (`d = 'x'`,
    // `d = 'x'::enum` and `'x' = ANY(array_of_d)` all fail: "operator does not
    // exist"), so such a column stays opaque (IS NULL and ::text only), as
    // Postgres would reject the rest. A domain over an enum *array* is fine.
    const domainOverEnum = column.enumValues !== undefined && (isArray ? column.elementBaseTypeName !== undefined : column.baseTypeName !== undefined)
    const type = domainOverEnum
      ? isArray
        ? (column.elementTypeName ?? column.typeName)
        : column.typeName
      : isArray
        ? (column.elementBaseTypeName ?? column.elementTypeName ?? column.typeName)
        : (column.baseTypeName ?? column.typeName)
    const plain = type === column.typeName
    return {
      name: column.name,
      type,
      ...(isArray ? { dims: column.dims } : {}),
      ...(plain ? { typeOid: column.typeOid } : {}),
      ...(column.enumValues !== undefined && !domainOverEnum ? { enumValues: column.enumValues } : {}),
      ...(column.nondeterministicCollation !== undefined ? { nondeterministicCollation: column.nondeterministicCollation } : {}),
      notNull: column.notNull,
    }
  })
}

/** What `ChangeEncoder` needs of the table. */
export function tableDescription(info: TableInfo): TableDescription {
  return {
    schema: info.schema,
    name: info.name,
    columns: info.columns.map((column) => column.name),
    primaryKey: info.primaryKey,
  }
}

/**
 * Whether a pgoutput Relation describes the same table shape as the catalog:
 * same OID, schema and name, and the same columns in order with equal name,
 * type OID and type modifier. When it does not, the table changed since it was
 * loaded (a column added, dropped, retyped, or the table renamed) and anything
 * built from the catalog must be rebuilt.
 */
export function matchesRelation(info: TableInfo, relation: Relation): boolean {
  if (relation.id !== info.oid || relation.schema !== info.schema || relation.table !== info.name) return false
  if (relation.columns.length !== info.columns.length) return false
  return relation.columns.every((column, i) => {
    const ours = info.columns[i]
    return ours !== undefined && column.name === ours.name && column.typeOid === ours.typeOid && column.typeMod === ours.typeMod
  })
}

/**
 * What a shape's rows depend on, beyond its where clause: the table's identity
 * and name, the columns pgoutput sends (name, type, modifier, in order), the
 * primary key (which makes each row's key) and the replica identity (which
 * decides what an update or delete carries of the old row). Two descriptions
 * with the same state make the same log; any difference means the shapes made
 * for one cannot follow the other.
 */
export interface TableState {
  readonly oid: number
  readonly schema: string
  readonly name: string
  readonly replicaIdentity: ReplicaIdentitySetting
  readonly columns: ReadonlyArray<readonly [name: string, typeOid: number, typeMod: number]>
  readonly primaryKey: readonly string[]
}

export function tableStateOf(info: TableInfo): TableState {
  return {
    oid: info.oid,
    schema: info.schema,
    name: info.name,
    replicaIdentity: info.replicaIdentity,
    columns: info.columns.map((c) => [c.name, c.typeOid, c.typeMod] as const),
    primaryKey: info.primaryKey,
  }
}

/**
 * How the table a shape was made for (`made`) differs from the table as the
 * catalog describes it now (`now`, undefined when no table has its OID), in
 * words for logs; undefined when it does not.
 */
export function tableChange(made: TableInfo, now: TableState | undefined): string | undefined {
  const table = `${JSON.stringify(made.schema)}.${JSON.stringify(made.name)}`
  if (now === undefined || now.oid !== made.oid) return `${table} was dropped`
  if (now.schema !== made.schema || now.name !== made.name) return `${table} was renamed to ${JSON.stringify(now.schema)}.${JSON.stringify(now.name)}`
  if (!sameColumns(made.columns, now.columns)) return `the columns of ${table} changed`
  if (!sameList(made.primaryKey, now.primaryKey)) {
    return `the primary key of ${table} changed from (${made.primaryKey.join(', ')}) to (${now.primaryKey.join(', ')})`
  }
  if (made.replicaIdentity !== now.replicaIdentity) return `the replica identity of ${table} changed to ${now.replicaIdentity}`
  return undefined
}

function sameColumns(made: readonly TableColumn[], now: TableState['columns']): boolean {
  if (made.length !== now.length) return false
  return made.every((a, i) => {
    const b = now[i]!
    return a.name === b[0] && a.typeOid === b[1] && a.typeMod === b[2]
  })
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i])
}

/**
 * The state of each of these tables (by OID) in one catalog query; a table
 * that is gone is missing from the map. Cheap enough to run every second over
 * every table with shapes: no type closure, no enum labels.
 */
export async function loadTableStates(db: Queryable, oids: readonly number[]): Promise<Map<number, TableState>> {
  const states = new Map<number, TableState>()
  const valid = oids.filter(validOid)
  if (valid.length === 0) return states
  const { rows } = await db.query(TABLE_STATES, [valid.map(String)])
  for (const row of rows) {
    const raw = JSON.parse(String(row['state'])) as {
      oid: number
      schema: string
      name: string
      replident: string
      columns: Array<[string, number, number]> | null
      primary_key: string[] | null
    }
    states.set(raw.oid, {
      oid: raw.oid,
      schema: raw.schema,
      name: raw.name,
      replicaIdentity: REPLICA_IDENTITIES[raw.replident] ?? 'default',
      columns: raw.columns ?? [],
      primaryKey: raw.primary_key ?? [],
    })
  }
  return states
}

/** The fields of `TableState`, chosen as `catalogQuery` chooses them (published columns, the primary key in key order). */
const TABLE_STATES = `SELECT pg_catalog.json_build_object(
  'oid', c.oid::pg_catalog.int8,
  'schema', n.nspname,
  'name', c.relname,
  'replident', ${replidentSql('c')},
  'columns', (SELECT pg_catalog.json_agg(pg_catalog.json_build_array(a.attname, a.atttypid::pg_catalog.int8, a.atttypmod) ORDER BY a.attnum)
      FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''),
  'primary_key', ${primaryKeySql('c.oid')}
)::pg_catalog.text AS state
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = ANY ($1::pg_catalog.int8[]::pg_catalog.oid[])`
