import { useState, type KeyboardEvent } from 'react'

interface Props {
  readonly value: string
  /** Names the thing in accessible labels: `Rename "<value>"`. */
  readonly what: string
  readonly className?: string
  readonly onSave: (value: string) => void
}

/** Text that becomes an input on double-click or its edit button; Enter or leaving saves, Escape cancels. */
export function EditableText({ value, what, className, onSave }: Props) {
  const [draft, setDraft] = useState<string | undefined>(undefined)

  const commit = () => {
    if (draft === undefined) return
    const next = draft.trim()
    setDraft(undefined)
    if (next !== '' && next !== value) onSave(next)
  }
  const onKeyDown = (event: KeyboardEvent<HTMLInputElement>) => {
    if (event.key === 'Enter') commit()
    else if (event.key === 'Escape') setDraft(undefined)
  }

  if (draft !== undefined) {
    return (
      <input
        className={`edit-input ${className ?? ''}`}
        aria-label={`New name for ${what} "${value}"`}
        autoFocus
        value={draft}
        maxLength={500}
        onChange={(event) => setDraft(event.target.value)}
        onKeyDown={onKeyDown}
        onBlur={commit}
        onFocus={(event) => event.target.select()}
      />
    )
  }
  return (
    <span className={`editable ${className ?? ''}`}>
      <span className="editable-text" title="Double-click to rename" onDoubleClick={() => setDraft(value)}>
        {value}
      </span>
      <button type="button" className="icon-button edit-button" aria-label={`Rename ${what} "${value}"`} onClick={() => setDraft(value)}>
        <svg viewBox="0 0 20 20" aria-hidden="true">
          <path d="M13.6 3.6l2.8 2.8-9.2 9.2-3.5.7.7-3.5 9.2-9.2z" />
        </svg>
      </button>
    </span>
  )
}
