import type { Scenario } from './scenario-runner.js'

/**
 * Scenarios for `runScenario`: SQL steps whose every outcome both clients
 * must reproduce. Numbers name the subquery protocol's test scenarios (the
 * Electric router and integration tests, then TanStack DB's moves suite, 32
 * to 39). Scenarios that only the server can observe (error bodies, a slow
 * dependency snapshot, the buffer limit, the splice's internals) are tested
 * on the server side; a fresh sync after the last step (the runner does one
 * for every scenario) covers 30 and 38.
 */

/** Shapes a server without subquery support already serves: the runner against today's Sluice. */
export const PLAIN_SCENARIOS: readonly Scenario[] = [
  {
    name: 'a where clause on one table: inserts, updates in and out of it, deletes, a burst',
    setup: `CREATE TABLE {posts} (id int4 PRIMARY KEY, user_id int4, title text, pinned bool NOT NULL DEFAULT false, n int8);
      INSERT INTO {posts} VALUES (10, 1, 'a', false, 1), (20, 2, 'b', true, 2), (30, 3, 'c', false, 3)`,
    table: '{posts}',
    where: 'user_id IN (1, 2) OR pinned = true',
    steps: [
      `INSERT INTO {posts} VALUES (11, 1, 'd', false, 4), (31, 3, 'e', false, 5)`,
      `UPDATE {posts} SET title = 'a2', n = 9007199254740993 WHERE id = 10`,
      `UPDATE {posts} SET pinned = true WHERE id = 30`,
      `UPDATE {posts} SET user_id = 3 WHERE id = 11`,
      `DELETE FROM {posts} WHERE id = 20`,
      [`UPDATE {posts} SET pinned = false WHERE id = 30`, `UPDATE {posts} SET user_id = 2 WHERE id = 31`, `INSERT INTO {posts} VALUES (40, NULL, NULL, true, NULL)`],
    ],
  },
  {
    name: 'a where clause with $1 and $2',
    setup: `CREATE TABLE {items} (id int4 PRIMARY KEY, cat text NOT NULL, n int4 NOT NULL);
      INSERT INTO {items} SELECT i, CASE WHEN i % 2 = 0 THEN 'even' ELSE 'odd' END, i FROM generate_series(1, 20) i`,
    table: '{items}',
    where: 'cat = $1 AND n >= $2',
    params: ['even', '6'],
    steps: [`UPDATE {items} SET n = n - 10 WHERE id IN (8, 10)`, `UPDATE {items} SET cat = 'even' WHERE id = 7`, `DELETE FROM {items} WHERE id > 15`],
  },
  {
    name: 'TRUNCATE (a 409 and a new handle for every client), then new rows',
    setup: `CREATE TABLE {notes} (id int4 PRIMARY KEY, body text); INSERT INTO {notes} VALUES (1, 'one'), (2, 'two')`,
    table: '{notes}',
    steps: [`TRUNCATE {notes}`, `INSERT INTO {notes} VALUES (3, 'three')`, `UPDATE {notes} SET body = 'three!' WHERE id = 3`],
  },
]

/** users 1, 2 active and 3 inactive; posts 10, 20, 30 by users 1, 2, 3 (TanStack's moves suite and most router tests). */
const USERS_POSTS = `CREATE TABLE {users} (id int4 PRIMARY KEY, active bool NOT NULL);
  CREATE TABLE {posts} (id int4 PRIMARY KEY, user_id int4, title text NOT NULL, pinned bool NOT NULL DEFAULT false);
  INSERT INTO {users} VALUES (1, true), (2, true), (3, false);
  INSERT INTO {posts} VALUES (10, 1, 'post 10', false), (20, 2, 'post 20', false), (30, 3, 'post 30', false)`
const ACTIVE_AUTHORS = 'user_id IN (SELECT id FROM {users} WHERE active = true)'

/**
 * TanStack DB's moves suite as it writes its tables: uuid keys, camel-case quoted columns, both tables in a
 * schema of their own; users 1 and 2 active, 3 inactive, one post each.
 */
const TANSTACK_USERS_POSTS = `CREATE SCHEMA IF NOT EXISTS e2e_test;
  CREATE TABLE e2e_test.{users} (id uuid PRIMARY KEY, name text NOT NULL, "isActive" boolean NOT NULL);
  CREATE TABLE e2e_test.{posts} (id uuid PRIMARY KEY, "userId" uuid NOT NULL, title text NOT NULL);
  INSERT INTO e2e_test.{users} VALUES ('00000000-0000-4000-8000-000000000001', 'user 1', true),
    ('00000000-0000-4000-8000-000000000002', 'user 2', true), ('00000000-0000-4000-8000-000000000003', 'user 3', false);
  INSERT INTO e2e_test.{posts} VALUES ('00000000-0000-4000-8000-0000000000a1', '00000000-0000-4000-8000-000000000001', 'post 1'),
    ('00000000-0000-4000-8000-0000000000a2', '00000000-0000-4000-8000-000000000002', 'post 2'),
    ('00000000-0000-4000-8000-0000000000a3', '00000000-0000-4000-8000-000000000003', 'post 3')`
const TANSTACK_ACTIVE_AUTHORS = `"userId" IN (SELECT id FROM e2e_test.{users} WHERE "isActive" = true)`

/** Shapes with subqueries (scenarios.pg.test.ts runs them after the plain ones). */
export const SUBQUERY_SCENARIOS: readonly Scenario[] = [
  {
    name: '1, 32: the snapshot has only posts of active users; a live insert of a matching post arrives',
    setup: USERS_POSTS,
    table: '{posts}',
    where: ACTIVE_AUTHORS,
    steps: [`INSERT INTO {posts} VALUES (11, 1, 'post 11', false), (31, 3, 'post 31', false)`],
  },
  {
    name: '32 (TanStack moves suite tables): posts of two active users appear, not the inactive user\'s; new posts alike',
    setup: TANSTACK_USERS_POSTS,
    table: 'e2e_test.{posts}',
    where: TANSTACK_ACTIVE_AUTHORS,
    steps: [
      `INSERT INTO e2e_test.{posts} VALUES ('00000000-0000-4000-8000-0000000000a4', '00000000-0000-4000-8000-000000000003', 'post 4'),
        ('00000000-0000-4000-8000-0000000000a5', '00000000-0000-4000-8000-000000000002', 'post 5')`,
    ],
  },
  {
    name: '34 (TanStack moves suite tables): an active user deactivated: the post disappears',
    setup: TANSTACK_USERS_POSTS,
    table: 'e2e_test.{posts}',
    where: TANSTACK_ACTIVE_AUTHORS,
    steps: [`UPDATE e2e_test.{users} SET "isActive" = false WHERE id = '00000000-0000-4000-8000-000000000001'`],
  },
  {
    name: '4, 34: a user deactivated: the posts move out',
    setup: USERS_POSTS,
    table: '{posts}',
    where: ACTIVE_AUTHORS,
    steps: [`UPDATE {users} SET active = false WHERE id = 1`],
  },
  {
    name: '5, 33: a user activated: the posts move in',
    setup: USERS_POSTS,
    table: '{posts}',
    where: ACTIVE_AUTHORS,
    steps: [`UPDATE {users} SET active = true WHERE id = 3`],
  },
  {
    name: '35, 36, 37: out and in again; a title update; a deleted post',
    setup: USERS_POSTS,
    table: '{posts}',
    where: ACTIVE_AUTHORS,
    steps: [
      `UPDATE {users} SET active = false WHERE id = 2`,
      `UPDATE {users} SET active = true WHERE id = 2`,
      `UPDATE {posts} SET title = 'post 20, renamed' WHERE id = 20`,
      `DELETE FROM {posts} WHERE id = 10`,
    ],
  },
  {
    name: '39: one transaction activates a user, renames a post and deactivates another user',
    setup: USERS_POSTS,
    table: '{posts}',
    where: ACTIVE_AUTHORS,
    steps: [`UPDATE {users} SET active = true WHERE id = 3; UPDATE {posts} SET title = 'renamed' WHERE id = 20; UPDATE {users} SET active = false WHERE id = 1`],
  },
  {
    name: '21, 22, 29: a post moved between active users, to an inactive one and back; the old user deactivated',
    setup: USERS_POSTS,
    table: '{posts}',
    where: ACTIVE_AUTHORS,
    steps: [
      `UPDATE {posts} SET user_id = 2 WHERE id = 10`,
      `UPDATE {users} SET active = false WHERE id = 1`,
      `UPDATE {posts} SET user_id = 3 WHERE id = 10`,
      `UPDATE {posts} SET user_id = 2 WHERE id = 10`,
    ],
  },
  {
    name: '6: NOT IN: a value entering the inner set moves rows out, leaving it moves them in',
    setup: `${USERS_POSTS}; CREATE TABLE {banned} (user_id int4 PRIMARY KEY)`,
    table: '{posts}',
    where: 'user_id NOT IN (SELECT user_id FROM {banned})',
    steps: [`INSERT INTO {banned} VALUES (1)`, `INSERT INTO {banned} VALUES (2)`, `DELETE FROM {banned} WHERE user_id = 1`],
  },
  {
    name: 'NOT IN with a NULL in the inner set selects nothing, as Postgres answers',
    setup: `${USERS_POSTS}; CREATE TABLE {blocks} (id int4 PRIMARY KEY, user_id int4); INSERT INTO {blocks} VALUES (1, 1)`,
    table: '{posts}',
    where: 'user_id NOT IN (SELECT user_id FROM {blocks})',
    steps: [`INSERT INTO {blocks} VALUES (2, NULL)`, `DELETE FROM {blocks} WHERE id = 2`],
  },
  {
    name: '7: a join on a non-key inner column: inner changes that keep the value set move nothing, a new value moves rows in',
    setup: `CREATE TABLE {parents} (id int4 PRIMARY KEY, value int4 NOT NULL);
      CREATE TABLE {children} (id int4 PRIMARY KEY, parent_value int4, title text);
      INSERT INTO {parents} VALUES (1, 1), (2, 2);
      INSERT INTO {children} VALUES (1, 1, 'a'), (2, 2, 'b'), (3, 3, 'c')`,
    table: '{children}',
    where: 'parent_value IN (SELECT value FROM {parents} WHERE value > 0)',
    steps: [`INSERT INTO {parents} VALUES (3, 1)`, `UPDATE {children} SET title = 'a2' WHERE id = 1`, `DELETE FROM {parents} WHERE id = 1`, `INSERT INTO {parents} VALUES (4, 3)`],
  },
  {
    name: '8, 11: three levels: a grandparent change moves children in, reverting it moves them out',
    setup: `CREATE TABLE {grandparents} (id int4 PRIMARY KEY, active bool NOT NULL);
      CREATE TABLE {parents} (id int4 PRIMARY KEY, grandparent_id int4);
      CREATE TABLE {children} (id int4 PRIMARY KEY, parent_id int4);
      INSERT INTO {grandparents} VALUES (1, true), (2, false), (3, true);
      INSERT INTO {parents} VALUES (1, 1), (2, 2), (3, 3);
      INSERT INTO {children} VALUES (1, 1), (2, 2), (3, 3)`,
    table: '{children}',
    where: 'parent_id IN (SELECT id FROM {parents} WHERE grandparent_id IN (SELECT id FROM {grandparents} WHERE active = true))',
    steps: [
      `UPDATE {grandparents} SET active = true WHERE id = 2`,
      `UPDATE {grandparents} SET active = false WHERE id = 2`,
      `INSERT INTO {grandparents} VALUES (4, true); UPDATE {parents} SET grandparent_id = 4 WHERE id = 3`,
    ],
  },
  {
    name: '11: a middle level with two nested subqueries joined by OR: innermost changes that keep its set, then ones that move it',
    setup: `CREATE TABLE {grandparents} (id int4 PRIMARY KEY, active bool NOT NULL);
      CREATE TABLE {parents} (id int4 PRIMARY KEY, grandparent_id int4, other_id int4);
      CREATE TABLE {children} (id int4 PRIMARY KEY, parent_id int4);
      INSERT INTO {grandparents} VALUES (1, true), (2, true), (3, false);
      INSERT INTO {parents} VALUES (1, 1, 2), (2, 3, 4);
      INSERT INTO {children} VALUES (1, 1), (2, 2), (3, 1)`,
    table: '{children}',
    where:
      'parent_id IN (SELECT id FROM {parents} WHERE grandparent_id IN (SELECT id FROM {grandparents} WHERE active) OR other_id IN (SELECT id FROM {grandparents} WHERE NOT active))',
    steps: [
      `UPDATE {grandparents} SET active = false WHERE id = 2`,
      `UPDATE {grandparents} SET active = false WHERE id = 1`,
      `UPDATE {parents} SET other_id = 3 WHERE id = 2`,
      `UPDATE {grandparents} SET active = (id <> 1)`,
    ],
  },
  {
    name: '9, 10, 24: OR with a row predicate: a move keeps rows present through the other disjunct; NULL authors',
    setup: `${USERS_POSTS}; UPDATE {posts} SET pinned = true WHERE id IN (10, 30); INSERT INTO {posts} VALUES (40, NULL, 'post 40', true), (50, NULL, 'post 50', false)`,
    table: '{posts}',
    where: `${ACTIVE_AUTHORS} OR pinned = true`,
    steps: [
      `UPDATE {users} SET active = false WHERE id = 1`,
      `UPDATE {users} SET active = true WHERE id = 3`,
      `UPDATE {posts} SET pinned = false WHERE id IN (10, 30)`,
      `UPDATE {users} SET active = false WHERE id = 3`,
      `UPDATE {posts} SET pinned = false WHERE id = 40`,
    ],
  },
  {
    name: '12: a composite-key inner table: membership rows inserted and deleted move teams in and out',
    setup: `CREATE TABLE {teams} (id int4 PRIMARY KEY, name text);
      CREATE TABLE {members} (user_id int4, team_id int4, PRIMARY KEY (user_id, team_id));
      INSERT INTO {teams} VALUES (1, 'one'), (2, 'two'), (3, 'three');
      INSERT INTO {members} VALUES (1, 1), (2, 2)`,
    table: '{teams}',
    where: 'id IN (SELECT team_id FROM {members} WHERE user_id = 1)',
    steps: [`INSERT INTO {members} VALUES (1, 2)`, `DELETE FROM {members} WHERE user_id = 1 AND team_id = 1`, `INSERT INTO {members} VALUES (1, 3), (3, 3)`],
  },
  {
    name: '13: a row form (a, b) IN (SELECT x, y …), moves both ways',
    setup: `CREATE TABLE {members} (user_id int4, team_id int4, PRIMARY KEY (user_id, team_id));
      CREATE TABLE {assignments} (id int4 PRIMARY KEY, user_id int4, team_id int4);
      INSERT INTO {members} VALUES (1, 1);
      INSERT INTO {assignments} VALUES (1, 1, 1), (2, 2, 2), (3, 1, 2)`,
    table: '{assignments}',
    where: '(user_id, team_id) IN (SELECT user_id, team_id FROM {members})',
    steps: [`INSERT INTO {members} VALUES (2, 2)`, `DELETE FROM {members} WHERE user_id = 1`, `UPDATE {assignments} SET team_id = 2 WHERE id = 1`],
  },
  {
    name: '14: $n parameters in the outer and the inner where',
    setup: `CREATE TABLE {parents} (id int4 PRIMARY KEY, level int4 NOT NULL);
      CREATE TABLE {children} (id int4 PRIMARY KEY, parent_id int4, n int4 NOT NULL);
      INSERT INTO {parents} VALUES (1, 5), (2, 7);
      INSERT INTO {children} VALUES (1, 1, 20), (2, 2, 20), (3, 2, 5)`,
    table: '{children}',
    where: 'parent_id IN (SELECT id FROM {parents} WHERE level >= $2) AND n >= $1',
    params: ['10', '6'],
    steps: [`UPDATE {parents} SET level = 6 WHERE id = 1`, `UPDATE {children} SET n = 12 WHERE id = 3`, `UPDATE {parents} SET level = 0 WHERE id = 2`],
  },
  {
    name: '15: quoted identifiers',
    setup: `CREATE TABLE "{Parent}" (id int4 PRIMARY KEY, value int4);
      CREATE TABLE "{Child}" (id int4 PRIMARY KEY, "parentId" int4);
      INSERT INTO "{Parent}" VALUES (1, 1), (2, 0);
      INSERT INTO "{Child}" VALUES (1, 1), (2, 2)`,
    table: '"{Child}"',
    where: '"parentId" IN (SELECT id FROM "{Parent}" WHERE value = 1)',
    steps: [`UPDATE "{Parent}" SET value = 1 WHERE id = 2`, `UPDATE "{Parent}" SET value = 0 WHERE id = 1`],
  },
  {
    name: '16, 17: bursts of moves read together, oscillation of one value',
    setup: `${USERS_POSTS}; INSERT INTO {users} VALUES (4, false); INSERT INTO {posts} VALUES (40, 4, 'post 40', false)`,
    table: '{posts}',
    where: ACTIVE_AUTHORS,
    steps: [
      [`UPDATE {users} SET active = false WHERE id = 1`, `UPDATE {users} SET active = true WHERE id = 3`, `UPDATE {posts} SET title = 'renamed' WHERE id = 30`, `UPDATE {users} SET active = true WHERE id = 4`],
      `UPDATE {users} SET active = false WHERE id IN (3, 4)`,
      [
        `UPDATE {users} SET active = true WHERE id = 1`,
        `UPDATE {users} SET active = false WHERE id = 1`,
        `UPDATE {users} SET active = true WHERE id = 1`,
        `UPDATE {users} SET active = false WHERE id = 1`,
        `UPDATE {users} SET active = true WHERE id = 3`,
      ],
    ],
  },
  {
    name: '18: empty tables, then a parent and a child; a parent update moves it out',
    setup: `CREATE TABLE {parents} (id int4 PRIMARY KEY, value int4);
      CREATE TABLE {children} (id int4 PRIMARY KEY, parent_id int4)`,
    table: '{children}',
    where: 'parent_id IN (SELECT id FROM {parents} WHERE value = 1)',
    steps: [`INSERT INTO {parents} VALUES (1, 1)`, `INSERT INTO {children} VALUES (1, 1)`, `UPDATE {parents} SET value = 2 WHERE id = 1`],
  },
  {
    name: '19: two subqueries joined by AND',
    setup: `CREATE TABLE {projects} (id int4 PRIMARY KEY, active bool NOT NULL);
      CREATE TABLE {members} (user_id int4, project_id int4, PRIMARY KEY (user_id, project_id));
      CREATE TABLE {issues} (id int4 PRIMARY KEY, project_id int4, title text);
      INSERT INTO {projects} VALUES (1, true), (2, true), (3, false);
      INSERT INTO {members} VALUES (1, 1), (1, 3);
      INSERT INTO {issues} VALUES (1, 1, 'a'), (2, 2, 'b'), (3, 3, 'c')`,
    table: '{issues}',
    where: 'project_id IN (SELECT project_id FROM {members} WHERE user_id = 1) AND project_id IN (SELECT id FROM {projects} WHERE active = true)',
    steps: [`INSERT INTO {issues} VALUES (4, 1, 'd')`, `INSERT INTO {members} VALUES (1, 2)`, `UPDATE {projects} SET active = true WHERE id = 3`, `DELETE FROM {members} WHERE project_id = 1`],
  },
  {
    name: '31: a user activated and a post moved to it with a failing other condition, in one transaction',
    setup: USERS_POSTS,
    table: '{posts}',
    where: `${ACTIVE_AUTHORS} AND title <> 'hidden'`,
    steps: [`UPDATE {users} SET active = true WHERE id = 3; UPDATE {posts} SET user_id = 3, title = 'hidden' WHERE id = 10`],
  },
  {
    name: '28: TRUNCATE of the outer table, then new rows',
    setup: USERS_POSTS,
    table: '{posts}',
    where: ACTIVE_AUTHORS,
    steps: [`TRUNCATE {posts}`, `INSERT INTO {posts} VALUES (60, 1, 'post 60', false), (70, 3, 'post 70', false)`, `UPDATE {users} SET active = true WHERE id = 3`],
  },
]
