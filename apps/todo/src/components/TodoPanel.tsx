import type { ReactNode } from 'react'
import type { List, Todo } from '../model'
import { EditableText } from './EditableText'
import { NewItemForm } from './NewItemForm'

interface Props {
  readonly list: List
  readonly todos: readonly Todo[]
  readonly pendingIds: ReadonlySet<string>
  readonly onRenameList: (name: string) => void
  readonly onAdd: (title: string) => void
  readonly onToggle: (todo: Todo) => void
  readonly onRename: (todo: Todo, title: string) => void
  readonly onDelete: (todo: Todo) => void
  readonly onClearCompleted: () => void
  /** Who the list is shared with, and the field to share it. */
  readonly members?: ReactNode
}

export function TodoPanel({ list, todos, pendingIds, onRenameList, onAdd, onToggle, onRename, onDelete, onClearCompleted, members }: Props) {
  const done = todos.filter((t) => t.completed).length
  const left = todos.length - done
  return (
    <section className="panel" aria-label={`List ${list.name}`}>
      <header className="panel-header">
        <h1>
          <EditableText value={list.name} what="list" className="panel-title" onSave={onRenameList} />
        </h1>
        <p className="progress">
          {todos.length === 0 ? 'Nothing here yet' : `${done} of ${todos.length} done`}
        </p>
        {todos.length > 0 && (
          <div className="progress-bar" aria-hidden="true">
            <div style={{ width: `${(done / todos.length) * 100}%` }} />
          </div>
        )}
        {members}
      </header>
      <NewItemForm className="new-todo" label="New todo" placeholder="What needs doing?" onAdd={onAdd} />
      <ul className="todos">
        {todos.map((todo) => (
          <li
            key={todo.id}
            data-testid="todo"
            data-id={todo.id}
            data-completed={todo.completed}
            data-pending={pendingIds.has(todo.id) || undefined}
            className={`todo${todo.completed ? ' completed' : ''}`}
          >
            <input
              type="checkbox"
              className="check"
              checked={todo.completed}
              aria-label={`Done: ${todo.title}`}
              onChange={() => onToggle(todo)}
            />
            <EditableText value={todo.title} what="todo" className="todo-title" onSave={(title) => onRename(todo, title)} />
            <button type="button" className="icon-button delete-button" aria-label={`Delete todo "${todo.title}"`} onClick={() => onDelete(todo)}>
              ×
            </button>
          </li>
        ))}
      </ul>
      <footer className="panel-footer">
        <span data-testid="left">{left === 1 ? '1 item left' : `${left} items left`}</span>
        <button type="button" className="text-button" disabled={done === 0} onClick={onClearCompleted}>
          Clear completed
        </button>
      </footer>
    </section>
  )
}
