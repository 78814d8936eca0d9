import * as Reactivity from "@effect/experimental/Reactivity"
import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import * as Statement from "@effect/sql/Statement"
import type Database from "better-sqlite3"
import { Effect, Scope, Stream } from "effect"

/**
 * An `@effect/sql` client over a better-sqlite3 connection the journal already holds, so migrations
 * (`Migrator`) and ad-hoc queries run on the very connection the group-commit writer uses (this
 * also makes `:memory:` work: a second connection would see a different database).
 * @internal
 */
export const makeSqlClient = (db: Database.Database): Effect.Effect<SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const run = (sql: string, params: ReadonlyArray<unknown>, values = false) =>
      Effect.try({
        try: () => {
          const statement = db.prepare(sql)
          if (statement.reader) return (values ? statement.raw(true) : statement).all(...params) as Array<never>
          statement.run(...params)
          return [] as Array<never>
        },
        catch: (cause) => new SqlError({ cause, message: `Failed to execute statement: ${String(cause)}` })
      })
    const connection: Connection = {
      execute: (sql, params, transformRows) =>
        transformRows ? Effect.map(run(sql, params), transformRows) : run(sql, params),
      executeRaw: (sql, params) => run(sql, params),
      executeValues: (sql, params) => run(sql, params, true),
      executeUnprepared: (sql, params, transformRows) =>
        transformRows ? Effect.map(run(sql, params ?? []), transformRows) : run(sql, params ?? []),
      executeStream: () => Stream.die("streaming queries are not supported by the journal's client")
    }
    const semaphore = yield* Effect.makeSemaphore(1)
    const acquirer = semaphore.withPermits(1)(Effect.succeed(connection))
    const transactionAcquirer = Effect.uninterruptibleMask((restore) =>
      Effect.as(
        Effect.zipRight(
          restore(semaphore.take(1)),
          Effect.tap(Effect.scope, (scope) => Scope.addFinalizer(scope, semaphore.release(1)))
        ),
        connection
      )
    )
    return yield* SqlClient.make({
      acquirer,
      compiler: Statement.makeCompilerSqlite(),
      transactionAcquirer,
      spanAttributes: [["db.system.name", "sqlite"]]
    })
  }).pipe(Effect.provide(Reactivity.layer))
