/** The addon's own interface (native/sendfile.cc); wrapped by `Sendfile` and `FileSender`. */
export interface NativeSender {
  /** Calls back once with 0 when every byte is sent, or an errno. Never after `close()`. */
  send(inFd: number, position: number, length: number, callback: (errno: number) => void): void
  close(): void
  /** Bytes of the send in progress not yet in the socket; 0 when none is. Missing from an addon built before it was added. */
  remaining?(): number
}

export interface SendfileStats {
  /** sendfile(2) calls made by this process. */
  readonly calls: number
  /** Bytes those calls sent. */
  readonly bytes: number
  /** Socket descriptor duplicates currently open (0 when no send is in progress). */
  readonly openDescriptors: number
  /** Bursts of sendfile calls run on the event loop: their range was wholly in the page cache. */
  readonly loopBursts: number
  /** Bursts run on the libuv thread pool: part of the range may have had to come from the disk, or the kernel has no cachestat(2). */
  readonly poolBursts: number
}

/** The addon's parked connections (native/parked-sockets.cc); wrapped by `SocketParking`. */
export interface NativeParking {
  /** Holds a duplicate of `fd` and watches it for the client leaving; throws when it cannot. */
  park(fd: number): number
  /** Writes head then body; `callback(0, fd or -1)` when written, `callback(errno, -1)` on failure. False when `id` is not parked. */
  answer(id: number, head: Buffer, body: Buffer | null, keepOpen: boolean, callback: (errno: number, fd: number) => void): boolean
  drop(id: number): void
  /** Bytes of the answer under way already in the socket; -1 when `id` is not parked. Missing from an older build. */
  written?(id: number): number
  readonly size: number
}

export interface NativeAddon {
  /** Missing from an addon built before it was added. */
  readonly Parking?: new (onGone: (id: number) => void) => NativeParking
  readonly Sender: new (socketFd: number) => NativeSender
  stats(): SendfileStats
  /** Missing from an addon built before it was added. */
  trimHeap?(): boolean
  /** mallopt(M_ARENA_MAX, n). Missing from an older build. */
  limitArenas?(n: number): boolean
  /** flock(fd, LOCK_EX or LOCK_SH, LOCK_NB): false when another open file holds the lock. Missing from an older build. */
  lockFile?(fd: number, exclusive: boolean): boolean
  /** V8's memory pressure notification (moderate, or critical when true). Missing from an older build. */
  memoryPressure?(critical: boolean): boolean
  /** V8's low memory notification (repeated full, compacting collections). Missing from an older build. */
  lowMemory?(): boolean
  /** execve(file, argv, env), env as `NAME=value` (native/exec-self.cc): returns only on failure, with the errno; what `sluice start` runs first (the server's bin/malloc-arenas.js). Missing from an older build. */
  execSelf?(file: string, argv: readonly string[], env: readonly string[]): number
  /** Sizes and inodes of many files (native/stat-files.cc), on the thread pool with a callback. Missing from an older build. */
  statFiles?(base: string, dirs: readonly string[] | string, names: readonly string[], out: Float64Array, callback?: (error: Error | null) => void): void
  /** True when `statFiles` takes `dirs` as one string, each directory followed by a NUL. Missing from an older build. */
  readonly statFilesJoined?: boolean
}
