import type { RowValues } from '@sluice/protocol'
import type { WhereClause, WhereColumn, WhereResult } from '../../src/where/index.js'
import { compileWhereSync, EvaluationFailure, WhereClauseError } from '../../src/where/index.js'

/** A table with one column per supported type, for unit tests. */
export const COLUMNS: readonly WhereColumn[] = [
  { name: 'id', type: 'int4', notNull: true },
  { name: 'i2', type: 'int2' },
  { name: 'i4', type: 'int4' },
  { name: 'i8', type: 'int8' },
  { name: 'n', type: 'numeric' },
  { name: 'f4', type: 'float4' },
  { name: 'f8', type: 'float8' },
  { name: 't', type: 'text' },
  { name: 'vc', type: 'varchar' },
  { name: 'bc', type: 'bpchar' },
  { name: 'b', type: 'bool' },
  { name: 'u', type: 'uuid' },
  { name: 'd', type: 'date' },
  { name: 'tm', type: 'time' },
  { name: 'ts', type: 'timestamp' },
  { name: 'tz', type: 'timestamptz' },
  { name: 'iv', type: 'interval' },
  { name: 'j', type: 'json' },
  { name: 'jb', type: 'jsonb' },
  { name: 'mood', type: 'mood', enumValues: ['sad', 'ok', 'happy'] },
  { name: 'ai', type: '_int4' },
  { name: 'at', type: 'text', dims: 1 },
  { name: 'inet', type: 'inet' },
  { name: 'Mixed Case', type: 'text' },
]

export function compile(where: string, params: readonly string[] = []): WhereClause {
  return compileWhereSync(where, { columns: COLUMNS, params })
}

/** Evaluates `where` on a row; failures come back as 'error: <code>' for readable tables. */
export function evaluate(where: string, row: RowValues, params: readonly string[] = []): boolean | null | string {
  const result: WhereResult = compile(where, params).evaluate(row)
  return result instanceof EvaluationFailure ? `error: ${result.code}` : result
}

/** The refusal of a clause, as `reason: message`. */
export function refusal(where: string, params: readonly string[] = []): string {
  try {
    compile(where, params)
  } catch (error) {
    if (error instanceof WhereClauseError) return `${error.reason}: ${error.message}`
    throw error
  }
  return 'accepted'
}
