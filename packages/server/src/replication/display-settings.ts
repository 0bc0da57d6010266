/**
 * The session settings that decide how values print as text (docs/protocol.md §3.5).
 * pgoutput prints every value with the type's output function inside the
 * walsender, using that session's settings, so the replication connection must
 * carry the same ones as the snapshot queries or a row would read differently
 * in its snapshot and in its changes:
 *
 *   bytea_output       bytea:                      \x0001ff
 *   DateStyle          date, timestamp[tz]:        2024-01-31 12:00:00
 *   TimeZone           timestamptz:                2024-01-31 12:00:00+00
 *   extra_float_digits float4/float8 (>0 = shortest exact round-trip form)
 *   IntervalStyle      interval:                   P1DT2H
 *
 * Applied through the `options` startup parameter because a walsender takes no
 * SET once START_REPLICATION runs.
 */
export const DISPLAY_SETTINGS = {
  bytea_output: 'hex',
  DateStyle: 'ISO, DMY',
  TimeZone: 'UTC',
  extra_float_digits: '1',
  IntervalStyle: 'iso_8601',
} as const satisfies Readonly<Record<string, string>>

/**
 * `-c name=value` pairs for the `options` startup parameter. The server splits
 * it on whitespace, so spaces in values are backslash-escaped (as are
 * backslashes themselves).
 */
export function startupOptions(settings: Readonly<Record<string, string>>): string {
  return Object.entries(settings)
    .map(([name, value]) => `-c ${name}=${value.replace(/[\\\s]/g, (ch) => `\\${ch}`)}`)
    .join(' ')
}
