/**
 * Defaults of the settings that both the config schema (`config.ts`, what the
 * CLI and `--help` show) and the modules that use them (`Pipeline`,
 * `ShapeManager`, the HTTP admission control) fall back to. Each is defined
 * here once, so an embedder that leaves a setting out gets what the CLI gives.
 */

/**
 * Memory for routed transactions held for shapes still being created; past it
 * their queues spill to disk and replication pauses. A transaction bigger than
 * an eighth of it is routed from disk.
 */
export const DEFAULT_MEMORY_BUDGET_BYTES = 256 * 1024 * 1024

/** Postgres connections for initial shape snapshots, and so snapshots running at once. */
export const DEFAULT_SNAPSHOT_CONNECTIONS = 4

/** Subset queries are one-shot reads; two at a time keeps them from crowding the database or the snapshot pool. */
export const DEFAULT_SUBSET_CONNECTIONS = 2

/**
 * Connections for subquery shapes' move-in queries, apart from the snapshots':
 * while a move-in waits, every shape's watermark is held back (its clients see
 * nothing new), so it must not queue behind initial snapshots of large tables.
 */
export const MOVE_IN_CONNECTIONS = 2

/** Most shapes kept at once; a new shape beyond it evicts the least recently used one. */
export const DEFAULT_MAX_SHAPES = 1_000_000

/**
 * Most values held in subquery shapes' views, summed over every shape
 * (docs/operations.md gives the memory per entry measured by bench/subquery).
 */
export const DEFAULT_MAX_SUBQUERY_VIEW_ENTRIES = 2_000_000

/**
 * How long a ready shape no request uses is kept (0: for ever). A client that
 * follows a shape uses it at every long-poll (20 s) or SSE stream (60 s), and
 * every new client of it too, so only shapes nobody asked for in this long
 * go. A day keeps every shape of an app used daily; the shape of a client
 * that comes back later costs one snapshot and one download (a 409 and a
 * refetch), while a shape kept costs its memory and files for as long as it
 * is kept, which for one-off where clauses is for ever.
 */
export const DEFAULT_SHAPE_TTL_MS = 24 * 60 * 60 * 1000

/**
 * Shapes being created at once (snapshots running or queued for one of the
 * snapshot connections); a request that would create one more gets 503 +
 * retry-after. Each waits for a snapshot connection, so past a few dozen
 * more only add queue memory and latency.
 */
export const DEFAULT_MAX_CREATING_SHAPES = 100

/**
 * New shapes one client may create per minute (a token bucket: this many at
 * once, refilled over a minute); more get 429 + retry-after. Off by default:
 * clients are told apart by `--client-id-header`, else by peer address, and
 * behind a proxy or CDN that sets no header every client has the proxy's
 * address, so a default limit would throttle all clients together. Turn it
 * on with the header an auth proxy sets (a few hundred a minute is generous
 * for an app that opens a few dozen shapes per page). 0: no limit.
 */
export const DEFAULT_CLIENT_SHAPES_PER_MINUTE = 0

/**
 * How long a table's catalog answer serves shape requests before Postgres is
 * asked again. Within it a table dropped, recreated or altered without shapes
 * is noticed late; a table whose shapes the replication stream invalidated is
 * asked again at once.
 */
export const DEFAULT_TABLE_CACHE_MS = 1000

/**
 * How often the catalog is checked for DDL on tables with shapes that the
 * replication stream does not announce (a dropped or renamed table, a new
 * primary key or replica identity with no write after it): the longest a
 * long-poll on such a table waits for its 409. One small query per check,
 * whatever the number of shapes.
 */
export const DEFAULT_CATALOG_CHECK_MS = 1000

/**
 * How long a start waits for the storage writer lock before failing: long
 * enough for a killed writer to finish exiting (a process with a large heap
 * takes a while to be torn down), short enough that a second writer started
 * by mistake says so promptly.
 */
export const DEFAULT_WRITER_LOCK_WAIT_MS = 10_000

/**
 * A read replica re-reads the writer's watermark this often when no change
 * notification came: a backstop, since inotify wakes it at each flush on a
 * local disk; on a file system without notifications (NFS) it is the delay
 * live clients of a replica see, so set it lower there.
 */
export const DEFAULT_REPLICA_POLL_MS = 1_000

/** Admission control: `offset=-1` requests served at once; more get 503 + retry-after. */
export const DEFAULT_MAX_CONCURRENT_INITIAL = 300

/**
 * Admission control: `offset=-1` requests past `DEFAULT_MAX_CONCURRENT_INITIAL`
 * that wait for a slot, in arrival order, rather than get a 503 at once. A
 * burst of thousands of new clients (a deploy, a reconnect storm) is then
 * served as fast as the server creates shapes, with no 503 round of 6-10 s
 * during which it would sit idle. A queued request holds little besides its
 * socket, which its client keeps open anyway (keep-alive, and it retries).
 */
export const DEFAULT_INITIAL_QUEUE_LENGTH = 5_000

/**
 * Admission control: the longest an `offset=-1` request waits in that queue
 * before it gets the 503 after all. Electric's refused client comes back after
 * 6-10 s: waiting as long as that serves it no later than a refusal would; and
 * it stays well within the 20 s a long-poll is held, which every client and
 * proxy in front of a sync server must already allow a request (the official
 * client, 1.5, times out only live and refresh requests, after 45 s).
 */
export const DEFAULT_INITIAL_QUEUE_WAIT_MS = 10_000

/** Admission control: other shape requests (live waiters included) served at once. */
export const DEFAULT_MAX_CONCURRENT_EXISTING = 10_000

/** How long one server-sent-events stream stays open (it also sets the SSE responses' cache lifetime). */
export const DEFAULT_SSE_TIMEOUT_MS = 60_000

/**
 * How long the replication connection may be down before `/v1/health` answers
 * 503. Long enough for a Postgres restart and the first reconnect attempts
 * (which back off from 250 ms), short enough that a load balancer stops
 * sending clients to a server whose answers have gone stale.
 */
export const DEFAULT_HEALTH_REPLICATION_TIMEOUT_MS = 30_000

/**
 * A response body whose client takes none of it for this long is cut (as
 * nginx's `send_timeout`): a client that stops reading must not hold a log
 * file or a buffer for ever. Node writes a body in writes of at most 1 MiB
 * and counts each when it is done, so on the pread path a client slower
 * than about 17 KB/s over a whole write is cut too.
 */
export const DEFAULT_SEND_TIMEOUT_MS = 60_000

/**
 * Bodies whose file-backed bytes reach this size go out by sendfile(2) when the
 * addon is loaded. Below it the body is pread on the event loop into a pooled
 * buffer and written with one `end()` (one pread, one writev), which costs
 * less than sendfile's hand-off to the thread pool and back, a duplicated
 * descriptor, and the headers, `[` and suffix written apart. From here up the
 * pread path reads on the thread pool too and copies the bytes twice, and
 * sendfile costs less (docs/performance-notes.md has the measurements).
 */
export const DEFAULT_SENDFILE_MIN_BYTES = 256 * 1024

/**
 * Memory for bodies of log ranges recently served (`http/range-cache.ts`): a
 * hot chunk below the sendfile threshold is written from one buffer instead
 * of being read and copied per request. Enough for a few hundred small
 * shapes' initial chunks; 0 turns the cache off.
 */
export const DEFAULT_RANGE_CACHE_BYTES = 32 * 1024 * 1024

/**
 * How often the C heap's free pages are given back to the kernel (glibc's
 * malloc_trim, through the native addon). A huge transaction frees hundreds of
 * MiB of buffers that glibc would otherwise keep for the life of the process;
 * a trim of a quiet heap costs well under a millisecond.
 */
export const HEAP_TRIM_INTERVAL_MS = 10_000
/**
 * glibc malloc arenas the `sluice` command allows (heap-trim.ts
 * `limitMallocArenas`; the environment's `MALLOC_ARENA_MAX` stands instead):
 * the main thread's and one that the thread pool's and V8's helper threads
 * share. Node allocates from the main thread almost always, so sharing costs
 * little, and each arena more keeps its own fragments resident.
 */
export const MALLOC_ARENAS = 2

/**
 * Retired shapes (expired, evicted, deleted) after which V8 is asked to
 * collect once retirements pause for `RETIREMENT_QUIET_MS` (heap-trim.ts): an
 * idle shape holds a few KiB of heap, so a thousand of them are worth a
 * collection, which an idle server would otherwise never run.
 */
export const RETIRED_SHAPES_FOR_COLLECTION = 1_000
export const RETIREMENT_QUIET_MS = 2_000
/**
 * Shapes created after which, once creations pause for `CREATION_QUIET_MS`
 * and the event loop is next idle, V8 is asked to collect (heap-trim.ts):
 * making a shape allocates many times what it keeps, and an idle server would
 * keep that garbage resident.
 */
export const CREATED_SHAPES_FOR_COLLECTION = 1_000
export const CREATION_QUIET_MS = 2_000
/**
 * After that collection, every `CREATION_RECHECK_MS`, up to `CREATION_RECHECKS`
 * times, the notification is sent again while V8's committed heap exceeds what
 * it uses by more than `SLACK_MIN_BYTES` and `SLACK_RATIO` of it and the event
 * loop was idle since the last look (`IDLE_UTILIZATION`): the first starts
 * nothing when a collection is already running (one started by the burst's
 * allocation, which does not shrink the heap).
 */
export const CREATION_RECHECK_MS = 5_000
export const CREATION_RECHECKS = 3
export const SLACK_MIN_BYTES = 8 * 1024 * 1024
export const SLACK_RATIO = 0.25
/**
 * That collection is incremental (no long pause) and moves few pages; this
 * long after it, V8's low memory notification compacts what survived (full
 * collections until one frees nothing more), if the heap used is by then at
 * most `COMPACTION_MAX_HEAP_BYTES`: its pause grows with what is live (about
 * 100 ms at 20 MiB, 150-190 ms at 40 MiB, on 2 cores).
 */
export const RETIRED_COMPACTION_DELAY_MS = 10_000
export const COMPACTION_MAX_HEAP_BYTES = 32 * 1024 * 1024

/**
 * How long after a large transaction (streamed by Postgres or past the
 * assembler's limit) became durable, with no other one becoming durable
 * meanwhile, the server collects its heap and trims the C heap (heap-trim.ts):
 * its buffers are garbage then, and an idle V8 would keep them for minutes.
 */
export const LARGE_TRANSACTION_QUIET_MS = 1_000
/**
 * Those releases collect at once (critical pressure: full collections, a
 * pause) only while V8's used heap is at most this; a bigger heap (many
 * shapes) is marked incrementally instead (moderate: no long pause), and the
 * interval's trim gives the C heap back after. The pause grows with what is
 * live: a few tens of ms at 20 MiB, hundreds at 100 MiB.
 */
export const CRITICAL_RELEASE_MAX_HEAP_BYTES = 64 * 1024 * 1024
/** After that collection, how long before the C heap is trimmed: V8 frees dead buffers' memory on a background thread. */
export const RELEASE_TRIM_DELAY_MS = 500
/**
 * After that release, the server looks every `IDLE_CHECK_MS` for the moment
 * its event loop was busy less than `IDLE_UTILIZATION` of the time (the
 * clients' downloads of the transaction are over) and releases once more,
 * giving up after `IDLE_WATCH_MS`: what serving the transaction allocated is
 * garbage then.
 */
export const IDLE_CHECK_MS = 1_000
export const IDLE_UTILIZATION = 0.05
export const IDLE_WATCH_MS = 120_000

/**
 * What a subquery shape holds while a move-in's query runs (docs/protocol.md,
 * "Subquery shapes"): the transactions routed meanwhile wait in memory until
 * the splice. Past either bound the shape is dropped (clients get 409 and
 * resync) rather than memory grown: Electric's `subquery_buffer_max_transactions`
 * for the count, and a bound on their changes, which a few huge transactions
 * reach long before the count.
 */
export const DEFAULT_SUBQUERY_MAX_HELD_TRANSACTIONS = 1000
export const DEFAULT_SUBQUERY_MAX_HELD_CHANGES = 100_000

/**
 * Log compaction (shapes/compaction/): a shape's log is compacted once it holds
 * this many times the entries it had after its last compaction (or when the
 * process first saw it), and at least DEFAULT_COMPACT_MIN_ENTRIES more. 4 keeps
 * a new client's download within a few times the shape's current rows while a
 * log that mostly inserts is rarely rewritten for little gain; 0 turns it off
 * (docs/operations.md, Log compaction).
 */
export const DEFAULT_COMPACT_RATIO = 4
/** A small log is not worth a rewrite: its whole history costs a client little. */
export const DEFAULT_COMPACT_MIN_ENTRIES = 10_000
export const DEFAULT_COMPACT_INTERVAL_MS = 10_000
/**
 * How long a log that compaction replaced keeps taking copies of its shape's
 * changes before it is deleted: longer than a long-poll (20 s) plus the wait
 * for an offset past the head (10 s), so a request that picked up the old log
 * just before the switch still finds it moving.
 */
export const DEFAULT_COMPACT_RETIRE_MS = 60_000

/**
 * A standby (`sluice start --standby`) reads the writer's heads file again
 * when a new one is in place, at most this often: each reading costs it about
 * a second of CPU with 100k shapes, and the writer writes one every 30 s while
 * it changes. What changed since the last reading is left to the takeover.
 */
export const DEFAULT_STANDBY_REFRESH_MS = 10_000
