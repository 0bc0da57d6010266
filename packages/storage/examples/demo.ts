/**
 * A tour of the shape-log engine, run by `npm start` until the server lands.
 * It writes a shape's snapshot and a stream of transactions, makes them durable
 * with group commit, reads them back chunk by chunk exactly as HTTP clients
 * would receive them, then reopens the store and shows it cut back to the
 * durable watermark.
 */
import { mkdirSync, rmSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { BEFORE_ALL, formatOffset } from '@sluice/protocol'
import type { LogOffset } from '@sluice/protocol'
import { openFileLogStore, openReadOnlyLogStore, readSpans } from '@sluice/storage'
import type { LogEntryInput, ShapeLog } from '@sluice/storage'

const dir = resolve(process.argv[2] ?? join(process.cwd(), '.sluice', 'storage-demo'))
const enc = new TextEncoder()

function todo(id: number, title: string, done: boolean): string {
  return JSON.stringify({ id: String(id), title, done: done ? 't' : 'f' })
}

function insertLine(id: number, title: string): Uint8Array {
  return enc.encode(`{"key":"\\"public\\".\\"todos\\"/\\"${id}\\"","value":${todo(id, title, false)},"headers":{"operation":"insert","relation":["public","todos"]}}`)
}

function changeLine(lsn: bigint, op: number, id: number, done: boolean, last: boolean): LogEntryInput {
  const json = enc.encode(
    `{"key":"\\"public\\".\\"todos\\"/\\"${id}\\"","value":{"id":"${id}","done":"${done ? 't' : 'f'}"},` +
      `"headers":{"operation":"update","relation":["public","todos"],"lsn":"${lsn}","op_position":${op},"txids":[${Number(lsn % 100000n)}]${last ? ',"last":true' : ''}}}`,
  )
  return { offset: { tx: lsn, op: BigInt(op) }, json }
}

function show(label: string, log: ShapeLog, after: LogOffset): LogOffset {
  const read = log.read(after)
  const bytes = readSpans(read)
  read.release()
  const bodyText = bytes.length ? `[${bytes.subarray(0, bytes.length - 1).toString('utf8')}]` : '[]'
  const preview = bodyText.length > 150 ? `${bodyText.slice(0, 150)}…` : bodyText
  console.log(
    `  ${label.padEnd(14)} offset=${formatOffset(after).padEnd(12)} -> ${String(read.entryCount).padStart(3)} entries, ` +
      `${String(read.byteLength).padStart(5)} bytes, next=${formatOffset(read.nextOffset)}${read.reachedHead ? ' (head)' : ''}`,
  )
  console.log(`  ${''.padEnd(14)} ${preview}`)
  return read.nextOffset
}

async function main(): Promise<void> {
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  console.log(`Sluice storage demo: a store in ${dir} with 1 KiB chunks\n`)

  const store = await openFileLogStore({ dir, chunkBytes: 1024, flushIntervalMs: 5 })
  console.log('1. Initial snapshot of "todos where done = false" (25 rows), stored as chunks 0_n:')
  const snapshot = store.createShape('todos-demo', { meta: enc.encode('{"table":"todos","where":"done = false"}') })
  snapshot.append(Array.from({ length: 25 }, (_, i) => insertLine(i + 1, `Task number ${i + 1}`)))
  const log = await snapshot.finish(enc.encode('{"headers":{"control":"snapshot-end","xmin":"740","xmax":"740","xip_list":[]}}'))
  let at: LogOffset = BEFORE_ALL
  for (let i = 0; i < log.head().snapshotChunks; i++) at = show(`chunk ${i}`, log, at)

  console.log('\n2. Ten transactions from the replication stream, made durable by group commit:')
  const started = process.hrtime.bigint()
  for (let tx = 1; tx <= 10; tx++) {
    const lsn = 0x1_6b3f70n + BigInt(tx) * 0x100n
    log.appendTransaction([changeLine(lsn, 0, tx, true, false), changeLine(lsn, 2, tx + 10, true, true)])
    store.advance(lsn)
  }
  const { durableLsn } = await store.flush()
  console.log(`  durable watermark ${durableLsn} after ${Number(process.hrtime.bigint() - started) / 1e6} ms (one fdatasync pass)`)
  for (;;) {
    const next = show('live', log, at)
    if (next === at) break
    at = next
    if (log.read(at).entryCount === 0) break
  }

  console.log('\n3. A reader in read-only mode (as another process would open it) sees the same bytes:')
  const reader = openReadOnlyLogStore({ dir })
  show('read-only', reader.get('todos-demo')!, at.tx === 0n ? BEFORE_ALL : { tx: at.tx - 0x100n, op: 2n })
  await reader.close()

  console.log('\n4. Appended but never covered by the watermark, then a restart:')
  log.appendTransaction([changeLine(0x2_000000n, 0, 1, false, true)])
  await store.close()
  const reopened = await openFileLogStore({ dir, chunkBytes: 1024 })
  console.log(`  after reopening: watermark ${reopened.durableLsn}, last offset ${formatOffset(reopened.get('todos-demo')!.head().lastOffset)}`)
  console.log('  (the uncovered transaction was cut; replication would replay it from the slot)')
  await reopened.close()
  console.log(`\nDone. Files are in ${dir}; run the tests with: npm test`)
}

main().catch((err: unknown) => {
  console.error(err)
  process.exit(1)
})
