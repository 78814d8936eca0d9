import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { Errors, Redaction } from "@palyra/core"
import Database from "better-sqlite3"
import { Effect, type Scope } from "effect"
import { isMigrated, MIGRATIONS_TABLE, migrations } from "./migrations.js"
import { makeSqlClient } from "./sqlClient.js"
import { configureConnection } from "./walCheckpoint.js"

/** How a store beside the journal opens the journal's file. @internal */
export interface OpenOptions {
  /** The journal's file (`:memory:` gives a private database, for tests). */
  readonly filename: string
  /** How long to wait for a lock another connection or process holds (default 5,000 ms). */
  readonly busyTimeoutMs?: number | undefined
  /** `NORMAL` (default) or `FULL`, as for the journal. */
  readonly synchronous?: "NORMAL" | "FULL" | undefined
}

/** @internal */
export const storageError = (method: string) => (cause: unknown) =>
  new Errors.JournalError({ method, message: cause instanceof Error ? cause.message : String(cause), cause })

/**
 * A second connection to the journal's file, for the stores that live beside the tape (tasks,
 * memory). It runs the journal's migrations (a no-op once the journal opened the file; with the
 * default redaction rules if this connection is the first) so it never depends on the order things
 * are opened in, and closes when the scope closes. WAL lets it read while the journal writes. Once
 * open, its `busy_timeout` is 0: a write that meets the journal's writer (a worker thread) holding the
 * lock fails at once with `SQLITE_BUSY` instead of sleeping this thread in SQLite's busy handler, and
 * the store retries it after a real delay (`retryBusy`), so the event loop keeps running meanwhile.
 * @internal
 */
export const openDatabase = (
  options: OpenOptions,
  method: string
): Effect.Effect<Database.Database, Errors.JournalError, Scope.Scope> =>
  Effect.gen(function* () {
    const db = yield* Effect.acquireRelease(
      Effect.try({
        try: () => {
          const db = new Database(options.filename)
          if (options.filename !== ":memory:") db.pragma("journal_mode = WAL")
          db.pragma(`synchronous = ${options.synchronous ?? "NORMAL"}`)
          db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 5000}`)
          db.pragma("foreign_keys = ON")
          db.pragma("secure_delete = ON")
          // The journal's writer checkpoints the WAL; this connection only past its hard bound.
          if (options.filename !== ":memory:") configureConnection(db)
          return db
        },
        catch: storageError(method)
      }),
      (db) => Effect.sync(() => db.close())
    )
    if (!isMigrated(db)) {
      const sql = yield* makeSqlClient(db)
      // Two processes opening a new file at once: the loser of the migration race retries once.
      yield* Migrator.make({})({ loader: Migrator.fromRecord(migrations), table: MIGRATIONS_TABLE }).pipe(
        Effect.retry({ times: 1 }),
        Effect.provideService(SqlClient.SqlClient, sql),
        Effect.provideService(Redaction.CurrentRedactor, Redaction.defaultRedactor),
        Effect.mapError(storageError("migrate"))
      )
    }
    db.pragma("busy_timeout = 0")
    return db
  })

const isBusy = (error: unknown): boolean => {
  const cause = error instanceof Errors.JournalError ? error.cause : error
  const code = (cause as { code?: unknown } | null | undefined)?.code
  return code === "SQLITE_BUSY" || code === "SQLITE_BUSY_SNAPSHOT"
}

/** A real delay (never the test clock: another thread or process holds the lock, in real time). */
const pause = (ms: number) =>
  Effect.async<void>((resume) => {
    const timer = setTimeout(() => resume(Effect.void), ms)
    return Effect.sync(() => clearTimeout(timer))
  })

/**
 * Run a write on a store's connection (opened by `openDatabase`, `busy_timeout` 0): while it fails
 * with `SQLITE_BUSY` (another connection holds the write lock), try again after 1 ms, then 2, 4… (at
 * most 20 ms apart), for up to `timeoutMs` (default 5,000). The wait is asynchronous: this thread's
 * event loop runs meanwhile, where SQLite's own busy handler would sleep it.
 * @internal
 */
export const retryBusy =
  (timeoutMs = 5000) =>
  <A, E, R>(write: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.suspend(() => {
      const deadline = performance.now() + timeoutMs
      const attempt = (delay: number): Effect.Effect<A, E, R> =>
        Effect.catchIf(write, isBusy, (error) =>
          performance.now() + delay > deadline
            ? Effect.fail(error)
            : Effect.zipRight(pause(delay), attempt(Math.min(delay * 2, 20)))
        )
      return attempt(1)
    })
