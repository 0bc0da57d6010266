// Shape definitions, handles and the registry that maps one to the other.
export {
  type CompiledDefinition,
  DEFINITION_KEY_VERSION,
  type ShapeDefinition,
  compareCodePoints,
  compileDefinition,
  definitionHash,
  definitionKey,
  definitionsEqual,
  freezeDefinition,
  normalizeDefinition,
  paramList,
  referencedParamNumbers,
} from './shape-definition.js'
export {
  HandleIssuer,
  type HandleIssuerOptions,
  MAX_HANDLE_LENGTH,
  type MicrosClock,
  type ParsedHandle,
  formatHandle,
  handleMicros,
  isValidHandle,
  parseHandle,
  systemMicrosClock,
} from './handle.js'
export {
  SHAPE_META_VERSION,
  type ShapeMeta,
  type SnapshotStitch,
  type TableSignature,
  ShapeMetaError,
  decodeShapeMeta,
  encodeShapeMeta,
} from './shape-meta.js'
export {
  type HandleStatus,
  type ShapeEntry,
  ShapeRegistry,
  type ShapeRegistryOptions,
} from './shape-registry.js'
