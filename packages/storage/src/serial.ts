/**
 * Runs async tasks one after another, each once the one before has settled
 * (failed or not), and tells whether any is queued or running: a task's
 * caller gets its result or its error; `settled` never rejects.
 */
export class Serial {
  #tail: Promise<void> | undefined

  /** Settles once every task queued so far has; undefined when none is queued or running. */
  get settled(): Promise<void> | undefined {
    return this.#tail
  }

  run<T>(task: () => Promise<T>): Promise<T> {
    const mine = (this.#tail ?? Promise.resolve()).then(task)
    const tail: Promise<void> = mine.then(
      () => undefined,
      () => undefined,
    )
    this.#tail = tail
    void tail.then(() => {
      if (this.#tail === tail) this.#tail = undefined
    })
    return mine
  }
}
