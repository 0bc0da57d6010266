import { type SpillDir, SpillQueue } from '../replication/index.js'
import type { TransactionPart } from './route-contracts.js'
import { transactionPartCodec } from './transaction-part-codec.js'

/**
 * The memory budget of the queues of shapes being created: the only routed
 * data kept in memory. Past the budget in total the largest queues spill to
 * disk; while spilling cannot keep up, replication is paused (`onPressure`)
 * and resumed below half the budget.
 */
export class QueueBudget {
  private readonly queues = new Set<SpillQueue<TransactionPart>>()
  private paused = false
  private pauses = 0
  private spilledQueues = 0

  constructor(
    private readonly budget: number,
    private readonly onPressure: ((paused: boolean) => void) | undefined,
    private readonly onSpillError: (error: unknown) => void,
  ) {}

  /** A new queue for a shape, counted against the budget until `drop`. */
  open(dir: SpillDir, name: string): SpillQueue<TransactionPart> {
    const queue = new SpillQueue<TransactionPart>(dir, name, transactionPartCodec)
    this.queues.add(queue)
    return queue
  }

  /** Stops counting the queue and disposes of it; false when it was dropped already. */
  drop(queue: SpillQueue<TransactionPart>): boolean {
    if (!this.queues.delete(queue)) return false
    void queue.dispose().catch(() => {})
    return true
  }

  get queuedBytes(): number {
    let total = 0
    for (const queue of this.queues) total += queue.memoryBytes
    return total
  }

  stats(): { queuedBytes: number; spilledQueues: number; pauses: number; paused: boolean } {
    return { queuedBytes: this.queuedBytes, spilledQueues: this.spilledQueues, pauses: this.pauses, paused: this.paused }
  }

  /** Spills the largest queues while over budget; pauses replication while spilling lags. */
  check(): void {
    const total = this.queuedBytes
    if (total > this.budget) {
      const largest = [...this.queues].filter((q) => !q.spilled).sort((a, b) => b.memoryBytes - a.memoryBytes)
      let freed = 0
      for (const queue of largest) {
        if (total - freed <= this.budget / 2) break
        freed += queue.memoryBytes
        this.spilledQueues++
        queue.spill().then(() => this.check(), this.onSpillError)
      }
    }
    if (!this.paused && total > this.budget) {
      this.paused = true
      this.pauses++
      this.onPressure?.(true)
    } else if (this.paused && total <= this.budget / 2) {
      this.paused = false
      this.onPressure?.(false)
    }
  }

  /** At close: disposes of every queue still counted. */
  async disposeAll(): Promise<void> {
    for (const queue of this.queues) await queue.dispose().catch(() => {})
  }
}
