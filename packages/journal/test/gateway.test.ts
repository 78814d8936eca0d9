import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, ScriptedModel, Tool } from "@palyra/core"
import { collect, gatewayLayer } from "@palyra/core/testing"
import Database from "better-sqlite3"
import { Effect, Option, Schedule, Schema } from "effect"
import { SqliteJournal } from "../src/index.js"
import { migrations } from "../src/internal/migrations.js"
import { makeSqlClient } from "../src/internal/sqlClient.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-gw-"))
const writes: Array<unknown> = []
const write = Tool.make("fs.write", {
  description: "write",
  parameters: Schema.Struct({ path: Schema.String }),
  risk: "sensitive",
  execute: (args) => Effect.sync(() => writes.push(args))
})

describe("Gateway over the SQLite journal", () => {
  it.live("a run waiting for approval survives closing and reopening the file, and continues once approved", () =>
    Effect.gen(function* () {
      const filename = join(dir, "durable.db")
      const script = [{ toolCalls: [{ name: "fs.write", args: { path: "a.txt" } }] }, { text: "written" }]
      const first = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "write a.txt" })
        yield* Effect.fork(collect(events))
        yield* gateway
          .listApprovals(Caller.operator("op"), { runId: run.id, status: "pending" })
          .pipe(Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (l) => l.length > 0 }))
        return run
      }).pipe(
        Effect.provide(
          gatewayLayer({
            model: ScriptedModel.make(script),
            tools: [write],
            journal: SqliteJournal.layer({ filename })
          })
        ),
        Effect.scoped
      )
      assert.deepStrictEqual(writes, [])
      const second = ScriptedModel.make(script.slice(1))
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        assert.strictEqual((yield* gateway.getRun(Caller.operator("op"), first.id)).state, "WaitingForApproval")
        const [pending] = yield* gateway.listApprovals(Caller.operator("op"), { runId: first.id, status: "pending" })
        yield* gateway.resolveApproval(Caller.operator("bob"), { approvalId: pending!.id, decision: "approve" })
        const done = yield* gateway.awaitRun(Caller.operator("op"), first.id)
        assert.strictEqual(done.state, "Done")
        const tape = yield* gateway.readTape(Caller.operator("op"), first.sessionId, { afterSeq: 0 })
        assert.deepStrictEqual(
          tape.map((e) => e.tapeSeq),
          tape.map((_, i) => i + 1)
        )
        assert.strictEqual(tape.filter((e) => e._tag === "AssistantMessage").at(-1)?._tag, "AssistantMessage")
      }).pipe(
        Effect.provide(gatewayLayer({ model: second, tools: [write], journal: SqliteJournal.layer({ filename }) })),
        Effect.scoped
      )
      assert.deepStrictEqual(writes, [{ path: "a.txt" }])
      // And the file verifies.
      const verify = yield* Effect.scoped(Effect.flatMap(SqliteJournal.make({ filename }), (j) => j.verify))
      assert.deepStrictEqual(verify, { ok: true, checked: verify.checked })
    })
  )

  it.live("start-up marks runs that were in progress as Failed (interrupted), on the tape", () =>
    Effect.gen(function* () {
      const filename = join(dir, "interrupted.db")
      const slow = ScriptedModel.make([{ text: ["a", "b"], delayPerDelta: "1 hour" }])
      const run = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "go" })
        yield* Effect.fork(collect(events))
        yield* gateway
          .getRun(Caller.operator("op"), run.id)
          .pipe(Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (r) => r.state === "InProgress" }))
        // In its model call (a run that only started would be resumed, not failed: nothing to repeat).
        yield* Effect.sync(() => slow.prompts.length).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (n) => n > 0 })
        )
        return run
      }).pipe(Effect.provide(gatewayLayer({ model: slow, journal: SqliteJournal.layer({ filename }) })), Effect.scoped)
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const after = yield* gateway.getRun(Caller.operator("op"), run.id)
        assert.strictEqual(after.state, "Failed")
        assert.strictEqual(after.error?.code, "interrupted")
        // (read, not followed: how many events the run wrote before the shutdown depends on where
        // it was — before or inside its model call — and a follower would wait for a fixed count)
        const tape = yield* gateway.readTape(Caller.operator("op"), run.sessionId, { afterSeq: 0 })
        assert.deepStrictEqual(
          tape.map((e) => e.tapeSeq),
          tape.map((_, i) => i + 1)
        )
        const last = tape.at(-1)
        assert.strictEqual(last?._tag === "RunStateChanged" ? last.to : undefined, "Failed")
      }).pipe(
        Effect.provide(gatewayLayer({ model: ScriptedModel.make([]), journal: SqliteJournal.layer({ filename }) })),
        Effect.scoped
      )
    })
  )

  it.live("opening a file written by an older schema migrates it and keeps its data", () =>
    Effect.gen(function* () {
      const filename = join(dir, "old.db")
      // Build a file at schema version 0001 only, with a session in it.
      const db = new Database(filename)
      yield* Effect.gen(function* () {
        const sql = yield* makeSqlClient(db)
        yield* Migrator.make({})({
          loader: Migrator.fromRecord({ "0001_init": migrations["0001_init"] }),
          table: "palyra_migrations"
        }).pipe(Effect.provideService(SqlClient.SqlClient, sql))
        yield* sql`INSERT INTO sessions (id, principal, created_at, updated_at) VALUES ('01KA00000000000000000000LD', 'old', 1, 1)`
      })
      db.close()
      const session = yield* Effect.scoped(
        Effect.flatMap(SqliteJournal.make({ filename }), (j) => j.getSession("01KA00000000000000000000LD" as never))
      )
      assert.strictEqual(Option.getOrThrow(session).principal, "old")
      const check = new Database(filename)
      const applied = check.prepare("SELECT migration_id, name FROM palyra_migrations ORDER BY migration_id").all()
      const index = check.prepare("SELECT name FROM sqlite_master WHERE name = 'approvals_grants'").get()
      check.close()
      assert.deepStrictEqual(
        applied,
        Object.keys(migrations).map((id) => ({ migration_id: Number(id.slice(0, 4)), name: id.slice(5) }))
      )
      assert.isAbove(applied.length, 3)
      assert.isDefined(index)
      // The session written before the record chain existed got its first version: the file verifies,
      // and an edit of that old row is now named.
      const verify = () => Effect.scoped(Effect.flatMap(SqliteJournal.make({ filename }), (j) => j.verify))
      assert.deepStrictEqual(yield* verify(), { ok: true, checked: 0 })
      const attacker = new Database(filename)
      attacker.prepare("UPDATE sessions SET principal = 'mallory' WHERE id = '01KA00000000000000000000LD'").run()
      attacker.close()
      assert.deepInclude(yield* verify(), {
        ok: false,
        reason: "row_edited",
        row: { table: "sessions", id: "01KA00000000000000000000LD", columns: ["principal"] }
      })
    })
  )
})
