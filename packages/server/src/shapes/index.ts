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
// Spilling to disk (the spill module's TransactionPart type is structurally the router's; import it from './spill/index.js').
export {
  DEFAULT_QUEUE_FLUSH_BYTES,
  DEFAULT_QUEUE_READ_BYTES,
  DEFAULT_SPILL_BATCH_BYTES,
  DEFAULT_SPILL_BATCH_CHANGES,
  DEFAULT_SPILL_MEMORY_BYTES,
  DEFAULT_SPILL_READ_BYTES,
  SPILL_ERROR_CODES,
  SPILL_FILE_SUFFIX,
  SPILL_FORMAT_VERSION,
  SpillDir,
  SpillError,
  SpillQueue,
  SpillStreamBuffer,
  TRANSACTION_PART_VERSION,
  nodeSpillFs,
  transactionPartCodec,
} from './spill/index.js'
export type { QueueCodec, SpillDirOptions, SpillErrorCode, SpillFs, SpillQueueOptions, SpillStreamBufferOptions } from './spill/index.js'
