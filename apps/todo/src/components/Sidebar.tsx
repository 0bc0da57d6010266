import type { List } from '../model'
import { EditableText } from './EditableText'
import { NewItemForm } from './NewItemForm'

interface Props {
  readonly lists: readonly List[]
  readonly openCounts: ReadonlyMap<string, number>
  readonly selectedId: string | undefined
  readonly pendingIds: ReadonlySet<string>
  readonly onSelect: (id: string) => void
  readonly onCreate: (name: string) => void
  readonly onRename: (id: string, name: string) => void
  readonly onDelete: (list: List) => void
  /** The "Shared with me" view is open (then no list is selected). */
  readonly sharedOpen: boolean
  readonly onOpenShared: () => void
}

export function Sidebar({ lists, openCounts, selectedId, pendingIds, onSelect, onCreate, onRename, onDelete, sharedOpen, onOpenShared }: Props) {
  return (
    <nav className="sidebar" aria-label="Lists">
      <h2 className="sidebar-title">Lists</h2>
      <ul className="lists">
        {lists.map((list) => (
          <li
            key={list.id}
            data-testid="list"
            data-id={list.id}
            data-pending={pendingIds.has(list.id) || undefined}
            className={`list-item${!sharedOpen && list.id === selectedId ? ' selected' : ''}`}
            onClick={() => onSelect(list.id)}
          >
            <EditableText value={list.name} what="list" className="list-name" onSave={(name) => onRename(list.id, name)} />
            <span className="count" aria-label={`${openCounts.get(list.id) ?? 0} open`}>
              {openCounts.get(list.id) ?? 0}
            </span>
            <button
              type="button"
              className="icon-button delete-button"
              aria-label={`Delete list "${list.name}"`}
              onClick={(event) => {
                event.stopPropagation()
                onDelete(list)
              }}
            >
              ×
            </button>
          </li>
        ))}
      </ul>
      <NewItemForm className="new-list" label="New list" placeholder="+ New list" onAdd={onCreate} />
      <button type="button" className={`list-item shared-link${sharedOpen ? ' selected' : ''}`} data-testid="shared-link" onClick={onOpenShared}>
        Shared with me
      </button>
    </nav>
  )
}
