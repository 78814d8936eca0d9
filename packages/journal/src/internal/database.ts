import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { Errors, Redaction } from "@palyra/core"
import Database from "better-sqlite3"
import { Effect, type Scope } from "effect"
import { MIGRATIONS_TABLE, migrations } from "./migrations.js"
import { makeSqlClient } from "./sqlClient.js"

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
 * are opened in, and closes when the scope closes. WAL lets it read while the journal writes; writes
 * from either wait for the other (`busy_timeout`).
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
          return db
        },
        catch: storageError(method)
      }),
      (db) => Effect.sync(() => db.close())
    )
    const sql = yield* makeSqlClient(db)
    // Two processes opening a new file at once: the loser of the migration race retries once.
    yield* Migrator.make({})({ loader: Migrator.fromRecord(migrations), table: MIGRATIONS_TABLE }).pipe(
      Effect.retry({ times: 1 }),
      Effect.provideService(SqlClient.SqlClient, sql),
      Effect.provideService(Redaction.CurrentRedactor, Redaction.defaultRedactor),
      Effect.mapError(storageError("migrate"))
    )
    return db
  })
