import { useShape } from '@sluice/react'
import { useMemo } from 'react'
import { type List, SHARED_LISTS_WHERE, SHARED_TODOS_WHERE, type Todo, byCreation } from '../model'

interface Props {
  readonly shapeUrl: string
  /** Whose view this is: the lists shared with this user name. */
  readonly user: string
}

/**
 * "Shared with me": every list shared with `user` and its todos, read through
 * two subquery shapes. Sharing or unsharing a list anywhere moves the list and
 * its todos in or out of this view without a reload. Read-only: the owner
 * edits the list.
 */
export function SharedPanel({ shapeUrl, user }: Props) {
  const lists = useShape<List & Record<string, unknown>>({ url: shapeUrl, params: { table: 'lists', where: SHARED_LISTS_WHERE, params: [user] } })
  const todos = useShape<Todo & Record<string, unknown>>({ url: shapeUrl, params: { table: 'todos', where: SHARED_TODOS_WHERE, params: [user] } })
  const byList = useMemo(() => {
    const grouped = new Map<string, Todo[]>()
    for (const todo of byCreation(todos.data)) grouped.set(todo.list_id, [...(grouped.get(todo.list_id) ?? []), todo])
    return grouped
  }, [todos.data])

  const error = lists.isError ? lists.error : todos.isError ? todos.error : undefined
  if (error !== undefined && error !== null) {
    return (
      <div className="empty error-box" data-testid="shared-error">
        <h2>Shared lists are not available</h2>
        <p>This view needs a Sluice server that serves subquery shapes. {error instanceof Error ? error.message : String(error)}</p>
      </div>
    )
  }
  if (lists.isLoading && lists.data.length === 0) {
    return (
      <div className="empty">
        <div className="spinner" aria-label="Loading" />
      </div>
    )
  }
  const shared = byCreation(lists.data)
  return (
    <section className="panel" aria-label="Shared with me">
      <header className="panel-header">
        <h1>Shared with {user}</h1>
        <p className="progress">{shared.length === 0 ? 'Nothing is shared with you yet' : `${shared.length} ${shared.length === 1 ? 'list' : 'lists'}`}</p>
      </header>
      {shared.map((list) => {
        const items = byList.get(list.id) ?? []
        return (
          <div key={list.id} className="shared-list" data-testid="shared-list" data-id={list.id}>
            <h2 className="shared-list-name">{list.name}</h2>
            <ul className="todos">
              {items.map((todo) => (
                <li key={todo.id} data-testid="shared-todo" data-id={todo.id} data-completed={todo.completed} className={`todo${todo.completed ? ' completed' : ''}`}>
                  <input type="checkbox" className="check" checked={todo.completed} readOnly disabled aria-label={`Done: ${todo.title}`} />
                  <span className="todo-title">{todo.title}</span>
                </li>
              ))}
            </ul>
          </div>
        )
      })}
    </section>
  )
}
