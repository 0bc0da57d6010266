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
