/**
 * Caches of what requests asked for (the shape routes' parsed queries and
 * range keys offered once; the process's where-clause trees, canonical texts,
 * definition keys and pooled body buffers), forgotten together when the
 * server gives memory back after a sweep retired thousands of shapes
 * (heap-trim.ts). Each is bounded (or weak), but fills with the requests of
 * the shapes that were just retired and would keep them, and through them
 * their compiled definitions, or the table a WeakMap grew to hold them, for as
 * long as no other requests push them out: on an idle server, forever.
 */
export class RequestCaches {
  private readonly forgetters = new Set<() => void>()

  /** Registers a cache's `forget`; returns its removal. */
  add(forget: () => void): () => void {
    this.forgetters.add(forget)
    return () => {
      this.forgetters.delete(forget)
    }
  }

  /** Empties every registered cache. */
  forget(): void {
    for (const forget of this.forgetters) forget()
  }
}
