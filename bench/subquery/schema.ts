/**
 * The subquery benchmark's tables and shapes (issue 33 item 10): `members
 * (user_id, list_id)` and `todos (id, list_id, title)`; user u is a member of
 * lists u, u+1, … (`perUser` of them, wrapping at `lists`), and every list
 * holds `TODOS_PER_LIST` todos. Lists past `lists` (up to `lists + spare`)
 * have todos and no member: a move-in trial adds one to a user.
 */

export const TODOS_PER_LIST = 2

export type Mode = 'subquery' | 'equality' | 'subquery-wide'

export function schemaSql(lists: number, perUser: number, spare: number): string[] {
  return [
    'DROP TABLE IF EXISTS members, todos',
    'CREATE TABLE members (user_id int4 NOT NULL, list_id int4 NOT NULL, PRIMARY KEY (user_id, list_id))',
    'CREATE TABLE todos (id int4 PRIMARY KEY, list_id int4 NOT NULL, title text NOT NULL)',
    `INSERT INTO members SELECT u, ((u - 1 + k) % ${lists}) + 1 FROM generate_series(1, ${lists}) u, generate_series(0, ${perUser - 1}) k`,
    `INSERT INTO todos SELECT (l - 1) * ${TODOS_PER_LIST} + t, l, 'todo ' || l || '.' || t FROM generate_series(1, ${lists + spare}) l, generate_series(1, ${TODOS_PER_LIST}) t`,
    'ANALYZE members, todos',
  ]
}

/** The todo ids of a list. */
export function todoIds(list: number): number[] {
  return Array.from({ length: TODOS_PER_LIST }, (_, t) => (list - 1) * TODOS_PER_LIST + t + 1)
}

export const SUBQUERY_WHERE = 'list_id IN (SELECT list_id FROM members WHERE user_id = $1)'
export const EQUALITY_WHERE = 'list_id = $1'

/** The shape path of shape `n` (a user for subquery shapes, a list for equality shapes). */
export function shapePath(mode: Mode, n: number): string {
  const where = mode === 'equality' ? EQUALITY_WHERE : SUBQUERY_WHERE
  return `/v1/shape?table=todos&where=${encodeURIComponent(where)}&params%5B1%5D=${n}`
}

export const todoKey = (id: number): string => `"public"."todos"/"${id}"`
