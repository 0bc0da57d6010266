/** Markdown pieces of the report. Pure. */
import type { Table } from './section.js'

function cell(text: string): string {
  return text.replace(/\|/g, '\\|').replace(/\n/g, ' ')
}

export function markdownTable(table: Table): string[] {
  const align = table.headers.map((_, i) => (table.align?.[i] === 'r' ? '--:' : '---'))
  return [
    `| ${table.headers.map(cell).join(' | ')} |`,
    `|${align.join('|')}|`,
    ...table.rows.map((row) => `| ${row.map(cell).join(' | ')} |`),
  ]
}

/** GitHub's heading anchor for a title: lower case, punctuation dropped, spaces to hyphens. */
export function anchor(title: string): string {
  return title
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s-]/gu, '')
    .replace(/\s/g, '-')
}
