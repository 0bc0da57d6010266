// The shapes stage: turning replicated changes into shape-log lines.
export { ChangeEncoder, ChangeEncodingError } from './change-encoder.js'
export type {
  ChangeEncoderOptions,
  ChangeEncodingErrorCode,
  ChangePosition,
  EncodableChange,
  EncodedLine,
  TableDescription,
} from './change-encoder.js'
export * from './definition/index.js'
export { ShapeIndex, chooseConjunct } from './shape-index.js'
export { TableCatalogError, TableNotSupportedError, loadTable, loadTableByOid, matchesRelation, tableDescription, whereColumns } from './table-catalog.js'
export type { ReplicaIdentitySetting, TableCatalogErrorCode, TableColumn, TableInfo, TableKind } from './table-catalog.js'
export * from './snapshot/index.js'
export { TRANSACTION_PART_VERSION, transactionPartCodec } from './transaction-part-codec.js'
