import { useState, type FormEvent } from 'react'
import { type Member, USER_NAME } from '../model'

interface Props {
  readonly members: readonly Member[]
  readonly pendingIds: ReadonlySet<string>
  readonly onShare: (member: string) => void
  readonly onUnshare: (member: string) => void
}

/** Who the list is shared with: a chip per user (× stops sharing), and a field to add one. */
export function MembersBar({ members, pendingIds, onShare, onUnshare }: Props) {
  const [name, setName] = useState('')
  const valid = USER_NAME.test(name.trim())
  const submit = (event: FormEvent) => {
    event.preventDefault()
    if (!valid) return
    onShare(name.trim())
    setName('')
  }
  return (
    <div className="members" aria-label="Shared with">
      {members.map((m) => (
        <span key={m.member} className="member-chip" data-testid="member" data-member={m.member} data-pending={pendingIds.has(`${m.list_id}/${m.member}`) || undefined}>
          {m.member}
          <button type="button" className="icon-button" aria-label={`Stop sharing with ${m.member}`} onClick={() => onUnshare(m.member)}>
            ×
          </button>
        </span>
      ))}
      <form className="share-form" onSubmit={submit}>
        <input aria-label="Share with" placeholder="Share with (user name)" value={name} maxLength={40} onChange={(event) => setName(event.target.value.toLowerCase())} />
      </form>
    </div>
  )
}
