// The app's writes: each goes to its own API (server/api.ts), which answers
// the id of the transaction that made it.

export interface WriteResult {
  readonly txid: string
  readonly id: string
  readonly deleted?: number
}

/** A write the API refused or could not be reached for; `message` is for the person using the app. */
export class WriteError extends Error {
  override readonly name = 'WriteError'
  constructor(
    message: string,
    readonly status: number | undefined,
    readonly code: string | undefined,
  ) {
    super(message)
  }
}

async function send(method: 'POST' | 'PATCH' | 'DELETE', path: string, body?: object): Promise<WriteResult> {
  let response: Response
  try {
    response = await fetch(path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
  } catch {
    throw new WriteError('Could not reach the server: the change was not saved.', undefined, undefined)
  }
  const json = (await response.json().catch(() => ({}))) as Partial<WriteResult> & { error?: string; message?: string }
  if (!response.ok || typeof json.txid !== 'string') {
    throw new WriteError(json.message ?? `The server answered ${response.status}.`, response.status, json.error)
  }
  return json as WriteResult
}

export const api = {
  createList: (id: string, name: string) => send('POST', '/api/lists', { id, name }),
  renameList: (id: string, name: string) => send('PATCH', `/api/lists/${id}`, { name }),
  deleteList: (id: string) => send('DELETE', `/api/lists/${id}`),
  clearCompleted: (listId: string) => send('POST', `/api/lists/${listId}/clear-completed`),
  createTodo: (id: string, listId: string, title: string) => send('POST', '/api/todos', { id, list_id: listId, title }),
  updateTodo: (id: string, change: { title?: string; completed?: boolean }) => send('PATCH', `/api/todos/${id}`, change),
  deleteTodo: (id: string) => send('DELETE', `/api/todos/${id}`),
  shareList: (listId: string, member: string) => send('POST', `/api/lists/${listId}/members`, { member }),
  unshareList: (listId: string, member: string) => send('DELETE', `/api/lists/${listId}/members/${encodeURIComponent(member)}`),
}

export async function loadConfig(): Promise<{ shapeUrl: string }> {
  const response = await fetch('/api/config')
  if (!response.ok) throw new Error(`GET /api/config answered ${response.status}`)
  return (await response.json()) as { shapeUrl: string }
}
