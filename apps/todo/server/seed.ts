import type pg from 'pg'

const EXAMPLE = {
  name: 'Try Sluice',
  todos: [
    ['Open this page in a second window', true],
    ['Tick a todo here and watch it change there', false],
    ['Double-click a title to rename it', false],
    ['Change a row with psql: UPDATE todos SET completed = true', false],
    ['Stop the network (devtools) and come back: it catches up', false],
  ] as const,
}

/** One example list for a brand-new demo database; returns whether it added it. */
export async function seedExample(pool: pg.Pool): Promise<boolean> {
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    const { rows } = await client.query<{ id: string }>('INSERT INTO lists (name) VALUES ($1) RETURNING id', [EXAMPLE.name])
    const listId = rows[0]!.id
    // One statement per row with increasing timestamps, so they show in this order.
    for (const [index, [title, completed]] of EXAMPLE.todos.entries()) {
      await client.query(`INSERT INTO todos (list_id, title, completed, created_at) VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')`, [
        listId,
        title,
        completed,
        index,
      ])
    }
    await client.query('COMMIT')
    return true
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  } finally {
    client.release()
  }
}
