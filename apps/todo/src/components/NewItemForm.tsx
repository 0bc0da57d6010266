import { useState, type FormEvent } from 'react'

interface Props {
  readonly placeholder: string
  readonly label: string
  readonly className?: string
  readonly onAdd: (text: string) => void
}

/** One input; Enter adds and clears it. */
export function NewItemForm({ placeholder, label, className, onAdd }: Props) {
  const [text, setText] = useState('')
  const submit = (event: FormEvent) => {
    event.preventDefault()
    const value = text.trim()
    if (value === '') return
    onAdd(value)
    setText('')
  }
  return (
    <form className={`new-item ${className ?? ''}`} onSubmit={submit}>
      <input aria-label={label} placeholder={placeholder} value={text} maxLength={500} onChange={(event) => setText(event.target.value)} />
    </form>
  )
}
