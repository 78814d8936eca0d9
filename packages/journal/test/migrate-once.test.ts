/**
 * A connection to a file that already holds every migration runs no Migrator (a transaction, its
 * table's DDL and a read of every applied row, which each of palyrad's five connections paid at every
 * start); a new file and a file behind are migrated exactly as before. Observed through the Migrator's
 * own debug line ("Migrations complete"), which it writes whenever it runs.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Redaction } from "@palyra/core"
import Database from "better-sqlite3"
import { Effect, Logger, LogLevel, type Scope } from "effect"
import { SqliteBlobStore, SqliteJournal, SqliteTaskQueue } from "../src/index.js"
import { isMigrated, LATEST_MIGRATION, MIGRATIONS_TABLE, migrations } from "../src/internal/migrations.js"
import { makeSqlClient } from "../src/internal/sqlClient.js"

/** Runs `effect` scoped, with debug logging; whether the Migrator ran (its closing debug line). */
const migratorRan = <A, E>(effect: Effect.Effect<A, E, Scope.Scope>) => {
  const lines: Array<string> = []
  const capture = Logger.make(({ message }) => {
    for (const m of Array.isArray(message) ? message : [message]) lines.push(String(m))
  })
  return Effect.scoped(effect).pipe(
    Effect.provide(Logger.replace(Logger.defaultLogger, capture)),
    Logger.withMinimumLogLevel(LogLevel.Debug),
    Effect.map(() => lines.includes("Migrations complete"))
  )
}

const latestApplied = (filename: string) => {
  const db = new Database(filename)
  const row = db.prepare(`SELECT max(migration_id) AS id FROM ${MIGRATIONS_TABLE}`).get() as { id: number }
  const current = isMigrated(db)
  db.close()
  return { id: row.id, current }
}

const freshFile = () => join(mkdtempSync(join(tmpdir(), "palyra-migrate-once-")), "journal.db")

describe("migrations run only on a file that needs them", () => {
  it.live("a new file is migrated by whichever connection opens it first; later opens run no Migrator", () =>
    Effect.gen(function* () {
      const filename = freshFile()
      const fresh = new Database(filename)
      assert.isFalse(isMigrated(fresh)) // no table yet
      fresh.close()

      assert.isTrue(yield* migratorRan(SqliteBlobStore.make({ filename })))
      assert.deepStrictEqual(latestApplied(filename), { id: LATEST_MIGRATION, current: true })

      // Every later open, the journal's own and a store's: nothing to migrate, no Migrator.
      assert.isFalse(yield* migratorRan(SqliteJournal.make({ filename })))
      assert.isFalse(yield* migratorRan(SqliteTaskQueue.make({ filename })))
      // And the stores work on the file they did not migrate.
      const stored = yield* Effect.scoped(
        Effect.flatMap(SqliteBlobStore.make({ filename }), (s) => s.put(new TextEncoder().encode("hi"), "text/plain"))
      )
      assert.isTrue(stored.created)
    })
  )

  it.live("a file behind (an older palyrad's) is migrated to the newest, by the journal and by a store", () =>
    Effect.gen(function* () {
      const opens: ReadonlyArray<(filename: string) => Effect.Effect<unknown, unknown, Scope.Scope>> = [
        (filename) => SqliteJournal.make({ filename }),
        (filename) => SqliteBlobStore.make({ filename })
      ]
      for (const open of opens) {
        const filename = freshFile()
        // The file as a palyrad without the newest migration left it.
        const older = Object.fromEntries(
          Object.entries(migrations).filter(([id]) => Number(id.slice(0, 4)) < LATEST_MIGRATION)
        )
        const db = new Database(filename)
        yield* Effect.scoped(
          Effect.flatMap(makeSqlClient(db), (sql) =>
            Migrator.make({})({ loader: Migrator.fromRecord(older), table: MIGRATIONS_TABLE }).pipe(
              Effect.provideService(SqlClient.SqlClient, sql),
              Effect.provideService(Redaction.CurrentRedactor, Redaction.defaultRedactor)
            )
          )
        )
        assert.isFalse(isMigrated(db))
        db.close()
        assert.deepStrictEqual(latestApplied(filename), { id: LATEST_MIGRATION - 1, current: false })

        assert.isTrue(yield* migratorRan(open(filename)))
        assert.deepStrictEqual(latestApplied(filename), { id: LATEST_MIGRATION, current: true })
      }
    })
  )
})
