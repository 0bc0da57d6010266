import type { ShapeStream } from '@sluice/client'
import { useShape } from '@sluice/react'
import { useCallback, useEffect, useMemo, useState } from 'react'
import { api } from './api'
import { ConnectionBadge } from './components/ConnectionBadge'
import { MembersBar } from './components/MembersBar'
import { SharedPanel } from './components/SharedPanel'
import { Sidebar } from './components/Sidebar'
import { TodoPanel } from './components/TodoPanel'
import { type RequestMonitor, useConnectionState } from './connection'
import { type List, type Member, type Todo, USER_NAME, byCreation } from './model'
import { patch, upsert, useOptimisticWrites, without } from './optimistic'

/** The selected list lives in the URL, so a reload (or a shared link) opens the same one. */
function selectedFromHash(): string | undefined {
  const match = /^#list=([0-9a-f-]{36})$/.exec(window.location.hash)
  return match?.[1]
}

const SHARED_HASH = '#shared'
const USER_KEY = 'sluice-todo:user'

/** Who this browser says it is (there are no accounts): the name lists are shared with. */
function savedUser(): string {
  const saved = window.localStorage.getItem(USER_KEY)
  return saved !== null && USER_NAME.test(saved) ? saved : 'me'
}

export function App({ shapeUrl, monitor }: { readonly shapeUrl: string; readonly monitor: RequestMonitor }) {
  const listsShape = useShape<List & Record<string, unknown>>({ url: shapeUrl, params: { table: 'lists' } })
  const todosShape = useShape<Todo & Record<string, unknown>>({ url: shapeUrl, params: { table: 'todos' } })
  const membersShape = useShape<Member & Record<string, unknown>>({ url: shapeUrl, params: { table: 'list_members' } })
  const writes = useOptimisticWrites()
  const connection = useConnectionState([listsShape.stream as ShapeStream | undefined, todosShape.stream as ShapeStream | undefined], monitor)

  const { lists, todos } = useMemo(() => {
    const shown = writes.apply(listsShape.data, todosShape.data)
    return { lists: byCreation(shown.lists), todos: byCreation(shown.todos) }
  }, [writes, listsShape.data, todosShape.data])

  const [selected, setSelected] = useState(selectedFromHash)
  const [sharedOpen, setSharedOpen] = useState(() => window.location.hash === SHARED_HASH)
  const [user, setUser] = useState(savedUser)
  const [userDraft, setUserDraft] = useState(user)
  useEffect(() => {
    const onHash = () => {
      setSelected(selectedFromHash())
      setSharedOpen(window.location.hash === SHARED_HASH)
    }
    window.addEventListener('hashchange', onHash)
    return () => window.removeEventListener('hashchange', onHash)
  }, [])
  const select = useCallback((id: string) => {
    window.location.hash = `list=${id}`
    setSelected(id)
    setSharedOpen(false)
  }, [])
  const openShared = useCallback(() => {
    window.location.hash = SHARED_HASH
    setSharedOpen(true)
  }, [])
  const changeUser = (name: string) => {
    const next = name.trim().toLowerCase()
    if (!USER_NAME.test(next) || next === user) return setUserDraft(user)
    window.localStorage.setItem(USER_KEY, next)
    setUser(next)
    setUserDraft(next)
  }
  // A list deleted elsewhere (or never chosen) falls back to the first one.
  const current = lists.find((l) => l.id === selected) ?? lists[0]

  const openCounts = useMemo(() => {
    const counts = new Map<string, number>()
    for (const t of todos) if (!t.completed) counts.set(t.list_id, (counts.get(t.list_id) ?? 0) + 1)
    return counts
  }, [todos])
  const currentTodos = useMemo(() => todos.filter((t) => t.list_id === current?.id), [todos, current])

  const { waitForTxid: waitLists } = listsShape
  const { waitForTxid: waitTodos } = todosShape
  const { waitForTxid: waitMembers } = membersShape
  const confirmMembers = useCallback(({ txid }: { txid: string }) => waitMembers(txid), [waitMembers])
  const currentMembers = useMemo(
    () => [...membersShape.data].filter((m) => m.list_id === current?.id).sort((a, b) => (a.member < b.member ? -1 : a.member > b.member ? 1 : 0)),
    [membersShape.data, current],
  )
  // No optimistic copy: a chip appears once the sharing is synced (its key is marked pending meanwhile).
  const share = (listId: string, member: string) => void writes.run({ ids: [`${listId}/${member}`] }, () => api.shareList(listId, member), confirmMembers)
  const unshare = (listId: string, member: string) => void writes.run({ ids: [`${listId}/${member}`] }, () => api.unshareList(listId, member), confirmMembers)
  const confirmLists = useCallback(({ txid }: { txid: string }) => waitLists(txid), [waitLists])
  const confirmTodos = useCallback(({ txid }: { txid: string }) => waitTodos(txid), [waitTodos])
  const { run } = writes

  const createList = (name: string) => {
    const list: List = { id: crypto.randomUUID(), name, created_at: new Date().toISOString() }
    select(list.id)
    void run({ ids: [list.id], lists: (rows) => upsert(rows, list) }, () => api.createList(list.id, name), confirmLists)
  }
  const renameList = (id: string, name: string) =>
    void run({ ids: [id], lists: (rows) => patch(rows, id, { name }) }, () => api.renameList(id, name), confirmLists)
  const deleteList = (list: List) => {
    // Its todos go in the same transaction (ON DELETE CASCADE); the lists shape confirms it,
    // since the todos shape sees that transaction only if the list had todos.
    void run(
      { ids: [list.id], lists: (rows) => without(rows, (r) => r.id === list.id), todos: (rows) => without(rows, (t) => t.list_id === list.id) },
      () => api.deleteList(list.id),
      confirmLists,
    )
  }
  const addTodo = (title: string) => {
    if (current === undefined) return
    const todo: Todo = { id: crypto.randomUUID(), list_id: current.id, title, completed: false, created_at: new Date().toISOString() }
    void run({ ids: [todo.id], todos: (rows) => upsert(rows, todo) }, () => api.createTodo(todo.id, todo.list_id, title), confirmTodos)
  }
  const toggleTodo = (todo: Todo) => {
    const completed = !todo.completed
    void run({ ids: [todo.id], todos: (rows) => patch(rows, todo.id, { completed }) }, () => api.updateTodo(todo.id, { completed }), confirmTodos)
  }
  const renameTodo = (todo: Todo, title: string) =>
    void run({ ids: [todo.id], todos: (rows) => patch(rows, todo.id, { title }) }, () => api.updateTodo(todo.id, { title }), confirmTodos)
  const deleteTodo = (todo: Todo) =>
    void run({ ids: [todo.id], todos: (rows) => without(rows, (r) => r.id === todo.id) }, () => api.deleteTodo(todo.id), confirmTodos)
  const clearCompleted = () => {
    if (current === undefined) return
    const listId = current.id
    const cleared = currentTodos.filter((t) => t.completed).map((t) => t.id)
    void run(
      { ids: cleared, todos: (rows) => without(rows, (t) => t.list_id === listId && t.completed) },
      () => api.clearCompleted(listId),
      // A transaction that deleted nothing has no changes to wait for.
      async (result) => (result.deleted === 0 ? undefined : waitTodos(result.txid)),
    )
  }

  const loading = listsShape.isLoading && lists.length === 0
  const error = listsShape.isError ? listsShape.error : todosShape.isError ? todosShape.error : undefined

  return (
    <div className="app">
      <header className="topbar">
        <div className="brand">
          <span className="logo" aria-hidden="true">
            <svg viewBox="0 0 32 32">
              <path d="M9 17l5 5 9-11" />
            </svg>
          </span>
          Sluice Todos
        </div>
        <form
          className="user-form"
          onSubmit={(event) => {
            event.preventDefault()
            changeUser(userDraft)
          }}
        >
          <label>
            You are{' '}
            <input aria-label="Your user name" value={userDraft} maxLength={40} onChange={(event) => setUserDraft(event.target.value)} onBlur={() => changeUser(userDraft)} />
          </label>
        </form>
        <ConnectionBadge state={connection} />
      </header>
      <div className="layout">
        <Sidebar
          lists={lists}
          openCounts={openCounts}
          selectedId={current?.id}
          pendingIds={writes.pendingIds}
          onSelect={select}
          onCreate={createList}
          onRename={renameList}
          onDelete={deleteList}
          sharedOpen={sharedOpen}
          onOpenShared={openShared}
        />
        <main className="main">
          {error !== undefined && error !== null ? (
            <div className="empty error-box">
              <h2>Sync stopped</h2>
              <p>{error instanceof Error ? error.message : String(error)}</p>
            </div>
          ) : sharedOpen ? (
            <SharedPanel shapeUrl={shapeUrl} user={user} />
          ) : loading ? (
            <div className="empty">
              <div className="spinner" aria-label="Loading" />
            </div>
          ) : current === undefined ? (
            <div className="empty">
              <h2>No lists yet</h2>
              <p>Create one in the sidebar to get started.</p>
            </div>
          ) : (
            <TodoPanel
              key={current.id}
              list={current}
              todos={currentTodos}
              pendingIds={writes.pendingIds}
              onRenameList={(name) => renameList(current.id, name)}
              onAdd={addTodo}
              onToggle={toggleTodo}
              onRename={renameTodo}
              onDelete={deleteTodo}
              onClearCompleted={clearCompleted}
              members={
                <MembersBar
                  members={currentMembers}
                  pendingIds={writes.pendingIds}
                  onShare={(member) => share(current.id, member)}
                  onUnshare={(member) => unshare(current.id, member)}
                />
              }
            />
          )}
        </main>
      </div>
      <div className="notices" aria-live="polite">
        {writes.notices.map((n) => (
          <div key={n.seq} className="notice" role="alert">
            <span>{n.message}</span>
            <button type="button" className="icon-button" aria-label="Dismiss" onClick={() => writes.dismiss(n.seq)}>
              ×
            </button>
          </div>
        ))}
      </div>
    </div>
  )
}
